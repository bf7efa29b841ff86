"""Resampling: upsample / interpolate (nearest, nearest-exact, linear, bilinear, bicubic, trilinear).

Bytes: the input read once, the output written once (the backward reads grad_output and
writes grad_input). FLOPs: none for nearest (a pure gather); for the interpolating modes
two per tap per output element (a multiply-add per neighbour: 2 taps per interpolated
dimension, 4 for bicubic), the weights' own arithmetic not counted.
The output size comes from the op's `output_size` (a list of ints) or, in the `.vec`
overloads, from `scale_factors` (floats): out = floor(in × scale), as torch computes it.
"""

from __future__ import annotations

import math

from tracekit.costs.cost import Cost, CostError
from tracekit.costs.dtypes import element_bytes
from tracekit.costs.inputs import OpInputs
from tracekit.costs.registry import register

_TAPS = {"nearest": 0, "linear": 2, "bicubic": 4}  # taps per interpolated dimension
_DIMS = {"1d": 1, "2d": 2, "3d": 3}


def _spatial_lists(x: OpInputs, nd: int) -> tuple[list[int] | None, list[float] | None]:
    """The first int list of `nd` entries (an output size) and the first float list (scale factors)."""
    size = scales = None
    for i in range(1, len(x.concrete)):
        value = x.scalar(i)
        if not isinstance(value, list) or len(value) != nd:
            continue
        if size is None and all(isinstance(v, int) for v in value):
            size = value
        elif scales is None and all(isinstance(v, (int, float)) for v in value):
            scales = [float(v) for v in value]
    return size, scales


def _output_spatial(x: OpInputs, shape: list[int], nd: int) -> list[int]:
    size, scales = _spatial_lists(x, nd)
    if size is not None:
        return size
    if scales is not None:
        return [math.floor(d * s) for d, s in zip(shape[-nd:], scales)]
    raise CostError("neither the output size nor the scale factors were recorded")


def _forward(mode: str, nd: int):
    def cost(x: OpInputs) -> Cost:
        shape = x.shape(0)
        if len(shape) < nd:
            raise CostError(f"input {shape} has fewer than {nd} spatial dimensions")
        out = math.prod(shape[:-nd]) * math.prod(_output_spatial(x, shape, nd))
        flops = 2.0 * _TAPS[mode] ** nd * out if _TAPS[mode] else 0.0
        return Cost(flops, x.nbytes(0), out * element_bytes(x.dtype(0)), "vector" if flops else "memory", x.dtype(0))
    return cost


def _backward(mode: str, nd: int):
    def cost(x: OpInputs) -> Cost:
        # (grad_output, output_size, input_size, ...): grad_input has the input's size
        size = x.scalar(2)
        if not isinstance(size, list) or len(size) < nd:
            raise CostError("the input size of the upsample backward was not recorded")
        grad_in = math.prod(size)
        flops = 2.0 * _TAPS[mode] ** nd * x.numel(0) if _TAPS[mode] else 0.0
        return Cost(flops, x.nbytes(0), grad_in * element_bytes(x.dtype(0)), "vector" if flops else "memory", x.dtype(0))
    return cost


_OPS = {  # op name stem -> (mode, spatial dimensions)
    **{f"upsample_nearest{s}": ("nearest", _DIMS[s]) for s in _DIMS},
    **{f"_upsample_nearest_exact{s}": ("nearest", _DIMS[s]) for s in _DIMS},
    "upsample_linear1d": ("linear", 1), "upsample_bilinear2d": ("linear", 2), "_upsample_bilinear2d_aa": ("linear", 2),
    "upsample_bicubic2d": ("bicubic", 2), "_upsample_bicubic2d_aa": ("bicubic", 2), "upsample_trilinear3d": ("linear", 3),
}
for _stem, (_mode, _nd) in _OPS.items():
    register(f"aten::{_stem}")(_forward(_mode, _nd))
    register(f"aten::{_stem}_backward")(_backward(_mode, _nd))
