"""A Hugging Face `config.json` -> the architecture numbers that fix a decoder's costs.

Layer mixers: attention (GQA, attention bias, sliding windows, MLA with its compressed
latent KV, Qwen3-Next/3.5 output gate and q/k norms), Gated DeltaNet linear attention
(Qwen3-Next / Qwen3.5: a fixed recurrent and convolution state per request), Mamba-2
(Nemotron-H `hybrid_override_pattern`, Falcon-H1 parallel attention + Mamba-2) and Mamba-1
(Jamba). FFNs: dense (gated or not), MoE with shared experts, or none (Nemotron-H's mixer-only
layers). Multimodal configs are read from their nested `text_config`.

Weights: the stored format of every module from `quantization_config` (ModelOpt NVFP4 / FP8,
MXFP4, FP8 per-tensor / block, compressed-tensors groups, GPTQ, AWQ, bitsandbytes) or an
explicit weight dtype; the modules left unquantised come from the config's
`modules_to_not_convert` / `ignore` / `exclude_modules` / `ignored_layers`. Bytes include
scales, zero points and group indices (tracekit.model.quant). Every field is read through
tracekit.model.validate: whatever cannot be read is one TraceError naming the file and key.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from tracekit.errors import TraceError
from tracekit.model.quant import (
    KV_BYTES, WEIGHT_BYTES, Quantisation, WeightFormat, kv_dtype_from, named_format, quantisation,
)
from tracekit.model.validate import MAX_LAYERS, MAX_SIZE, MAX_TOKENS, Fields, read_config

__all__ = ["Architecture", "WeightFormat", "WEIGHT_BYTES", "KV_BYTES", "load_config"]

# Decoders whose FFN is two matrices (up, down) instead of SwiGLU's three.
_UNGATED = {"gpt2", "gpt_neox", "gptj", "opt", "bloom", "falcon", "phi", "gpt_bigcode", "starcoder2", "nemotron_h", "nemotron"}
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}
# Families with per-head RMSNorm on queries and keys (no config switch), besides `use_qk_norm` / `qk_layernorm`.
_QK_NORM = ("qwen3", "qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "olmo2", "gemma3", "gemma3_text")
MIXERS = ("attention", "linear_attention", "mamba2", "mamba", "attention+mamba2", "none")
_MIXER_WORDS = {"attention": "attention", "full_attention": "attention", "sliding_attention": "attention",
                "linear_attention": "linear_attention", "mamba": "mamba2", "hybrid": "attention+mamba2"}


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


def load_config(path: str | os.PathLike, weight_dtype: str | None = None, kv_dtype: str | None = None) -> Architecture:
    """Read a config.json (or a directory holding one). `weight_dtype` overrides the stored
    format of every projection and expert weight (not the embeddings, nor the modules the
    config keeps unquantised); `kv_dtype` the KV cache's (default: the config's, else the
    activations')."""
    path = os.fspath(path)
    file, raw = read_config(path)
    if weight_dtype is not None and weight_dtype not in WEIGHT_BYTES:
        raise TraceError(path, f"unknown weight dtype {weight_dtype!r}; known: {', '.join(WEIGHT_BYTES)}")
    if kv_dtype is not None and kv_dtype not in KV_BYTES:
        raise TraceError(path, f"unknown KV-cache dtype {kv_dtype!r}; known: {', '.join(KV_BYTES)}")
    top = Fields(path, raw)
    text = top.obj("text_config")
    c = text if text is not None and not top.has("hidden_size") else top
    return _architecture(file, path, c, top, weight_dtype, kv_dtype)


def _architecture(file: str, path: str, c: Fields, top: Fields, weight_dtype: str | None, kv_dtype: str | None) -> Architecture:
    model_type = c.text("model_type", default=None) or top.text("model_type", default="unknown")
    hidden = c.int("hidden_size", "n_embd", "d_model")
    pattern = c.text("hybrid_override_pattern", default=None, limit=MAX_LAYERS)
    layers = c.int("num_hidden_layers", "n_layer", "num_layers", hi=MAX_LAYERS, default=len(pattern) if pattern else ...)
    heads = c.int("num_attention_heads", "n_head")
    kv_heads = c.int("num_key_value_heads", "num_kv_heads", default=heads, hi=heads)
    if heads % kv_heads:
        raise TraceError(path, f"model config: {heads} attention heads do not share {kv_heads} key/value heads evenly")
    head_dim = c.int("head_dim", "attention_head_dim", default=max(hidden // heads, 1))
    vocab = c.int("vocab_size")
    dtype_name = c.text("torch_dtype", "dtype", default=None) or top.text("torch_dtype", "dtype", default="bfloat16")
    act = _TORCH_DTYPES.get(dtype_name.lower().replace("torch.", ""), "bf16")
    mixers = _mixers(c, layers, pattern, model_type, path)
    experts = c.int("num_local_experts", "num_experts", "n_routed_experts", lo=0, hi=65536, default=0)
    top_k = c.int("num_experts_per_tok", "experts_per_token", "num_experts_per_token", "moe_topk", lo=0, hi=65536, default=0)
    if experts and not 0 < top_k <= experts:
        raise TraceError(path, f"model config: top-k {top_k} of {experts} experts")
    dense_ffn = c.int("intermediate_size", "ffn_dim", "n_inner", lo=0, default=0)
    expert_ffn = c.int("moe_intermediate_size", lo=0, default=dense_ffn) if experts else 0
    ffn_kinds = _ffn_kinds(c, layers, experts, pattern, model_type)
    if not dense_ffn and not expert_ffn and any(k != "none" for k in ffn_kinds):
        raise TraceError(path, "model config lacks `intermediate_size`")
    shared_n, shared_ffn = _shared_experts(c, expert_ffn)
    mla = c.has("kv_lora_rank")
    kv = kv_dtype or _kv_from_config(c, top) or act
    quant = quantisation(c, top, act, weight_dtype, layers, mixers)
    state = c.text("mamba_ssm_dtype", "mamba_ssm_cache_dtype", default=None)
    qk_norm = model_type in _QK_NORM or c.flag("use_qk_norm") or c.flag("qk_layernorm")
    return Architecture(
        path=file, model_type=model_type, hidden=hidden, layers=layers, heads=heads,
        kv_heads=1 if mla else kv_heads, head_dim=head_dim, intermediate=dense_ffn or expert_ffn, vocab=vocab, act_dtype=act,
        attention_bias=c.flag("attention_bias", c.flag("qkv_bias")) or model_type in ("qwen2", "qwen2_moe"),
        tied_embeddings=c.flag("tie_word_embeddings") or top.flag("tie_word_embeddings"),
        gated_ffn=model_type not in _UNGATED,
        windows=_windows(c, layers, path),
        mixers=mixers, ffn_kinds=ffn_kinds,
        experts=experts, top_k=top_k if experts else 0, expert_intermediate=expert_ffn,
        shared_experts=shared_n, shared_intermediate=shared_ffn, moe_layers=tuple(k == "moe" for k in ffn_kinds),
        router_bias=model_type == "gpt_oss",
        q_lora_rank=c.int("q_lora_rank", lo=0, default=0) if mla else 0, kv_lora_rank=c.int("kv_lora_rank") if mla else 0,
        qk_rope_dim=c.int("qk_rope_head_dim", lo=0, default=0) if mla else 0,
        qk_nope_dim=c.int("qk_nope_head_dim", lo=0, default=0) if mla else 0,
        v_head_dim=c.int("v_head_dim", default=head_dim) if mla else 0,
        attn_output_gate=c.flag("attn_output_gate", model_type.startswith(("qwen3_next", "qwen3_5"))),
        qk_norm=qk_norm,
        linear=_gdn(c) if "linear_attention" in mixers else None,
        ssm=_ssm(c, hidden, model_type) if any(m in ("mamba2", "mamba", "attention+mamba2") for m in mixers) else None,
        state_dtype=_TORCH_DTYPES.get((state or "").lower().replace("torch.", ""), act),
        kv_dtype=kv,
        weights=quant.format("attention", 0), expert_weights=quant.format("experts", 0),
        embedding_weights=named_format(act, act), quant=quant,
    )


def _mixers(c: Fields, layers: int, pattern: str | None, model_type: str, path: str) -> tuple[str, ...]:
    if pattern:  # Nemotron-H: M Mamba-2, * attention, - MLP only, E MoE only
        if len(pattern) != layers or set(pattern) - set("M*-E"):
            raise TraceError(path, f"model config `hybrid_override_pattern` must have one of M * - E per layer ({layers} layers)")
        return tuple({"M": "mamba2", "*": "attention"}.get(ch, "none") for ch in pattern)
    if model_type.startswith("falcon_h1"):
        return ("attention+mamba2",) * layers
    types = c.items("layers_block_type") or c.items("layer_types")
    if types:
        if len(types) != layers:
            raise TraceError(path, f"model config `layer_types` names {len(types)} layers, not {layers}")
        out = []
        for i, t in enumerate(types):
            if t not in _MIXER_WORDS:
                raise TraceError(path, f"model config `layer_types[{i}]` is {t[:40]!r}, not one of {', '.join(_MIXER_WORDS)}")
            out.append("mamba" if t == "mamba" and model_type.startswith("jamba") else _MIXER_WORDS[t])
        return tuple(out)
    if c.has("full_attention_interval"):  # Qwen3-Next / 3.5: every n-th layer is full attention
        n = c.int("full_attention_interval", hi=MAX_LAYERS)
        return tuple("attention" if (i + 1) % n == 0 else "linear_attention" for i in range(layers))
    if c.has("attn_layer_period"):  # Jamba
        period = c.int("attn_layer_period", hi=MAX_LAYERS)
        offset = c.int("attn_layer_offset", lo=0, hi=MAX_LAYERS, default=0)
        return tuple("attention" if i % period == offset else "mamba" for i in range(layers))
    return ()


def _ffn_kinds(c: Fields, layers: int, experts: int, pattern: str | None, model_type: str) -> tuple[str, ...]:
    if pattern:
        if "E" in pattern and not experts:
            raise c.fail("hybrid_override_pattern", "names MoE layers (E) but the config has no `n_routed_experts`")
        return tuple({"-": "dense", "E": "moe"}.get(ch, "none") for ch in pattern)
    if not experts:
        return ("dense",) * layers
    if c.has("expert_layer_period"):  # Jamba
        period = c.int("expert_layer_period", hi=MAX_LAYERS)
        offset = c.int("expert_layer_offset", lo=0, hi=MAX_LAYERS, default=0)
        return tuple("moe" if i % period == offset else "dense" for i in range(layers))
    first_dense = c.int("first_k_dense_replace", lo=0, hi=MAX_LAYERS, default=0)  # DeepSeek
    every = c.int("decoder_sparse_step", "moe_layer_freq", "interleave_moe_layer_step", hi=MAX_LAYERS, default=1)
    dense_only = set(c.items("mlp_only_layers", kind=int))  # Qwen-MoE
    return tuple("moe" if i >= first_dense and i not in dense_only and (every == 1 or (i + 1) % every == 0) else "dense"
                 for i in range(layers))


def _shared_experts(c: Fields, expert_ffn: int) -> tuple[int, int]:
    key = c.first("shared_expert_intermediate_size", "moe_shared_expert_intermediate_size")
    if key and c.int(key, lo=0):  # Qwen2-MoE / Qwen3-Next, Nemotron-H: one shared expert of its own width
        return 1, c.int(key, lo=0)
    n = c.int("n_shared_experts", "num_shared_experts", lo=0, hi=65536, default=0)  # DeepSeek: n experts of the routed width
    return (n, expert_ffn) if n else (0, 0)


def _windows(c: Fields, layers: int, path: str) -> tuple[int | None, ...]:
    window = c.int("sliding_window", hi=MAX_TOKENS, default=None)
    types = c.items("layer_types")
    if types and len(types) == layers:
        if window is None and "sliding_attention" in types:
            raise TraceError(path, "model config lacks `sliding_window` (layer_types name sliding layers)")
        return tuple(window if t == "sliding_attention" else None for t in types)
    if not window:
        return (None,) * layers
    pattern = c.int("sliding_window_pattern", lo=0, hi=MAX_LAYERS, default=0)  # Gemma: every pattern-th layer is full attention
    if pattern > 1:
        return tuple(None if (i + 1) % pattern == 0 else window for i in range(layers))
    if "use_sliding_window" in c.data:  # Qwen2: sliding from layer max_window_layers on, when enabled
        if not c.flag("use_sliding_window"):
            return (None,) * layers
        start = c.int("max_window_layers", lo=0, hi=MAX_TOKENS, default=0)
        return tuple(window if i >= start else None for i in range(layers))
    return (window,) * layers  # Mistral / Mixtral: every layer


def _gdn(c: Fields) -> Recurrent:
    """Gated DeltaNet (HF Qwen3_5TextConfig defaults where a field is absent)."""
    return Recurrent(heads=c.int("linear_num_value_heads", default=32), head_dim=c.int("linear_value_head_dim", default=128),
                     key_heads=c.int("linear_num_key_heads", default=16), key_dim=c.int("linear_key_head_dim", default=128),
                     conv_kernel=c.int("linear_conv_kernel_dim", hi=4096, default=4))


def _ssm(c: Fields, hidden: int, model_type: str) -> Recurrent:
    if model_type.startswith("jamba") or c.has("mamba_dt_rank"):  # Mamba-1
        expand = c.int("mamba_expand", hi=64, default=2)
        rank = c.data.get("mamba_dt_rank")
        dt_rank = -(-hidden // 16) if rank in (None, "auto") else c.int("mamba_dt_rank")
        return Recurrent(heads=1, head_dim=expand * hidden, state=c.int("mamba_d_state", default=16),
                         conv_kernel=c.int("mamba_d_conv", hi=4096, default=4), dt_rank=dt_rank)
    heads = c.int("mamba_num_heads", "mamba_n_heads", default=128)
    inner = c.int("mamba_d_ssm", default=0) or c.int("mamba_expand", "expand", hi=64, default=2) * hidden
    head_dim = c.data.get("mamba_head_dim", c.data.get("mamba_d_head"))
    head_dim = max(inner // heads, 1) if head_dim in (None, "auto") else c.int(c.first("mamba_head_dim", "mamba_d_head"))
    return Recurrent(heads=heads, head_dim=head_dim, state=c.int("ssm_state_size", "mamba_d_state", default=128),
                     groups=c.int("n_groups", "mamba_n_groups", default=1), conv_kernel=c.int("conv_kernel", "mamba_d_conv", hi=4096, default=4))


def _kv_from_config(c: Fields, top: Fields) -> str | None:
    for scope in (top, c):
        q = scope.obj("quantization_config")
        if q is not None:
            found = kv_dtype_from(q)
            if found:
                return found
    return None


__all__ += ["MAX_SIZE"]
