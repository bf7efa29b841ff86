"""Data movement: copies, casts, concatenation, gathers and scatters, embeddings.

No FLOPs; bytes are what is read and written: a copy reads its source and writes its
destination (each in its own dtype, so a cast counts both sizes); a gather reads the rows
it picks and the indices, and writes the rows.
"""

from __future__ import annotations

import math

from tracekit.costs.cost import Cost, CostError
from tracekit.costs.dtypes import element_bytes
from tracekit.costs.inputs import OpInputs
from tracekit.costs.registry import register


def _move(read: float, written: float, dtype: str, note: str = "") -> Cost:
    return Cost(0.0, read, written, "memory", dtype, note)


@register("aten::copy_")
def copy_(x: OpInputs) -> Cost:
    # (self=destination, src, non_blocking)
    return _move(x.nbytes(1), x.nbytes(0), x.dtype(0))


@register("aten::clone", "aten::contiguous", "aten::_to_copy", "aten::to", "aten::_copy_from")
def clone(x: OpInputs) -> Cost:
    # A cast writes the target dtype; _to_copy records it only as a ScalarType code, so the
    # output is taken to have the input's dtype.
    return _move(x.nbytes(0), x.dense_nbytes(0), x.dtype(0))


ASSUMED_FP32 = "tensor-list dtype not recorded: fp32 assumed"


def _tensor_list(x: OpInputs, i: int) -> list[list[int]]:
    dims = x.dims[i] if i < len(x.dims) else None
    if not isinstance(dims, list) or not all(isinstance(d, list) for d in dims) or not dims:
        raise CostError(f"input {i} is not a list of tensors")
    if not any(dims):
        raise CostError(f"the shapes in tensor list {i} were not recorded")
    return dims


LIST_DTYPE_FROM_PRODUCER = "tensor-list dtype from the op that made its tensors"


@register("aten::cat", "aten::stack", "aten::_cat")
def cat(x: OpInputs) -> Cost:
    shapes = _tensor_list(x, 0)
    recorded, produced = x.dtype_or_none(0), x.hints.get("list_dtype")  # see costs/list_dtypes.py
    dtype = recorded or produced or "fp32"
    n = sum(math.prod(s) for s in shapes)
    note = "" if recorded else LIST_DTYPE_FROM_PRODUCER if produced else ASSUMED_FP32
    return _move(n * element_bytes(dtype), n * element_bytes(dtype), dtype, note)


@register("aten::index_select")
def index_select(x: OpInputs) -> Cost:
    # (self, dim, index): output = self with `dim` resized to len(index)
    shape, index = x.shape(0), x.shape(2)
    dim = int(x.scalar(1, 0)) % max(1, len(shape))
    out = math.prod(shape) // max(1, shape[dim]) * math.prod(index)
    es = element_bytes(x.dtype(0))
    # Minimum traffic: repeated indices read their row once, so never more than the table.
    return _move(min(out * es, x.nbytes(0)) + x.nbytes(2), out * es, x.dtype(0))


@register("aten::embedding")
def embedding(x: OpInputs) -> Cost:
    # (weight [V, D], indices, ...)
    weight, idx = x.shape(0), x.shape(1)
    out = math.prod(idx) * weight[-1]
    es = element_bytes(x.dtype(0))
    return _move(min(out * es, x.nbytes(0)) + x.nbytes(1), out * es, x.dtype(0))  # a row is read once at least


@register("aten::embedding_dense_backward")
def embedding_backward(x: OpInputs) -> Cost:
    # (grad_output [..., D], indices, num_weights, padding_idx, scale_grad_by_freq)
    grad = x.shape(0)
    rows = int(x.scalar(2, 0))
    es = element_bytes(x.dtype(0))
    return Cost(float(math.prod(grad)), x.nbytes(0) + x.nbytes(1), rows * grad[-1] * es, "vector", x.dtype(0))


@register("aten::gather")
def gather(x: OpInputs) -> Cost:
    # (self, dim, index): output has the index's shape
    n = x.numel(2)
    es = element_bytes(x.dtype(0))
    return _move(min(n * es, x.nbytes(0)) + x.nbytes(2), n * es, x.dtype(0))


@register("aten::scatter", "aten::scatter_", "aten::scatter_add", "aten::scatter_add_", "aten::scatter_reduce", "aten::scatter_reduce_")
def scatter(x: OpInputs) -> Cost:
    # (self, dim, index, src): reads index and src, writes as many elements of self
    n = x.numel(2)
    es = element_bytes(x.dtype(0))
    inplace = x.nbytes(0) if not x.has_tensor(3) else 0
    return Cost(float(n), x.nbytes(2) + (x.nbytes(3) if x.has_tensor(3) else n * es) + inplace, n * es, "memory", x.dtype(0))


@register("aten::index_copy_")
def index_copy_(x: OpInputs) -> Cost:
    # (self, dim, index, source): the source's rows are written into self at the indexed
    # positions (a static KV cache takes its new token); the rest of self is not touched.
    return _move(x.nbytes(3) + x.nbytes(2), x.numel(3) * element_bytes(x.dtype(0)), x.dtype(0))


@register("aten::index_copy")
def index_copy(x: OpInputs) -> Cost:
    # out of place: self is copied whole, then the source's rows are written over it
    return _move(x.nbytes(0) + x.nbytes(3) + x.nbytes(2), x.dense_nbytes(0), x.dtype(0))


@register("aten::index_put_", "aten::_index_put_impl_", "aten::index_put")
def index_put(x: OpInputs) -> Cost:
    # (self, indices (list), values, accumulate, ...): values are written at the indexed
    # positions, read back first when accumulating. The written count is the values' size;
    # a 0-d value broadcast to a mask's selection writes a count the trace does not record.
    # The index list records shapes only: int64 indices are assumed.
    if not x.shape(2):
        raise CostError("index_put_ of a single value: the number of selected elements is not recorded")
    values = x.nbytes(2)
    indices = sum(math.prod(s) * 8 for s in x.dims[1] if isinstance(s, list)) if isinstance(x.dims[1], list) else 0
    accumulate = x.scalar(3) is True
    return _move(values + indices + (values if accumulate else 0.0), values, x.dtype(0))


@register("_C_cache_ops::reshape_and_cache_flash", "_C_cache_ops::reshape_and_cache")
def reshape_and_cache(x: OpInputs) -> Cost:
    # vLLM (key [T, Hkv, D], value [T, Hkv, D], key_cache, value_cache, slot_mapping, ...):
    # each new token's K and V are written into its cache slot.
    read = x.nbytes(0) + x.nbytes(1) + x.nbytes(4)
    kv_elems = x.numel(0) + x.numel(1)
    cache_dtype = x.dtype(2)
    return _move(read, kv_elems * element_bytes(cache_dtype), x.dtype(0))


@register("_C::static_scaled_fp8_quant", "_C::dynamic_scaled_fp8_quant", "_C::dynamic_per_token_scaled_fp8_quant")
def fp8_quant(x: OpInputs) -> Cost:
    # (out fp8, input, scale, ...)
    n = x.numel(1)
    return Cost(2.0 * n, x.nbytes(1), x.nbytes(0), "vector", x.dtype(1))


@register("_C::rotary_embedding")
def rotary_embedding(x: OpInputs) -> Cost:
    # (positions [T], query [T, Hq*D], key [T, Hk*D], head_size, cos_sin_cache [P, rot], is_neox): in place
    q, k = x.numel(1), x.numel(2)
    rot = x.shape(4)[-1] if x.has_tensor(4) else 0
    tokens = x.numel(0)
    read = x.nbytes(0) + x.nbytes(1) + x.nbytes(2) + tokens * rot * element_bytes(x.dtype(4))
    return Cost(3.0 * (q + k), read, x.nbytes(1) + x.nbytes(2), "vector", x.dtype(1))
