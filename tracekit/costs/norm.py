"""Normalisation layers, forward and backward: layer, RMS, group and batch norm.

Bytes: the activation read once and written once, plus the (small) affine parameters and
saved statistics. FLOPs: about five per element (mean, variance, normalise, scale, shift)
forward and eight backward; these ops are memory-bound and torch.utils.flop_counter does
not count them.
"""

from __future__ import annotations

from tracekit.costs.cost import Cost
from tracekit.costs.inputs import OpInputs
from tracekit.costs.registry import register


def _params(x: OpInputs, indices) -> float:
    return sum(x.nbytes(i) for i in indices if x.has_tensor(i))


@register("aten::native_layer_norm", "aten::layer_norm")
def layer_norm(x: OpInputs) -> Cost:
    # (input, normalized_shape, weight, bias, eps)
    return Cost(5.0 * x.numel(0), x.nbytes(0) + _params(x, (2, 3)), x.dense_nbytes(0), "vector", x.dtype(0))


@register("aten::native_layer_norm_backward")
def layer_norm_backward(x: OpInputs) -> Cost:
    # (grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask)
    params = _params(x, (5, 6))
    return Cost(8.0 * x.numel(0), x.nbytes(0) + x.nbytes(1) + _params(x, (3, 4)) + params, x.dense_nbytes(1) + params, "vector", x.dtype(0))


@register("aten::rms_norm", "aten::_fused_rms_norm", "_C::rms_norm")
def rms_norm(x: OpInputs) -> Cost:
    # aten: (input, normalized_shape, weight, eps); vLLM _C::rms_norm(out, input, weight, eps)
    if x.has_tensor(1) and len(x.shape(1)) == len(x.shape(0)):  # vLLM's out-first form
        return Cost(4.0 * x.numel(1), x.nbytes(1) + _params(x, (2,)), x.nbytes(0), "vector", x.dtype(1))
    return Cost(4.0 * x.numel(0), x.nbytes(0) + _params(x, (2,)), x.dense_nbytes(0), "vector", x.dtype(0))


@register("_C::fused_add_rms_norm")
def fused_add_rms_norm(x: OpInputs) -> Cost:
    # (input, residual, weight, eps): residual += input; input = rms_norm(residual) * weight
    n = x.numel(0)
    return Cost(5.0 * n, x.nbytes(0) + x.nbytes(1) + x.nbytes(2), x.nbytes(0) + x.nbytes(1), "vector", x.dtype(0))


@register("aiter::rms_norm", "aiter::rmsnorm2d_fwd")
def aiter_rms_norm(x: OpInputs) -> Cost:
    # AMD aiter (ck_tile Rmsnorm2dFwd): (input, weight, eps, use_model_sensitive_rmsnorm) -> out
    return Cost(4.0 * x.numel(0), x.nbytes(0) + _params(x, (1,)), x.dense_nbytes(0), "vector", x.dtype(0))


@register("aiter::rmsnorm2d_fwd_with_add_ck", "aiter::rmsnorm2d_fwd_with_add")
def aiter_rms_norm_with_add(x: OpInputs) -> Cost:
    # (out, input, residual_in, residual_out, weight, eps, ...): residual_out = input + residual_in;
    # out = rms_norm(residual_out) * weight. Reads input, residual_in and the weight; writes both outputs.
    n = x.numel(1)
    return Cost(5.0 * n, x.nbytes(1) + x.nbytes(2) + _params(x, (4,)), x.nbytes(0) + x.nbytes(3), "vector", x.dtype(1))


@register("aten::native_batch_norm", "aten::cudnn_batch_norm", "aten::miopen_batch_norm", "aten::_native_batch_norm_legit",
          "aten::_native_batch_norm_legit_no_training", "aten::batch_norm")
def batch_norm(x: OpInputs) -> Cost:
    # (input, weight, bias, running_mean, running_var, training, momentum, eps)
    return Cost(5.0 * x.numel(0), x.nbytes(0) + _params(x, (1, 2, 3, 4)), x.dense_nbytes(0), "vector", x.dtype(0))


@register("aten::native_batch_norm_backward", "aten::miopen_batch_norm_backward")
def batch_norm_backward(x: OpInputs) -> Cost:
    # (grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps, output_mask)
    params = _params(x, (2,))
    return Cost(8.0 * x.numel(0), x.nbytes(0) + x.nbytes(1) + _params(x, (2, 5, 6)), x.dense_nbytes(1) + 2 * params, "vector", x.dtype(0))


@register("aten::cudnn_batch_norm_backward")
def cudnn_batch_norm_backward(x: OpInputs) -> Cost:
    # (input, grad_output, weight, running_mean, running_var, save_mean, save_var, epsilon, reserve)
    params = _params(x, (2,))
    return Cost(8.0 * x.numel(0), x.nbytes(0) + x.nbytes(1) + _params(x, (2, 5, 6)), x.dense_nbytes(0) + 2 * params, "vector", x.dtype(0))


@register("aten::native_group_norm")
def group_norm(x: OpInputs) -> Cost:
    # (input, weight, bias, N, C, HxW, group, eps)
    return Cost(5.0 * x.numel(0), x.nbytes(0) + _params(x, (1, 2)), x.nbytes(0), "vector", x.dtype(0))


@register("aten::native_group_norm_backward")
def group_norm_backward(x: OpInputs) -> Cost:
    # (grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask)
    params = _params(x, (4,))
    return Cost(8.0 * x.numel(0), x.nbytes(0) + x.nbytes(1) + _params(x, (2, 3)) + params, x.nbytes(1) + 2 * params, "vector", x.dtype(0))
