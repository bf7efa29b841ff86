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
    total = sum(x.nbytes(i) for i in tensors)
    largest = max(tensors, key=x.numel)
    return Cost(float(x.numel(largest)), float(total), 0.0, "vector", x.dtype(largest),
                "Inductor kernel: each tensor argument once, inputs and outputs not told apart (all counted as read)")
