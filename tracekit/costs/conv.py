"""Convolutions, forward and backward, any dimensionality, grouped and transposed.

FLOPs as torch.utils.flop_counter counts them: 2 · N · Cout · (Cin / groups) · prod(kernel)
· prod(output spatial) for the forward (input spatial for a transposed convolution), and
that once more for each gradient the backward computes (input, weight). Bytes: input,
weight and output once each (+ bias).
"""

from __future__ import annotations

import math

from tracekit.costs.cost import Cost, CostError
from tracekit.costs.dtypes import element_bytes
from tracekit.costs.inputs import OpInputs
from tracekit.costs.registry import register


def output_spatial(in_spatial: list[int], kernel: list[int], stride: list[int], padding: list[int], dilation: list[int],
                   transposed: bool = False, output_padding: list[int] | None = None) -> list[int]:
    dims = len(in_spatial)
    stride, padding, dilation = (_expand(v, dims) for v in (stride, padding, dilation))
    out_pad = _expand(output_padding or [0], dims)
    if transposed:
        return [(i - 1) * s - 2 * p + d * (k - 1) + op + 1 for i, k, s, p, d, op in zip(in_spatial, kernel, stride, padding, dilation, out_pad)]
    return [(i + 2 * p - d * (k - 1) - 1) // s + 1 for i, k, s, p, d in zip(in_spatial, kernel, stride, padding, dilation)]


def _expand(value, dims: int) -> list[int]:
    if value is None:
        raise CostError("stride / padding / dilation not recorded")
    if isinstance(value, (int, float)):
        return [int(value)] * dims
    value = [int(v) for v in value]
    return value * dims if len(value) == 1 else value


def conv_flops(batch: int, w: list[int], conv_spatial: list[int]) -> float:
    return 2.0 * batch * math.prod(w) * math.prod(conv_spatial)


def _forward(x: OpInputs, bias_at: int | None, stride_at: int, padding_at: int, dilation_at: int, transposed_at: int | bool | None,
             output_padding_at: int | None, groups_at: int) -> Cost:
    inp, w = x.shape(0), x.shape(1)
    if len(inp) < 3 or len(w) != len(inp):
        raise CostError(f"convolution input {inp} and weight {w} do not match")
    # transposed_at: the input that says so, True for ops that always are, None for never
    transposed = transposed_at is True or (isinstance(transposed_at, int) and not isinstance(transposed_at, bool) and bool(x.scalar(transposed_at, False)))
    groups = int(x.scalar(groups_at, 1) or 1)
    hinted = x.hints.get("output_shape")
    if hinted is not None and x.scalar(stride_at) is None:
        out_spatial = list(hinted[2:])  # from the backward pass's grad_output (costs/autograd.py)
    else:
        out_spatial = output_spatial(inp[2:], w[2:], x.scalar(stride_at), x.scalar(padding_at), x.scalar(dilation_at),
                                 transposed, x.scalar(output_padding_at) if output_padding_at is not None else None)
    if min(out_spatial) <= 0:
        raise CostError(f"convolution of {inp} by {w} has an empty output {out_spatial}")
    c_out = w[1] * groups if transposed else w[0]
    out = [inp[0], c_out, *out_spatial]
    dtype = x.dtype(0)
    es = element_bytes(dtype)
    flops = conv_flops(inp[0], w, inp[2:] if transposed else out_spatial)
    bias = x.nbytes(bias_at) if bias_at is not None and x.has_tensor(bias_at) else 0
    return Cost(flops, x.nbytes(0) + x.nbytes(1) + bias, math.prod(out) * es, "matrix", dtype)


@register("aten::convolution", "aten::_convolution")
def convolution(x: OpInputs) -> Cost:
    # (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, ...)
    return _forward(x, 2, 3, 4, 5, 6, 7, 8)


@register("aten::cudnn_convolution")
def cudnn_convolution(x: OpInputs) -> Cost:
    # (input, weight, padding, stride, dilation, groups, benchmark, deterministic, allow_tf32)
    if x.scalar(3) is None and "output_shape" not in x.hints:
        raise CostError("stride and padding not recorded (2021 schema has no concrete inputs) and no backward pass gives the output size")
    return _forward(x, None, 3, 2, 4, None, None, 5)


@register("aten::miopen_convolution", "aten::mkldnn_convolution")
def miopen_convolution(x: OpInputs) -> Cost:
    # (input, weight, bias, padding, stride, dilation, groups, ...)
    return _forward(x, 2, 4, 3, 5, None, None, 6)


@register("aten::cudnn_convolution_transpose", "aten::miopen_convolution_transpose")
def conv_transpose(x: OpInputs) -> Cost:
    # cudnn: (input, weight, padding, output_padding, stride, dilation, groups, ...)
    return _forward(x, None, 4, 2, 5, True, 3, 6)


@register("aten::convolution_backward")
def convolution_backward(x: OpInputs) -> Cost:
    # (grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, output_mask)
    grad_out, inp, w = x.shape(0), x.shape(1), x.shape(2)
    transposed = bool(x.scalar(7, False))
    mask = x.scalar(10) or [True, True, True]
    one = conv_flops(inp[0], w, inp[2:] if transposed else grad_out[2:])
    dtype = x.dtype(0)
    need_input, need_weight = bool(mask[0]), bool(mask[1])
    read = x.nbytes(0) + (x.nbytes(2) if need_input else 0) + (x.nbytes(1) if need_weight else 0)
    written = (x.nbytes(1) if need_input else 0) + (x.nbytes(2) if need_weight else 0)
    if len(mask) > 2 and mask[2]:
        written += grad_out[1] * element_bytes(dtype)
    return Cost(one * (need_input + need_weight), read, written, "matrix", dtype)


@register("aten::cudnn_convolution_backward_input", "aten::miopen_convolution_backward_input")
def conv_backward_input(x: OpInputs) -> Cost:
    # (input_size, grad_output, weight, padding, stride, dilation, groups, ...): the FLOPs need
    # only grad_output and weight; the input's size is a list the 2021 schema did not record.
    grad_out, w = x.shape(1), x.shape(2)
    dtype = x.dtype(1)
    flops = conv_flops(grad_out[0], w, grad_out[2:])
    size = x.scalar(0) or x.hints.get("input_size")
    written = math.prod(size) * element_bytes(dtype) if isinstance(size, list) and size else None
    if written is None:
        raise CostError("the input size of a backward-input convolution was not recorded")
    return Cost(flops, x.nbytes(1) + x.nbytes(2), written, "matrix", dtype)


@register("aten::cudnn_convolution_backward_weight", "aten::miopen_convolution_backward_weight")
def conv_backward_weight(x: OpInputs) -> Cost:
    # (weight_size, grad_output, input, padding, stride, dilation, groups, ...)
    size = x.scalar(0) or x.hints.get("weight_size")
    if not isinstance(size, list) or not size:
        raise CostError("the weight size of a backward-weight convolution was not recorded")
    grad_out = x.shape(1)
    dtype = x.dtype(1)
    return Cost(conv_flops(grad_out[0], size, grad_out[2:]), x.nbytes(1) + x.nbytes(2), math.prod(size) * element_bytes(dtype), "matrix", dtype)
