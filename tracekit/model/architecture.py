"""The architecture numbers that fix a decoder's costs (`Architecture`), per layer: its mixer
(attention, GQA / MLA, sliding windows; Gated DeltaNet; Mamba-2 / Mamba-1 with their fixed
`Recurrent` state), its FFN (dense, MoE with shared experts, none) and the stored format of
its weights. Read from a Hugging Face config by tracekit.model.config."""

from __future__ import annotations

from dataclasses import dataclass, field

from tracekit.model.quant import KV_BYTES, WEIGHT_BYTES, Quantisation, WeightFormat

MIXERS = ("attention", "linear_attention", "mamba2", "mamba", "attention+mamba2", "none")


@dataclass(frozen=True)
class Recurrent:
    """A layer mixer with a fixed state per request instead of a KV cache."""

    heads: int  # value heads (Gated DeltaNet) or SSM heads (Mamba-2); Mamba-1: 1
    head_dim: int  # value head dim (GDN), head dim (Mamba-2); Mamba-1: the inner width
    key_heads: int = 0  # GDN key heads
    key_dim: int = 0  # GDN key head dim
    state: int = 0  # SSM state size N (Mamba)
    groups: int = 0  # Mamba-2 B/C groups
    conv_kernel: int = 4
    dt_rank: int = 0  # Mamba-1

    @property
    def inner(self) -> int:
        return self.heads * self.head_dim


@dataclass(frozen=True)
class Architecture:
    path: str
    model_type: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # dense FFN width
    vocab: int
    act_dtype: str  # activations: bf16, fp16, fp32
    attention_bias: bool = False
    tied_embeddings: bool = False
    gated_ffn: bool = True  # SwiGLU-style gate and up projections
    # per layer: the sliding window in tokens, or None for full attention
    windows: tuple[int | None, ...] = ()
    # per layer: its mixer (MIXERS; () = attention everywhere) and its FFN (dense, moe, none)
    mixers: tuple[str, ...] = ()
    ffn_kinds: tuple[str, ...] = ()
    # MoE (experts == 0: dense)
    experts: int = 0
    top_k: int = 0
    expert_intermediate: int = 0
    shared_experts: int = 0  # counted in units of shared_intermediate
    shared_intermediate: int = 0
    moe_layers: tuple[bool, ...] = ()  # per layer: MoE or dense FFN
    router_bias: bool = False
    # MLA (DeepSeek V2/V3, Kimi): low-rank query / key-value compression; 0 when absent
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_dim: int = 0
    qk_nope_dim: int = 0
    v_head_dim: int = 0
    attn_output_gate: bool = False  # Qwen3-Next / 3.5: the query projection also yields a sigmoid gate
    qk_norm: bool = False  # per-head RMSNorm on queries and keys
    linear: Recurrent | None = None  # Gated DeltaNet layers
    ssm: Recurrent | None = None  # Mamba layers
    state_dtype: str = "fp32"  # the SSM / recurrent state (the convolution state is in act_dtype)
    kv_dtype: str = "bf16"  # the KV cache
    # stored weights: representative formats (layer 0) and the per-module rule
    weights: WeightFormat = field(default_factory=lambda: WeightFormat("bf16", 2.0))  # projections
    expert_weights: WeightFormat = field(default_factory=lambda: WeightFormat("bf16", 2.0))
    embedding_weights: WeightFormat = field(default_factory=lambda: WeightFormat("bf16", 2.0))  # embeddings, lm_head, router
    quant: Quantisation | None = None

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def act_bytes(self) -> float:
        return WEIGHT_BYTES[self.act_dtype]

    @property
    def kv_bytes(self) -> float:
        return KV_BYTES[self.kv_dtype]

    def mixer(self, layer: int) -> str:
        return self.mixers[layer] if self.mixers else "attention"

    def ffn_kind(self, layer: int) -> str:
        if self.ffn_kinds:
            return self.ffn_kinds[layer]
        return "moe" if self.is_moe and (not self.moe_layers or self.moe_layers[layer]) else "dense"

    def format(self, module: str, layer: int) -> WeightFormat:
        """The stored format of `module` (attention, linear_attention, mamba, ffn, experts,
        shared_experts) in `layer`."""
        if self.quant is None:
            return self.expert_weights if module == "experts" else self.weights
        return self.quant.format(module, layer)

    def state_bytes_per_request(self, layer: int) -> float:
        """Recurrent state one request keeps in `layer`: convolution state (act dtype) + SSM state."""
        a, s = self.act_bytes, WEIGHT_BYTES[self.state_dtype]
        total = 0.0
        mixer = self.mixer(layer)
        if mixer == "linear_attention" and self.linear:
            g = self.linear
            conv_dim = 2 * g.key_heads * g.key_dim + g.heads * g.head_dim
            total += conv_dim * (g.conv_kernel - 1) * a + g.heads * g.key_dim * g.head_dim * s
        if mixer in ("mamba2", "attention+mamba2", "mamba") and self.ssm:
            m = self.ssm
            conv_dim = m.inner + 2 * m.groups * m.state
            total += conv_dim * (m.conv_kernel - 1) * a + m.inner * m.state * s
        return total

    def describe(self) -> str:
        """What was read, per layer type."""
        kinds: dict[str, int] = {}
        for i in range(self.layers):
            kinds[self.mixer(i)] = kinds.get(self.mixer(i), 0) + 1
        parts = []
        for kind, n in kinds.items():
            if kind in ("attention", "attention+mamba2"):
                if self.is_mla:
                    what = (f"MLA {self.heads} heads, latent KV {self.kv_lora_rank} + rope {self.qk_rope_dim} per token")
                else:
                    what = f"{self.heads}/{self.kv_heads} heads x {self.head_dim}"
                extras = [w for w, on in (("output gate", self.attn_output_gate), ("q/k norm", self.qk_norm)) if on]
                sliding = sum(1 for i in range(self.layers) if self.mixer(i) == kind and self.windows and self.windows[i] is not None)
                if sliding:
                    extras.append(f"{sliding} sliding-window")
                what += f", KV cache {self.kv_dtype}" + (f", {', '.join(extras)}" if extras else "")
                if kind == "attention+mamba2":
                    what += f" in parallel with Mamba-2 ({self._ssm_words()})"
                parts.append(f"{n} {'attention' if kind == 'attention' else 'attention + Mamba-2'} ({what})")
            elif kind == "linear_attention" and self.linear:
                g = self.linear
                parts.append(f"{n} Gated DeltaNet linear attention ({g.key_heads}/{g.heads} key/value heads x {g.key_dim}/{g.head_dim}, "
                             f"conv {g.conv_kernel}, state {self._state_words(i_of(self, kind))} per request, no KV cache)")
            elif kind in ("mamba2", "mamba") and self.ssm:
                parts.append(f"{n} {'Mamba-2' if kind == 'mamba2' else 'Mamba'} ({self._ssm_words()}, "
                             f"state {self._state_words(i_of(self, kind))} per request, no KV cache)")
            elif kind == "none":
                parts.append(f"{n} FFN-only")
        ffn = {}
        for i in range(self.layers):
            ffn[self.ffn_kind(i)] = ffn.get(self.ffn_kind(i), 0) + 1
        moe = (f"MoE {self.experts} experts top-{self.top_k}" + (f" + {self.shared_experts} shared" if self.shared_experts else "")
               + f" in {ffn.get('moe', 0)} layers") if self.is_moe else ""
        ffn_words = ", ".join(w for w in (moe, f"dense FFN {self.intermediate} in {ffn['dense']} layers" if ffn.get("dense") and self.is_moe else "",
                                          f"no FFN in {ffn['none']} layers" if ffn.get("none") else "") if w)
        weights = self.quant.describe(self.modules()) if self.quant is not None else (
            f"weights {self.weights.dtype}" + (f", experts {self.expert_weights.dtype}" if self.is_moe else ""))
        return (f"{self.model_type}: {self.layers} layers: {'; '.join(parts)}; hidden {self.hidden}"
                f"{'; ' + ffn_words if ffn_words else ''}; {weights}")

    def modules(self) -> list[tuple[str, int]]:
        """(module kind, layer) of every quantisable weight group the model has (Quantisation)."""
        out = []
        for i in range(self.layers):
            mixer = self.mixer(i)
            if "attention" in mixer and mixer != "linear_attention":
                out.append(("attention", i))
            if mixer == "linear_attention":
                out.append(("linear_attention", i))
            if "mamba" in mixer:
                out.append(("mamba", i))
            ffn = self.ffn_kind(i)
            if ffn == "dense":
                out.append(("ffn", i))
            elif ffn == "moe":
                out.append(("experts", i))
                if self.shared_experts:
                    out.append(("shared_experts", i))
        return out

    def _ssm_words(self) -> str:
        m = self.ssm
        if m is None:
            return ""
        if m.dt_rank:
            return f"inner {m.inner}, state {m.state}, conv {m.conv_kernel}"
        return f"{m.heads} heads x {m.head_dim}, state {m.state}, {m.groups} groups, conv {m.conv_kernel}"

    def _state_words(self, layer: int) -> str:
        return f"{self.state_bytes_per_request(layer) / 2**20:.2f} MiB ({self.state_dtype} state)"


def i_of(arch: Architecture, kind: str) -> int:
    return next(i for i in range(arch.layers) if arch.mixer(i) == kind)
