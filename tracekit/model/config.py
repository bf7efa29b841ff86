"""A Hugging Face `config.json` -> the architecture numbers that fix a decoder's costs.

Dense decoders (Llama, Qwen2/3, Mistral: GQA, attention bias, tied embeddings), MoE
(Mixtral, Qwen-MoE, gpt-oss, DeepSeek with MLA attention), sliding-window layers, and
weight quantisation from `quantization_config` or an explicit weight dtype. Whatever cannot
be read becomes one TraceError naming the file and the missing field.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from tracekit.errors import TraceError

# Bytes per stored weight element, scales included: MXFP4 keeps 4-bit values with one 8-bit
# scale per 32 (4.25 bits); NVFP4 one 8-bit scale per 16 (4.5 bits).
WEIGHT_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5, "mxfp4": 4.25 / 8, "nvfp4": 4.5 / 8}
# Decoders whose FFN is two matrices (up, down) instead of SwiGLU's three.
_UNGATED = {"gpt2", "gpt_neox", "gptj", "opt", "bloom", "falcon", "phi", "gpt_bigcode", "starcoder2"}
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}


@dataclass(frozen=True)
class WeightFormat:
    dtype: str  # as stored: bf16, fp8, mxfp4, int4, ...
    bytes_per_param: float

    @property
    def compute_dtype(self) -> str | None:
        """The matrix unit's dtype when the format computes natively (fp8); None: activations' dtype."""
        return "fp8" if self.dtype == "fp8" else None


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
    act_dtype: str  # activations and KV cache: bf16, fp16, fp32
    attention_bias: bool = False
    tied_embeddings: bool = False
    gated_ffn: bool = True  # SwiGLU-style gate and up projections
    # per layer: the sliding window in tokens, or None for full attention
    windows: tuple[int | None, ...] = ()
    # MoE (experts == 0: dense)
    experts: int = 0
    top_k: int = 0
    expert_intermediate: int = 0
    shared_experts: int = 0  # counted in units of shared_intermediate
    shared_intermediate: int = 0
    moe_layers: tuple[bool, ...] = ()  # per layer: MoE or dense FFN
    router_bias: bool = False
    # MLA (DeepSeek V2/V3): low-rank query / key-value compression; 0 when absent
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_dim: int = 0
    qk_nope_dim: int = 0
    v_head_dim: int = 0
    # stored weights
    weights: WeightFormat = field(default_factory=lambda: WeightFormat("bf16", 2.0))  # projections
    expert_weights: WeightFormat = field(default_factory=lambda: WeightFormat("bf16", 2.0))
    embedding_weights: WeightFormat = field(default_factory=lambda: WeightFormat("bf16", 2.0))  # embeddings, lm_head

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def act_bytes(self) -> float:
        return WEIGHT_BYTES[self.act_dtype]

    def describe(self) -> str:
        moe = f", MoE {self.experts} experts top-{self.top_k}" + (f" + {self.shared_experts} shared" if self.shared_experts else "") if self.is_moe else ""
        sliding = sum(w is not None for w in self.windows)
        return (f"{self.model_type}: {self.layers} layers, hidden {self.hidden}, {self.heads}/{self.kv_heads} heads x {self.head_dim}"
                f"{moe}{f', {sliding} sliding-window layers' if sliding else ''}; weights {self.weights.dtype}"
                f"{f', experts {self.expert_weights.dtype}' if self.is_moe else ''}")


def load_config(path: str | os.PathLike, weight_dtype: str | None = None) -> Architecture:
    """Read a config.json (or a directory holding one). `weight_dtype` overrides the stored
    format of every projection and expert weight (not the embeddings)."""
    path = os.fspath(path)
    file = os.path.join(path, "config.json") if os.path.isdir(path) else path
    try:
        with open(file, encoding="utf-8") as f:
            raw = json.load(f)
    except FileNotFoundError:
        raise TraceError(path, "no such model config (pass a config.json or a directory holding one)") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TraceError(path, f"model config is not valid JSON ({exc})") from None
    except OSError as exc:
        raise TraceError(path, f"cannot read model config ({exc.strerror})") from None
    if not isinstance(raw, dict):
        raise TraceError(path, "model config is not a JSON object")
    if weight_dtype is not None and weight_dtype not in WEIGHT_BYTES:
        raise TraceError(path, f"unknown weight dtype {weight_dtype!r}; known: {', '.join(WEIGHT_BYTES)}")
    try:
        return _architecture(file, _text_config(raw), weight_dtype)
    except _Missing as exc:
        raise TraceError(path, f"model config lacks {exc}") from None
    except (TypeError, ValueError) as exc:
        raise TraceError(path, f"model config has a field of the wrong type ({exc})") from None


class _Missing(Exception):
    pass


def _text_config(raw: dict) -> dict:
    """Multimodal configs nest the language model's numbers under `text_config`."""
    inner = raw.get("text_config")
    if isinstance(inner, dict) and "hidden_size" not in raw:
        return {**inner, "quantization_config": raw.get("quantization_config", inner.get("quantization_config")),
                "torch_dtype": inner.get("torch_dtype") or raw.get("torch_dtype")}
    return raw


def _get(c: dict, *names: str, default: Any = _Missing) -> Any:
    for name in names:
        if c.get(name) is not None:
            return c[name]
    if default is _Missing:
        raise _Missing(" / ".join(f"`{n}`" for n in names))
    return default


def _positive(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"`{name}` must be a positive integer, not {value!r}")
    return value


def _architecture(path: str, c: dict, weight_dtype: str | None) -> Architecture:
    hidden = _positive(_get(c, "hidden_size", "n_embd", "d_model"), "hidden_size")
    layers = _positive(_get(c, "num_hidden_layers", "n_layer", "num_layers"), "num_hidden_layers")
    heads = _positive(_get(c, "num_attention_heads", "n_head"), "num_attention_heads")
    kv_heads = _positive(_get(c, "num_key_value_heads", default=heads), "num_key_value_heads")
    if heads % kv_heads:
        raise ValueError(f"{heads} attention heads do not share {kv_heads} key/value heads evenly")
    head_dim = _positive(_get(c, "head_dim", default=hidden // heads), "head_dim")
    vocab = _positive(_get(c, "vocab_size"), "vocab_size")
    act = _TORCH_DTYPES.get(str(_get(c, "torch_dtype", "dtype", default="bfloat16")).lower().replace("torch.", ""), "bf16")
    experts = int(_get(c, "num_local_experts", "num_experts", "n_routed_experts", default=0) or 0)
    top_k = int(_get(c, "num_experts_per_tok", "experts_per_token", "num_experts_per_token", default=0) or 0)
    if experts and not 0 < top_k <= experts:
        raise ValueError(f"top-k {top_k} of {experts} experts")
    dense_ffn = int(_get(c, "intermediate_size", "ffn_dim", "n_inner", default=0) or 0)
    expert_ffn = int(_get(c, "moe_intermediate_size", default=dense_ffn) or 0) if experts else 0
    if not dense_ffn and not expert_ffn:
        raise _Missing("`intermediate_size`")
    shared_n, shared_ffn = _shared_experts(c, expert_ffn)
    proj, expert_w, embed = _weight_formats(c, act, weight_dtype)
    mla = c.get("kv_lora_rank") is not None
    return Architecture(
        path=path, model_type=str(c.get("model_type", "unknown")), hidden=hidden, layers=layers, heads=heads,
        kv_heads=1 if mla else kv_heads, head_dim=head_dim, intermediate=dense_ffn or expert_ffn, vocab=vocab, act_dtype=act,
        attention_bias=bool(c.get("attention_bias", c.get("qkv_bias", False))) or str(c.get("model_type")) in ("qwen2", "qwen2_moe"),
        tied_embeddings=bool(c.get("tie_word_embeddings", False)),
        gated_ffn=str(c.get("model_type")) not in _UNGATED,
        windows=_windows(c, layers),
        experts=experts, top_k=top_k if experts else 0, expert_intermediate=expert_ffn,
        shared_experts=shared_n, shared_intermediate=shared_ffn, moe_layers=_moe_layers(c, layers, experts),
        router_bias=str(c.get("model_type")) == "gpt_oss",
        q_lora_rank=int(c.get("q_lora_rank") or 0), kv_lora_rank=int(c.get("kv_lora_rank") or 0) if mla else 0,
        qk_rope_dim=int(c.get("qk_rope_head_dim") or 0) if mla else 0, qk_nope_dim=int(c.get("qk_nope_head_dim") or 0) if mla else 0,
        v_head_dim=int(c.get("v_head_dim") or head_dim) if mla else 0,
        weights=proj, expert_weights=expert_w, embedding_weights=embed,
    )


def _shared_experts(c: dict, expert_ffn: int) -> tuple[int, int]:
    if c.get("shared_expert_intermediate_size"):  # Qwen2-MoE: one shared expert of its own width
        return 1, int(c["shared_expert_intermediate_size"])
    n = int(c.get("n_shared_experts") or c.get("num_shared_experts") or 0)  # DeepSeek: n experts of the routed width
    return (n, expert_ffn) if n else (0, 0)


def _moe_layers(c: dict, layers: int, experts: int) -> tuple[bool, ...]:
    if not experts:
        return (False,) * layers
    first_dense = int(c.get("first_k_dense_replace") or 0)  # DeepSeek
    every = int(c.get("decoder_sparse_step") or c.get("moe_layer_freq") or 1)  # Qwen-MoE, DeepSeek
    dense_only = set(c.get("mlp_only_layers") or ())  # Qwen-MoE
    return tuple(i >= first_dense and (i + 1) % every == 0 and i not in dense_only if every > 1 else i >= first_dense and i not in dense_only
                 for i in range(layers))


def _windows(c: dict, layers: int) -> tuple[int | None, ...]:
    window = c.get("sliding_window")
    types = c.get("layer_types")
    if isinstance(types, list) and len(types) == layers:
        if window is None and any(t == "sliding_attention" for t in types):
            raise _Missing("`sliding_window` (layer_types name sliding layers)")
        return tuple(int(window) if t == "sliding_attention" else None for t in types)
    if not window:
        return (None,) * layers
    pattern = c.get("sliding_window_pattern")  # Gemma: every pattern-th layer is full attention
    if isinstance(pattern, int) and pattern > 1:
        return tuple(None if (i + 1) % pattern == 0 else int(window) for i in range(layers))
    if "use_sliding_window" in c:  # Qwen2: sliding from layer max_window_layers on, when enabled
        if not c["use_sliding_window"]:
            return (None,) * layers
        start = int(c.get("max_window_layers") or 0)
        return tuple(int(window) if i >= start else None for i in range(layers))
    return (int(window),) * layers  # Mistral / Mixtral: every layer


def _weight_formats(c: dict, act: str, override: str | None) -> tuple[WeightFormat, WeightFormat, WeightFormat]:
    plain = WeightFormat(act, WEIGHT_BYTES[act])
    if override:
        fmt = WeightFormat(override, WEIGHT_BYTES[override])
        return fmt, fmt, plain
    q = c.get("quantization_config")
    if not q:
        return plain, plain, plain
    if not isinstance(q, dict):
        raise ValueError("`quantization_config` is not an object")
    fmt = _quant_format(q)
    skipped = [str(m) for m in (q.get("modules_to_not_convert") or q.get("ignored_layers") or q.get("ignore") or [])]

    def kept(module: str) -> bool:
        """Is this module left unquantised? Patterns are globs (`model.layers.*.self_attn`) or names."""
        for pattern in skipped:
            rx = re.escape(pattern).replace(r"\*", r"[^.]*")
            if re.search(rf"(^|\.){rx}($|\.)", module) or pattern == module.split(".")[-1]:
                return True
        return False

    proj = plain if kept("model.layers.0.self_attn.q_proj") else fmt
    experts = plain if kept("model.layers.0.mlp.experts") else fmt
    return proj, experts, plain  # embeddings and lm_head are not quantised by these methods


def _quant_format(q: dict) -> WeightFormat:
    method = str(q.get("quant_method", "")).lower()
    if method in ("mxfp4",):
        return WeightFormat("mxfp4", WEIGHT_BYTES["mxfp4"])
    if method in ("fp8", "fbgemm_fp8"):
        block = q.get("weight_block_size")
        scale = 4.0 / (block[0] * block[1]) if isinstance(block, list) and len(block) == 2 else 0.0  # one fp32 scale per block
        return WeightFormat("fp8", 1.0 + scale)
    if method == "compressed-tensors":  # one scheme for the linear layers: its weights' bits and type
        groups = [g for g in (q.get("config_groups") or {}).values() if isinstance(g, dict) and isinstance(g.get("weights"), dict)]
        if groups:
            w = groups[0]["weights"]
            bits, kind = int(w.get("num_bits") or 8), str(w.get("type", "int"))
            if kind == "float" and bits == 8:
                return WeightFormat("fp8", 1.0)
            if kind == "float" and bits == 4:
                return WeightFormat("nvfp4", WEIGHT_BYTES["nvfp4"])
            group = int(w.get("group_size") or 0)
            return WeightFormat(f"int{bits}", bits / 8 + (2 / group if group else 0.0))
    if method in ("gptq", "awq", "bitsandbytes") or q.get("bits"):
        bits = int(q.get("bits") or q.get("w_bit") or (4 if q.get("load_in_4bit") else 8))
        group = int(q.get("group_size") or q.get("q_group_size") or 128)
        # packed values plus an fp16 scale and a packed zero point per group
        return WeightFormat(f"int{bits}", bits / 8 + (2 + bits / 8) / max(group, 1))
    raise ValueError(f"quantization method {method or '(none named)'!r} is not known; pass --weight-dtype "
                     f"({', '.join(WEIGHT_BYTES)})")
