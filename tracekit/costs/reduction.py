"""Reductions and softmax: read the input once, write the (smaller) output once.

FLOPs: one per input element for a reduction; five per element for softmax (max, subtract,
exp, sum, divide) and its log variant, three for their backward. torch.utils.flop_counter
counts none of these.
"""

from __future__ import annotations

import math

from tracekit.costs.cost import Cost
from tracekit.costs.dtypes import element_bytes
from tracekit.costs.inputs import OpInputs
from tracekit.costs.registry import register


def reduced_shape(shape: list[int], dims, keepdim: bool) -> list[int]:
    if dims is None or dims == []:
        return [1] * len(shape) if keepdim else []
    dims = [dims] if isinstance(dims, int) else dims
    axes = {d % len(shape) for d in dims} if shape else set()
    return [1 if i in axes else n for i, n in enumerate(shape) if keepdim or i not in axes]


def _reduce(x: OpInputs, dim_at: int | None, keepdim_at: int | None, out_dtype: str | None = None) -> Cost:
    shape = x.shape(0)
    dtype = x.dtype(0)
    dims = x.scalar(dim_at) if dim_at is not None else None
    keepdim = bool(x.scalar(keepdim_at, False)) if keepdim_at is not None else False
    n_out = math.prod(reduced_shape(shape, dims, keepdim))
    return Cost(float(math.prod(shape)), x.nbytes(0), n_out * element_bytes(out_dtype or dtype), "vector", dtype)


# (self, dim, keepdim, ...)
for _name in "sum mean amax amin prod nansum logsumexp var std norm".split():
    register(f"aten::{_name}")(lambda x: _reduce(x, 1, 2))
for _name in "max min".split():
    register(f"aten::{_name}")(lambda x: _reduce(x, 1 if len(x) > 1 else None, 2 if len(x) > 2 else None))
register("aten::argmax", "aten::argmin")(lambda x: _reduce(x, 1, 2, out_dtype="int64"))
register("aten::any", "aten::all")(lambda x: _reduce(x, 1 if len(x) > 1 else None, 2 if len(x) > 2 else None, out_dtype="bool"))


@register("aten::cumsum", "aten::cumprod")
def scan(x: OpInputs) -> Cost:
    n = x.numel(0)
    return Cost(float(n), x.nbytes(0), x.dense_nbytes(0), "vector", x.dtype(0))


@register("aten::_softmax", "aten::softmax", "aten::_log_softmax", "aten::log_softmax", "aten::_safe_softmax")
def softmax(x: OpInputs) -> Cost:
    n = x.numel(0)
    dtype = x.dtype(0)
    # _softmax(self, dim, half_to_float): half_to_float writes fp32
    out = "fp32" if x.scalar(2) is True else dtype
    return Cost(5.0 * n, x.nbytes(0), n * element_bytes(out), "vector", dtype)


@register("aten::_softmax_backward_data", "aten::_log_softmax_backward_data")
def softmax_backward(x: OpInputs) -> Cost:
    # (grad_output, output, dim, input_dtype)
    n = x.numel(0)
    return Cost(3.0 * n, x.nbytes(0) + x.nbytes(1), x.dense_nbytes(0), "vector", x.dtype(0))
