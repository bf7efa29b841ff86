"""Elementwise work on strided layouts: an op that computes (its cost has arithmetic) on two or
more tensors of one shape, at least one of them laid out neither contiguously nor as a
broadcast (a transposed / permuted view: strides out of order, none zero). Such an op cannot
take the vectorized contiguous path (PyTorch's `vectorized_elementwise_kernel`) and runs the
strided one (`elementwise_kernel<128, 4>`), below the bandwidth it would reach. The waste is the
kernels' time above their roofline, not all of it: the work itself is needed. The layout that
caused it (the input's shape and strides) is the evidence."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from tracekit.analysis.waste_row import group_sums, row

if TYPE_CHECKING:
    from tracekit.analysis.measured import Measured

MIN_ELEMENTS = 1 << 18  # below 256 Ki elements the path hardly matters
FIX = ("make the tensor contiguous once where the transpose / permute made it strided (e.g. .contiguous() after "
       "the patch embedding's flatten(2).transpose(1, 2)), so the elementwise ops after it run vectorized")


def contiguous_strides(shape: list[int]) -> list[int]:
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= max(d, 1)
    return out[::-1]


def strided_input(dims: Any, strides: Any) -> tuple[list[int], list[int]] | None:
    """(shape, strides) of a transposed-layout input among two or more same-shape tensor inputs."""
    if not isinstance(dims, list) or not isinstance(strides, list):
        return None
    tensors = [(d, s) for d, s in zip(dims, strides) if isinstance(d, list) and len(d) >= 2 and isinstance(s, list)
               and len(s) == len(d) and all(isinstance(x, int) for x in d + s) and math.prod(d) >= MIN_ELEMENTS]
    for d, s in tensors:
        if sum(1 for e, _ in tensors if e == d) < 2 or 0 in s:
            continue
        # dims of size 1 carry any stride: compare the others
        if [x for x, n in zip(s, d) if n > 1] != [x for x, n in zip(contiguous_strides(d), d) if n > 1]:
            return d, s
    return None


def rows(a: Measured, free: np.ndarray, time: np.ndarray, of_ns: float, recoverable: np.ndarray) -> list[dict[str, Any] | None]:
    k, ops = a.kernels, a.trace.ops
    op = k["op"].to_numpy()
    flops = k["flops"].to_numpy(np.float64)
    candidate = free & (op >= 0) & (k["cost_kind"] == "vector").to_numpy() & (flops > 0)
    dims, strides = ops["input_dims"].to_numpy(), ops["input_strides"].to_numpy()
    # once per op, and once per distinct inputs (the parser shares one object per distinct list)
    rows_, seen = np.flatnonzero(candidate), {}
    calls, at = np.unique(op[rows_], return_inverse=True)
    cache: dict[int, Any] = {}
    for o in calls.tolist():
        key = (id(dims[o]), id(strides[o]))
        if key not in seen:
            seen[key] = strided_input(dims[o], strides[o])
        cache[o] = seen[key]
    mine = np.zeros(len(k), dtype=bool)
    mine[rows_] = np.array([cache[o] is not None for o in calls.tolist()], dtype=bool)[at]
    if not mine.any():
        return []
    slow = np.where(mine, np.nan_to_num(recoverable), 0.0)
    held = group_sums(slow, op, np.isin(op, np.unique(op[mine])))  # per op, all its kernels' slow time
    top = max((int(o) for o in np.unique(op[mine])), key=lambda o: held[o])
    shape, layout = cache[top]
    evidence = {"layout": {"shape": shape, "strides": layout}, "kernel_time_ns": float(time[mine].sum()),
                "bytes_needed": None}
    return [row(a, "waste_strided_elementwise", f"elementwise on strided layouts (time above the roofline; input "
                f"{shape} with strides {layout})", mine, slow, of_ns, FIX, evidence)]
