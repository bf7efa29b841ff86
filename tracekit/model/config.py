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

This module reads the model-wide fields; the per-layer structure is read in config_layers,
and the result is a tracekit.model.architecture.Architecture.
"""

from __future__ import annotations

import os

from tracekit.errors import TraceError
from tracekit.model.architecture import Architecture
from tracekit.model.config_layers import gated_deltanet, layer_ffn_kinds, layer_mixers, layer_windows, mamba, shared_experts_of
from tracekit.model.quant import KV_BYTES, WEIGHT_BYTES, kv_dtype_from, named_format, quantisation
from tracekit.model.validate import MAX_LAYERS, Fields, read_config

__all__ = ["load_config"]

# Decoders whose FFN is two matrices (up, down) instead of SwiGLU's three.
_UNGATED = {"gpt2", "gpt_neox", "gptj", "opt", "bloom", "falcon", "phi", "gpt_bigcode", "starcoder2", "nemotron_h", "nemotron"}
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}
# Families with per-head RMSNorm on queries and keys (no config switch), besides `use_qk_norm` / `qk_layernorm`.
_QK_NORM = ("qwen3", "qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "olmo2", "gemma3", "gemma3_text")


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
    mixers = layer_mixers(c, layers, pattern, model_type, path)
    experts = c.int("num_local_experts", "num_experts", "n_routed_experts", lo=0, hi=65536, default=0)
    top_k = c.int("num_experts_per_tok", "experts_per_token", "num_experts_per_token", "moe_topk", lo=0, hi=65536, default=0)
    if experts and not 0 < top_k <= experts:
        raise TraceError(path, f"model config: top-k {top_k} of {experts} experts")
    dense_ffn = c.int("intermediate_size", "ffn_dim", "n_inner", lo=0, default=0)
    expert_ffn = c.int("moe_intermediate_size", lo=0, default=dense_ffn) if experts else 0
    ffn_kinds = layer_ffn_kinds(c, layers, experts, pattern, model_type)
    if not dense_ffn and not expert_ffn and any(k != "none" for k in ffn_kinds):
        raise TraceError(path, "model config lacks `intermediate_size`")
    shared_n, shared_ffn = shared_experts_of(c, expert_ffn)
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
        windows=layer_windows(c, layers, path),
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
        linear=gated_deltanet(c) if "linear_attention" in mixers else None,
        ssm=mamba(c, hidden, model_type) if any(m in ("mamba2", "mamba", "attention+mamba2") for m in mixers) else None,
        state_dtype=_TORCH_DTYPES.get((state or "").lower().replace("torch.", ""), act),
        kv_dtype=kv,
        weights=quant.format("attention", 0), expert_weights=quant.format("experts", 0),
        embedding_weights=named_format(act, act), quant=quant,
    )



def _kv_from_config(c: Fields, top: Fields) -> str | None:
    for scope in (top, c):
        q = scope.obj("quantization_config")
        if q is not None:
            found = kv_dtype_from(q)
            if found:
                return found
    return None
