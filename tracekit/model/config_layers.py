"""A Hugging Face config -> the per-layer structure of the model: each layer's mixer
(Nemotron-H's `hybrid_override_pattern`, `layer_types`, Qwen3-Next's full-attention
interval, Jamba's attention period), its FFN (dense or MoE: DeepSeek's first dense layers,
MoE frequency, Qwen-MoE's dense-only layers), the shared experts, the sliding windows, and
the recurrent state of Gated DeltaNet and Mamba layers. Every field read through
tracekit.model.validate."""

from __future__ import annotations

from tracekit.errors import TraceError
from tracekit.model.architecture import Recurrent
from tracekit.model.validate import MAX_LAYERS, MAX_TOKENS, Fields

_MIXER_WORDS = {"attention": "attention", "full_attention": "attention", "sliding_attention": "attention",
                "linear_attention": "linear_attention", "mamba": "mamba2", "hybrid": "attention+mamba2"}


def layer_mixers(c: Fields, layers: int, pattern: str | None, model_type: str, path: str) -> tuple[str, ...]:
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


def layer_ffn_kinds(c: Fields, layers: int, experts: int, pattern: str | None, model_type: str) -> tuple[str, ...]:
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


def shared_experts_of(c: Fields, expert_ffn: int) -> tuple[int, int]:
    key = c.first("shared_expert_intermediate_size", "moe_shared_expert_intermediate_size")
    if key and c.int(key, lo=0):  # Qwen2-MoE / Qwen3-Next, Nemotron-H: one shared expert of its own width
        return 1, c.int(key, lo=0)
    n = c.int("n_shared_experts", "num_shared_experts", lo=0, hi=65536, default=0)  # DeepSeek: n experts of the routed width
    return (n, expert_ffn) if n else (0, 0)


def layer_windows(c: Fields, layers: int, path: str) -> tuple[int | None, ...]:
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


def gated_deltanet(c: Fields) -> Recurrent:
    """Gated DeltaNet (HF Qwen3_5TextConfig defaults where a field is absent)."""
    return Recurrent(heads=c.int("linear_num_value_heads", default=32), head_dim=c.int("linear_value_head_dim", default=128),
                     key_heads=c.int("linear_num_key_heads", default=16), key_dim=c.int("linear_key_head_dim", default=128),
                     conv_kernel=c.int("linear_conv_kernel_dim", hi=4096, default=4))


def mamba(c: Fields, hidden: int, model_type: str) -> Recurrent:
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
