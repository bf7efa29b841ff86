"""Kernels torch.compile (Inductor) wrote itself: `triton_poi_*` (pointwise), `triton_red_*`
and `triton_per_*` (reductions). Inductor wraps each launch in a record_function named
after the kernel whose recorded inputs are the kernel's arguments: its tensors (inputs and
outputs alike) and its sizes, e.g. `triton_poi_fused__to_copy_cat_slice_1` with Input Dims
[[1, 256], [1, 256], []] and types ['float', 'c10::BFloat16', 'Scalar'].

When Inductor's own figures (kernel_num_gb) are missing, the cost is the elementwise one:
every tensor argument is touched once, and only in the elements it stores: a broadcast
argument (stride 0: an expanded mask, a rotary table) is its distinct elements, not its
logical size (counted dense, a broadcast table counts once per row that reads it, which
can put a kernel above the roofline).
A tensor argument larger than the kernel's iteration space is touched only in part: the
trailing integer arguments are the launch sizes (xnumel, ynumel, r0_numel, and with dynamic
shapes the symbolic sizes ks0...); one load per point reads at most their product of its
elements. A tensor more than 8 x the launch size counts what one load per point reaches
(below that, several loads per point are common: pools, unrolled small reductions). So the
whole static KV cache passed to the kernel that writes one layer's slice,
or the embedding table passed to the fused embedding + RMSNorm, counts what the kernel can
reach (measured by Nsight Compute on a compiled decode: the cache-slice kernels read 100 MB,
not the 671 MB of their arguments). Symbolic sizes only enlarge the product: never below.
An in-place buffer is one argument (in_out_ptr), so it is counted once. Arguments of equal
shape are not merged: a residual and its input are two tensors. The record does not say which arguments the kernel
writes, so all bytes are counted as read (the total is what the roofline uses). One FLOP
per element of the largest tensor: these kernels are bound by memory. Template kernels
(`triton_tem_*`, GEMMs) are not costed this way.
"""

from __future__ import annotations

import re
from typing import Any

from tracekit.costs.cost import Cost, CostError, Unknown
from tracekit.costs.inputs import OpInputs

KERNEL = re.compile(r"triton_(poi|red|per)_")
LOADS_PER_POINT = 8  # loads of one tensor per launch point below which it is counted whole


def is_inductor_kernel(name: str) -> bool:
    return bool(KERNEL.match(name))


def inductor_kernel_cost(dims: Any, types: Any, concrete: Any, strides: Any = None) -> Cost | Unknown:
    """The cost of one Inductor kernel from its launcher's record (see the module docstring)."""
    try:
        return _cost(OpInputs(dims, types, concrete, strides=strides))
    except CostError as exc:
        return Unknown(str(exc))


def _cost(x: OpInputs) -> Cost:
    tensors = [i for i in x.tensor_indices() if len(x.shape(i)) > 0]
    if not tensors:
        raise CostError("the Inductor kernel's record has no tensor argument with a known dtype")
    points = _iteration_points(x, after=max(tensors))
    total = sum(_reachable_bytes(x, i, points) for i in tensors)
    largest = max(tensors, key=x.numel)
    elements = x.numel(largest) if points is None else min(x.numel(largest), points)
    return Cost(float(elements), float(total), 0.0, "vector", x.dtype(largest),
                "Inductor kernel: each tensor argument once, inputs and outputs not told apart (all counted as read)")


def _iteration_points(x: OpInputs, after: int) -> int | None:
    """The product of the integer arguments after the last tensor (the launch sizes), or None."""
    sizes = [x.scalar(i) for i in range(after + 1, len(x))]
    sizes = [v for v in sizes if isinstance(v, int) and not isinstance(v, bool)]
    if not sizes or any(v <= 0 for v in sizes):
        return None
    product = 1
    for v in sizes:
        product *= v
    return product


def _reachable_bytes(x: OpInputs, i: int, points: int | None) -> float:
    """The whole tensor, unless it holds more than LOADS_PER_POINT elements per launch point:
    then what one load per point reaches. Several loads per point are common below that
    (a 2 x 2 pool reads 4 inputs per output, a reduction of up to 8 that Inductor unrolls
    reads 8): such tensors are read whole. A tensor 16 x the launch size (one layer's slice of
    a 16-slice cache) or 8,000 x (an embedding table for 16 tokens) is reached only in part."""
    whole = x.nbytes(i)
    if points is None or x.stored_numel(i) <= LOADS_PER_POINT * points:
        return whole
    return whole * points / x.stored_numel(i)  # one load per point, at the tensor's bytes per element
