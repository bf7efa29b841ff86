"""Indexing by integer tensors, and the small integer ops around a mixture-of-experts router.

An integer index's *shape* fixes how many elements an indexing op moves; only a boolean
mask makes the count depend on values. So:

- `index` (advanced indexing) reads the selected elements of `self` and the indices and
  writes the result; its result's shape is read from the ops it runs inside itself
  (costs/index_shapes.py). A gather of stacked expert weights by the routed expert ids
  (`W[ids]`, HF's batched-experts path) moves [tokens x top-k, out, in] elements.
  Repeated indices are read as often as they are selected: rows picked twice lie far apart
  in the result (each a whole expert matrix), so the second read misses the cache; the
  read is still never counted above the whole of `self` (index_select's rule).
- `index_add_`, `take`: the index's shape, as `gather` / `scatter` in costs/memory.py.
- `masked_select`, `nonzero`, `masked_scatter`: the count depends on the mask's values,
  which the trace does not record: no cost, and the reason says so.
- `histc` reads its input and writes its bins; `bincount` writes max(input) + 1 counts
  (value-dependent; `minlength` is the floor counted); `argsort` is a sort that writes
  int64 positions; `topk` writes k values and k int64 positions per row.

FLOPs: one per element touched (a comparison, an add); these ops are bound by memory.
"""

from __future__ import annotations

import math

from tracekit.costs.cost import Cost, CostError
from tracekit.costs.dtypes import element_bytes
from tracekit.costs.inputs import OpInputs
from tracekit.costs.registry import register

INDEX_BYTES = 8  # torch's index tensors are int64 (an int32 index is converted before the kernel)
SELECTED_FROM_MASK = "boolean-mask index: the count selected at run time, read from the op's restride"


@register("aten::index")
def index(x: OpInputs) -> Cost:
    result = x.hints.get("index_result")
    if result is None:
        raise CostError("advanced indexing whose result shape was not recorded (no restride of self under the op)")
    es = element_bytes(x.dtype(0))
    n = math.prod(result)
    indices = sum(math.prod(s) for s in x.hints.get("index_shapes", [])) * INDEX_BYTES
    note = SELECTED_FROM_MASK if x.hints.get("index_from_mask") else "integer index: the result's shape from the op's restride"
    return Cost(0.0, min(n * es, x.nbytes(0)) + indices, n * es, "memory", x.dtype(0), note)


def _index_add(x: OpInputs, copies_self: bool) -> Cost:
    # (self, dim, index, source, alpha / reduce): each row of source is added into the row of
    # self its index names: read source, the index and those rows of self; write those rows.
    # The out-of-place form first copies self whole.
    n = x.numel(3)
    touched = min(n * element_bytes(x.dtype(0)), x.nbytes(0))
    read = x.nbytes(3) + x.nbytes(2) + touched + (x.nbytes(0) if copies_self else 0.0)
    written = touched + (x.dense_nbytes(0) if copies_self else 0.0)
    return Cost(float(n), read, written, "vector", x.dtype(0))


register("aten::index_add_", "aten::index_reduce_")(lambda x: _index_add(x, copies_self=False))
register("aten::index_add", "aten::index_reduce")(lambda x: _index_add(x, copies_self=True))


@register("aten::take")
def take(x: OpInputs) -> Cost:
    # (self, index): the result has the index's shape
    n = x.numel(1)
    es = element_bytes(x.dtype(0))
    return Cost(0.0, min(n * es, x.nbytes(0)) + x.nbytes(1), n * es, "memory", x.dtype(0))


@register("aten::masked_select", "aten::nonzero", "aten::nonzero_static", "aten::masked_scatter", "aten::masked_scatter_",
          "aten::argwhere")
def value_dependent(x: OpInputs) -> Cost:
    raise CostError("boolean mask: the number of selected elements depends on the mask's values, not recorded")


@register("aten::histc")
def histc(x: OpInputs) -> Cost:
    # (self, bins, min, max): every element lands in one bin; the bins are written once
    n, bins = x.numel(0), int(x.scalar(1, 100))
    return Cost(float(n), x.nbytes(0), bins * element_bytes(x.dtype(0)), "vector", x.dtype(0))


@register("aten::bincount")
def bincount(x: OpInputs) -> Cost:
    # (self, weights?, minlength): max(self) + 1 counts (int64, or the weights' dtype)
    n = x.numel(0)
    weights = x.has_tensor(1)
    minlength = int(x.scalar(2, 0) or 0)
    out = element_bytes(x.dtype(1)) if weights else INDEX_BYTES
    read = x.nbytes(0) + (x.nbytes(1) if weights else 0.0)
    return Cost(float(n), read, minlength * out, "vector", x.dtype(0),
                "bincount: max(input) + 1 counts, value-dependent; minlength counted")


@register("aten::topk")
def topk(x: OpInputs) -> Cost:
    # (self, k, dim, largest, sorted): k values and k int64 positions per row along dim
    shape = x.shape(0)
    if not shape:
        raise CostError("topk of a scalar")
    k = int(x.scalar(1, 1))
    dim = int(x.scalar(2, -1)) % len(shape)
    n, length = math.prod(shape), shape[dim]
    if length == 0:
        raise CostError("empty input")
    kept = n // length * min(k, length)
    return Cost(n * max(1.0, math.log2(length)), x.nbytes(0), kept * (element_bytes(x.dtype(0)) + INDEX_BYTES), "vector",
                x.dtype(0), "n log n comparisons")


@register("aten::sort", "aten::argsort")
def sort(x: OpInputs) -> Cost:
    # the sorted values and their int64 positions (argsort runs a sort and keeps the positions)
    n = x.numel(0)
    if n == 0:
        raise CostError("empty input")
    return Cost(n * max(1.0, math.log2(n)), x.nbytes(0), x.dense_nbytes(0) + n * INDEX_BYTES, "vector", x.dtype(0), "n log n comparisons")
