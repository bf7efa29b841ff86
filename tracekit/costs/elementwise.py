"""Elementwise ops: unary, binary, ternary, with broadcasting and dtype conversion.

One FLOP per output element per operation (an activation such as GELU is counted as one:
these ops are bound by memory, and their FLOPs never decide the roofline). Bytes: every
tensor input once, the output once; in-place ops write their first input.
torch.utils.flop_counter does not count elementwise ops.
"""

from __future__ import annotations

import math

from tracekit.costs.cost import Cost, CostError
from tracekit.costs.dtypes import element_bytes
from tracekit.costs.inputs import OpInputs
from tracekit.costs.registry import register


def broadcast_shape(shapes: list[list[int]]) -> list[int]:
    out: list[int] = []
    for i in range(1, max((len(s) for s in shapes), default=0) + 1):
        dims = {s[-i] for s in shapes if i <= len(s)}
        dims.discard(1)
        if len(dims) > 1:
            raise CostError(f"shapes do not broadcast: {shapes}")
        out.append(dims.pop() if dims else 1)
    return out[::-1]


def result_dtype(x: OpInputs, tensors: list[int]) -> str:
    """Type promotion, roughly as torch does it: dimensioned tensors decide before 0-d ones,
    floats before bools and integers, the wider before the narrower."""
    def rank(i: int) -> tuple:
        dtype = x.dtype(i)
        is_float = dtype.startswith(("fp", "bf", "tf", "c"))
        return (len(x.shape(i)) > 0, dtype != "bool", is_float, element_bytes(dtype))

    return x.dtype(max(tensors, key=rank))


def elementwise_cost(x: OpInputs, *, arity: int, flops_per_element: float = 1.0, out_dtype: str | None = None,
                     in_place: bool = False, reads: bool = True) -> Cost:
    """The first `arity` arguments are operands (tensors or Python scalars); a dimensioned
    tensor after them is an `out=` argument: written, not read. 0-d entries are scalars:
    their bytes are negligible. `mul(x, 2.0, out=y)` reads x once and writes y once."""
    tensors = [i for i in x.tensor_indices() if len(x.shape(i)) > 0] or x.tensor_indices()
    if not tensors:
        raise CostError("no tensor input with a known dtype")
    operands = [i for i in tensors if i < arity] or tensors[:1]
    shapes = [x.shape(i) for i in operands]
    out_shape = shapes[0] if in_place else broadcast_shape(shapes)
    n_out = math.prod(out_shape)
    dtype = result_dtype(x, operands)
    out_dtype = out_dtype or dtype
    read = sum(x.nbytes(i) for i in operands) if reads else 0.0
    return Cost(flops_per_element * n_out, read, n_out * element_bytes(out_dtype), "vector", dtype)


def _register_all(names: str, arity: int, **kwargs) -> None:
    ops = names.split()
    register(*(f"aten::{n}" for n in ops))(lambda x: elementwise_cost(x, arity=arity, **kwargs))
    register(*(f"aten::{n}_" for n in ops))(lambda x: elementwise_cost(x, arity=arity, in_place=True, **kwargs))


_register_all(
    "abs neg exp exp2 expm1 log log2 log10 log1p sqrt rsqrt reciprocal sigmoid tanh relu gelu silu mish "
    "hardswish hardsigmoid hardtanh elu leaky_relu softplus sin cos tan erf erfc floor ceil round trunc sign "
    "bitwise_not logical_not clamp clamp_min clamp_max nan_to_num square", 1,
)
_register_all(
    "add sub mul div floor_divide pow maximum minimum fmod remainder bitwise_and bitwise_or bitwise_xor "
    "logical_and logical_or atan2 copysign hypot xlogy masked_fill", 2,
)
_register_all("lerp addcmul addcdiv where", 3)
_register_all("eq ne lt le gt ge", 2, out_dtype="bool")
_register_all("isnan isinf isfinite", 1, out_dtype="bool")

# Backward of activations: read grad and saved input/output, write grad_input.
register(
    "aten::threshold_backward", "aten::gelu_backward", "aten::silu_backward", "aten::sigmoid_backward",
    "aten::tanh_backward", "aten::hardswish_backward", "aten::elu_backward", "aten::leaky_relu_backward",
    "aten::softplus_backward", "aten::hardtanh_backward", "aten::mish_backward",
)(lambda x: elementwise_cost(x, arity=2, flops_per_element=2.0))


@register("aten::fill_", "aten::zero_", "aten::normal_", "aten::uniform_", "aten::bernoulli_", "aten::random_")
def fill(x: OpInputs) -> Cost:
    """Writes its tensor, reads nothing of it."""
    cost = elementwise_cost(x, arity=1, in_place=True, reads=False)
    return Cost(cost.flops, 0.0, cost.bytes_written, "memory", cost.dtype)


def _tensor_lists(x: OpInputs) -> list[tuple[list[list[int]], str]]:
    out = []
    for i, dims in enumerate(x.dims):
        if dims and isinstance(dims, list) and all(isinstance(d, list) for d in dims):
            types = x.types[i] if i < len(x.types) else ""
            out.append((dims, types))
    return out


@register(*(f"aten::_foreach_{n}" for n in "add add_ mul mul_ div div_ sub sub_ addcmul_ addcdiv_ lerp_ sqrt sqrt_ copy_ zero_ neg neg_ maximum_ clamp_min_ clamp_max_ exp exp_ pow pow_ sign sign_ abs abs_".split()))
def foreach(x: OpInputs) -> Cost:
    """_foreach ops: one elementwise op per tensor of the lists (their dtype is not
    recorded per tensor: the first tensor argument's, else fp32, is assumed)."""
    lists = _tensor_lists(x)
    if not lists:
        raise CostError("no tensor lists recorded")
    n = sum(math.prod(s) for s in lists[0][0])
    dtype = "fp32"
    es = element_bytes(dtype)
    read = sum(sum(math.prod(s) for s in shapes) for shapes, _ in lists) * es
    return Cost(float(n), read, n * es, "vector", dtype, "tensor-list dtype assumed fp32")


@register("aten::arange")
def arange(x: OpInputs) -> Cost:
    """(end, ...), (start, end, ...) or (start, end, step, ...), or the `out=` form: writes
    ceil((end - start) / step) elements, one FLOP each. Integer arguments make int64, as in
    torch, unless an `out` tensor says its dtype."""
    bounds = []
    for i in range(min(3, len(x.concrete))):
        value = x.scalar(i)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or (i < len(x.types) and x.types[i] != "Scalar"):
            break
        bounds.append(value)
    if not bounds:
        raise CostError("the range's bounds were not recorded")
    start, end, step = (0, bounds[0], 1) if len(bounds) == 1 else (bounds[0], bounds[1], bounds[2] if len(bounds) == 3 else 1)
    if step == 0:
        raise CostError("arange with step 0")
    n = max(0, math.ceil((end - start) / step))
    out = [i for i in x.tensor_indices() if i >= len(bounds)]
    dtype = x.dtype(out[0]) if out else ("int64" if all(isinstance(b, int) for b in bounds) else "fp32")
    return Cost(float(n), 0.0, n * element_bytes(dtype), "memory", dtype)
