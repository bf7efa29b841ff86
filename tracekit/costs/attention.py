"""Attention: scaled dot-product attention in every form torch and flash-attn record.

FLOPs count the two matrix products per (query, key) pair that is computed:
4 · B · Hq · pairs · D for the forward (Q·Kᵀ and P·V; softmax is not counted, as in
torch.utils.flop_counter), and 2 · B · Hq · pairs · (3·Dqk + 2·Dv) for the backward
(recomputed scores, dV, dP, dK, dQ). Without a mask, pairs = Sq · Sk. Causal masking:
a square (Sq = Sk) causal attention computes half the pairs; for Sq ≠ Sk the exact count
of unmasked pairs is used, with the alignment of the op's family (torch SDPA aligns the
mask top-left, flash-attn and vLLM bottom-right). GQA/MQA: FLOPs follow the query heads,
bytes the (fewer) key/value heads actually stored.
"""

from __future__ import annotations

from tracekit.costs.cost import Cost, CostError
from tracekit.costs.dtypes import element_bytes
from tracekit.costs.inputs import OpInputs
from tracekit.costs.registry import register

TOP_LEFT, BOTTOM_RIGHT = "top-left", "bottom-right"


def score_pairs(sq: int, sk: int, causal: str | None) -> float:
    """(query, key) pairs a kernel computes: exactly, so a square causal mask is S(S+1)/2
    (the diagonal included), not S²/2, and square and non-square counts agree."""
    if not causal:
        return float(sq * sk)
    if causal == TOP_LEFT:  # query i sees keys 0..i
        n = min(sq, sk)
        return n * (n + 1) / 2.0 + max(0, sq - sk) * sk
    # bottom-right: query i sees keys 0..i + (sk - sq)
    offset = sk - sq
    seen_first = offset + 1  # keys seen by query 0 (may be <= 0)
    if seen_first >= 1:
        return sq * seen_first + sq * (sq - 1) / 2.0
    skipped = -seen_first + 1  # queries that see no key
    rows = sq - skipped
    return rows * (rows + 1) / 2.0


def attention_cost(b: int, hq: int, hkv: int, sq: int, sk: int, d_qk: int, d_v: int, dtype: str, causal: str | None,
                   *, backward: bool = False, out_dtype: str | None = None, note: str = "") -> Cost:
    if hkv <= 0 or hq % hkv:
        raise CostError(f"{hq} query heads do not share {hkv} key/value heads evenly")
    pairs = b * hq * score_pairs(sq, sk, causal)
    es, out_es = element_bytes(dtype), element_bytes(out_dtype or dtype)
    q = b * hq * sq * d_qk * es
    kv = b * hkv * sk * (d_qk + d_v) * es
    out = b * hq * sq * d_v * out_es
    if causal:
        note = f"{note}; causal ({causal})".strip("; ")
    if not backward:
        return Cost(2.0 * pairs * (d_qk + d_v), q + kv, out, "matrix", dtype, note)
    # reads q, k, v, out, dout; writes dq, dk, dv
    return Cost(2.0 * pairs * (3 * d_qk + 2 * d_v), q + kv + 2 * out, q + kv, "matrix", dtype, note)


def _bhsd(shape: list[int]) -> tuple[int, int, int, int]:
    if len(shape) != 4:
        raise CostError(f"expected [batch, heads, seq, dim], got {shape}")
    return shape[0], shape[1], shape[2], shape[3]


def _bshd(shape: list[int]) -> tuple[int, int, int, int]:
    if len(shape) != 4:
        raise CostError(f"expected [batch, seq, heads, dim], got {shape}")
    return shape[0], shape[2], shape[1], shape[3]


def _from_layout(x: OpInputs, q: int, k: int, v: int, layout: str, causal: str | None, *, backward: bool = False,
                 cu_seqlens: int | None = None) -> Cost:
    """Attention from the q/k/v inputs at positions q, k, v; `cu_seqlens` is where the
    cumulative sequence lengths sit when q/k/v may be packed ([total, heads, dim])."""
    qs, ks, vs = x.shape(q), x.shape(k), x.shape(v)
    if len(qs) == 3 and cu_seqlens is not None:
        return _varlen(x, q, k, v, cu_seqlens, causal, backward)
    split = _bhsd if layout == "bhsd" else _bshd
    b, hq, sq, d = split(qs)
    _, hkv, sk, dk = split(ks)
    _, _, _, dv = split(vs)
    if dk != d:
        raise CostError(f"query head dim {d} differs from key head dim {dk}")
    return attention_cost(b, hq, hkv, sq, sk, d, dv, x.dtype(q), causal, backward=backward)


def _varlen(x: OpInputs, q: int, k: int, v: int, cu_seqlens: int, causal: str | None, backward: bool) -> Cost:
    """Packed sequences. Per-sequence lengths are not recorded, only their number (the
    cumulative-length tensor has batch + 1 entries): sequences of equal length are assumed."""
    tq, hq, d = x.shape(q)
    tk, hkv, _ = x.shape(k)
    dv = x.shape(v)[2]
    cu = x.shape(cu_seqlens) if x.has_tensor(cu_seqlens) else []
    batch = cu[0] - 1 if len(cu) == 1 and cu[0] > 1 else 1
    one = attention_cost(1, hq, hkv, tq // batch, tk // batch, d, dv, x.dtype(q), causal, backward=backward)
    return Cost(one.flops * batch, one.bytes_read * batch, one.bytes_written * batch, "matrix", one.dtype,
                f"varlen: {batch} sequences of equal length assumed")


def _causal(flag) -> str | None:
    return TOP_LEFT if flag is True else None


# -- torch SDPA and its backends (all [B, H, S, D]) --------------------------------------
@register("aten::scaled_dot_product_attention")
def sdpa(x: OpInputs) -> Cost:
    # (q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    cost = _from_layout(x, 0, 1, 2, "bhsd", _causal(x.scalar(5)))
    if x.has_tensor(3):
        cost = Cost(cost.flops, cost.bytes_read + x.nbytes(3), cost.bytes_written, cost.kind, cost.dtype, "with attention mask")
    return cost


@register("aten::_scaled_dot_product_flash_attention")
def sdpa_flash(x: OpInputs) -> Cost:
    # (q, k, v, dropout_p, is_causal, return_debug_mask, scale)
    return _from_layout(x, 0, 1, 2, "bhsd", _causal(x.scalar(4)))


@register("aten::_scaled_dot_product_flash_attention_for_cpu")
def sdpa_flash_cpu(x: OpInputs) -> Cost:
    # (q, k, v, dropout_p, is_causal, attn_mask, scale)
    return _from_layout(x, 0, 1, 2, "bhsd", _causal(x.scalar(4)))


@register("aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention")
def sdpa_efficient(x: OpInputs) -> Cost:
    # (q, k, v, attn_bias, compute_log_sumexp, dropout_p, is_causal, ...)
    cost = _from_layout(x, 0, 1, 2, "bhsd", _causal(x.scalar(6)))
    if x.has_tensor(3):
        cost = Cost(cost.flops, cost.bytes_read + x.nbytes(3), cost.bytes_written, cost.kind, cost.dtype, "with attention bias")
    return cost


@register("aten::_scaled_dot_product_flash_attention_backward")
def sdpa_flash_backward(x: OpInputs) -> Cost:
    # (grad_out, q, k, v, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, ...)
    return _from_layout(x, 1, 2, 3, "bhsd", _causal(x.scalar(11)), backward=True)


@register("aten::_scaled_dot_product_efficient_attention_backward")
def sdpa_efficient_backward(x: OpInputs) -> Cost:
    # (grad_out, q, k, v, attn_bias, out, logsumexp, philox_seed, philox_offset, dropout_p, grad_input_mask, is_causal, scale)
    return _with_mask(_from_layout(x, 1, 2, 3, "bhsd", _causal(x.scalar(11)), backward=True), x, 4)


@register("aten::_scaled_dot_product_cudnn_attention_backward")
def sdpa_cudnn_backward(x: OpInputs) -> Cost:
    # the same arguments as aten::_cudnn_attention_backward
    return cudnn_backward(x)


def _with_mask(cost: Cost, x: OpInputs, i: int) -> Cost:
    """An explicit mask / bias tensor is read once more (it is often broadcast: [1, Sk])."""
    if not x.has_tensor(i) or not x.shape(i):
        return cost
    note = f"{cost.note}; attention mask {x.shape(i)} read".strip("; ")
    return Cost(cost.flops, cost.bytes_read + x.nbytes(i), cost.bytes_written, cost.kind, cost.dtype, note)


@register("aten::_cudnn_attention_forward")
def cudnn_forward(x: OpInputs) -> Cost:
    """cuDNN attention, PyTorch's default SDPA backend on Hopper: the whole key/value inputs
    are read (a static KV cache of S slots is read in full, the mask hides the empty slots)."""
    # (q, k, v, attn_bias, cum_seq_q, cum_seq_k, max_q, max_k, compute_log_sumexp, dropout_p, is_causal,
    #  return_debug_mask, scale)
    return _with_mask(_from_layout(x, 0, 1, 2, "bhsd", _causal(x.scalar(10)), cu_seqlens=4), x, 3)


@register("aten::_cudnn_attention_backward")
def cudnn_backward(x: OpInputs) -> Cost:
    # (grad_out, q, k, v, out, logsumexp, philox_seed, philox_offset, attn_bias, cum_seq_q, cum_seq_k, max_q, max_k,
    #  dropout_p, is_causal, scale)
    return _with_mask(_from_layout(x, 1, 2, 3, "bhsd", _causal(x.scalar(14)), backward=True, cu_seqlens=9), x, 8)


@register("aten::_scaled_dot_product_flash_attention_for_cpu_backward")
def sdpa_flash_cpu_backward(x: OpInputs) -> Cost:
    # (grad_out, q, k, v, out, logsumexp, dropout_p, is_causal, attn_mask, scale)
    return _from_layout(x, 1, 2, 3, "bhsd", _causal(x.scalar(7)), backward=True)


# -- the kernels' own entry points ([B, S, H, D], or packed [T, H, D]) --------------------
@register("aten::_flash_attention_forward")
def flash_forward(x: OpInputs) -> Cost:
    # (q, k, v, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, return_debug_mask, scale, ...)
    return _from_layout(x, 0, 1, 2, "bshd", _causal(x.scalar(8)), cu_seqlens=3)


@register("aten::_flash_attention_backward")
def flash_backward(x: OpInputs) -> Cost:
    # (grad_out, q, k, v, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, ...)
    return _from_layout(x, 1, 2, 3, "bshd", _causal(x.scalar(11)), backward=True, cu_seqlens=6)


_MASK_TYPE = {0: None, 1: TOP_LEFT, 2: BOTTOM_RIGHT}


@register("aten::_efficient_attention_forward")
def efficient_forward(x: OpInputs) -> Cost:
    # (q, k, v, bias, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, custom_mask_type, ...)
    return _with_mask(_from_layout(x, 0, 1, 2, "bshd", _MASK_TYPE.get(x.scalar(9, 0)), cu_seqlens=4), x, 3)


@register("aten::_efficient_attention_backward")
def efficient_backward(x: OpInputs) -> Cost:
    # (grad_out, q, k, v, bias, out, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, logsumexp, dropout_p,
    #  philox_seed, philox_offset, custom_mask_type, ...)
    return _with_mask(_from_layout(x, 1, 2, 3, "bshd", _MASK_TYPE.get(x.scalar(14, 0)), backward=True, cu_seqlens=6), x, 4)


# -- the flash-attn package (2.x custom ops): causal masks align bottom-right -------------
def _flash_attn(x: OpInputs, q: int, causal_at: int, backward: bool, cu_seqlens: int | None = None) -> Cost:
    causal = BOTTOM_RIGHT if x.scalar(causal_at) is True else None
    return _from_layout(x, q, q + 1, q + 2, "bshd", causal, backward=backward, cu_seqlens=cu_seqlens)


@register("flash_attn::_flash_attn_forward")
def flash_attn_forward(x: OpInputs) -> Cost:
    # (q, k, v, dropout_p, softmax_scale, causal, ...)
    return _flash_attn(x, 0, 5, False)


@register("flash_attn::_flash_attn_varlen_forward")
def flash_attn_varlen_forward(x: OpInputs) -> Cost:
    # (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal, ...)
    return _flash_attn(x, 0, 9, False, cu_seqlens=3)


@register("flash_attn::_flash_attn_backward")
def flash_attn_backward(x: OpInputs) -> Cost:
    # (dout, q, k, v, out, softmax_lse, dq, dk, dv, dropout_p, softmax_scale, causal, ...)
    return _flash_attn(x, 1, 11, True)


@register("flash_attn::_flash_attn_varlen_backward")
def flash_attn_varlen_backward(x: OpInputs) -> Cost:
    # (dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
    #  dropout_p, softmax_scale, causal, ...)
    return _flash_attn(x, 1, 15, True, cu_seqlens=9)


@register("vllm::unified_attention", "vllm::unified_attention_with_output")
def paged_attention(x: OpInputs) -> Cost:
    raise CostError("paged attention: each sequence's context length lives in the KV-cache metadata, not in the op's inputs")


# -- AMD aiter (ROCm's attention ops, flash-attn's argument order): q [b, sq, hq, d],
# k [b, sk, hk, d], v [b, sk, hk, d_v], p_dropout, softmax_scale, is_causal,
# window_size_left, window_size_right, ... (aiter/ops/mha.py, csrc/include/torch/mha_v3_fwd.h)
@register("aiter::fmha_v3_fwd", "aiter::mha_fwd")
def aiter_attention_forward(x: OpInputs) -> Cost:
    left, right = x.scalar(6, -1), x.scalar(7, -1)
    causal = x.scalar(5) is True
    if (left not in (-1, None)) or (right not in (-1, None) and not (causal and right == 0)):
        raise CostError(f"sliding-window attention (window {left}, {right}): the pairs it scores are not the full square")
    return _flash_attn(x, 0, 5, False)
