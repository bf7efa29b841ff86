"""Pooling: read the input window by window, write the (smaller) output once.

FLOPs: one comparison or addition per window element per output element. Bytes: input and
output once (+ int64 indices for max pooling with indices).
"""

from __future__ import annotations

import math

from tracekit.costs.cost import Cost, CostError
from tracekit.costs.dtypes import element_bytes
from tracekit.costs.inputs import OpInputs
from tracekit.costs.registry import register


def _pool_out(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    span = size + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:  # the last window must start inside the input
        out -= 1
    return out


def _pair(value, dims: int, default=None) -> list[int]:
    if value is None or value == []:
        if default is None:
            raise CostError("pooling window not recorded")
        return default
    value = [value] if isinstance(value, (int, float)) else list(value)
    return [int(v) for v in (value * dims if len(value) == 1 else value)]


def _window_cost(x: OpInputs, kernel, stride, padding, dilation, ceil_mode: bool, with_indices: bool) -> Cost:
    shape = x.shape(0)
    spatial = shape[2:] if len(shape) >= 3 else shape[1:]
    dims = len(spatial)
    k = _pair(kernel, dims)
    s = _pair(stride, dims, default=k)
    p = _pair(padding, dims, default=[0] * dims)
    d = _pair(dilation, dims, default=[1] * dims)
    out_spatial = [_pool_out(n, *args, ceil_mode) for n, args in zip(spatial, zip(k, s, p, d))]
    lead = math.prod(shape[: len(shape) - dims])
    n_out = lead * math.prod(out_spatial)
    es = element_bytes(x.dtype(0))
    written = n_out * es + (n_out * 8 if with_indices else 0)
    return Cost(float(n_out * math.prod(k)), x.nbytes(0), written, "vector", x.dtype(0))


@register("aten::max_pool2d_with_indices", "aten::max_pool3d_with_indices", "aten::max_pool2d", "aten::max_pool1d")
def max_pool(x: OpInputs) -> Cost:
    # (self, kernel_size, stride, padding, dilation, ceil_mode)
    return _window_cost(x, x.scalar(1), x.scalar(2), x.scalar(3), x.scalar(4), bool(x.scalar(5, False)), "with_indices" in str(x.types))


@register("aten::avg_pool2d", "aten::avg_pool3d", "aten::avg_pool1d")
def avg_pool(x: OpInputs) -> Cost:
    # (self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    return _window_cost(x, x.scalar(1), x.scalar(2), x.scalar(3), None, bool(x.scalar(4, False)), False)


@register("aten::max_pool2d_with_indices_backward", "aten::max_pool3d_with_indices_backward")
def max_pool_backward(x: OpInputs) -> Cost:
    # (grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices): scatter the
    # gradient through the saved indices into a zeroed input-sized gradient.
    n_out = x.numel(0)
    indices = x.nbytes(7) if x.has_tensor(7) else n_out * 8
    return Cost(float(n_out), x.nbytes(0) + indices, x.nbytes(1), "memory", x.dtype(0))


@register("aten::_adaptive_avg_pool2d", "aten::adaptive_avg_pool2d", "aten::_adaptive_avg_pool3d")
def adaptive_avg_pool(x: OpInputs) -> Cost:
    # (self, output_size): every input element is summed once
    out = x.scalar(1)
    shape = x.shape(0)
    if not isinstance(out, list):
        raise CostError("adaptive pooling output size not recorded")
    n_out = math.prod(shape[: len(shape) - len(out)]) * math.prod(out)
    return Cost(float(x.numel(0)), x.nbytes(0), n_out * element_bytes(x.dtype(0)), "vector", x.dtype(0))
