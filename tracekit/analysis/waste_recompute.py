"""Recompute in training: the forward ops activation checkpointing runs again inside the
backward (trace.autograd marks them from the autograd structure: ops with a forward sequence
number inside a backward node). All of their time is the cost of checkpointing: the memory
it saves is bought with this much GPU time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tracekit.analysis.waste_row import row

if TYPE_CHECKING:
    from tracekit.analysis.measured import Measured

FIX = ("checkpoint fewer layers (or only the cheap ops: selective checkpointing) where memory allows; "
       "this is the GPU time checkpointing costs")


def rows(a: Measured, free: np.ndarray, time: np.ndarray, of_ns: float) -> list[dict[str, Any] | None]:
    k = a.kernels
    # the autograd structure's recompute, never a phase a name gave (a pipeline's `kv_recompute`
    # range is inference work: refreshing a KV cache is not checkpointing)
    recompute = free & (k["phase"] == "recompute").to_numpy() & _under_backward(a)
    if not recompute.any():
        return []
    forward = free & (k["phase"] == "forward").to_numpy()
    flops = k["flops"].to_numpy(np.float64)
    evidence = {"recompute_flops": float(np.nansum(flops[recompute])),
                "forward_time_ns": float(time[forward].sum()),
                # the recomputed share of the forward: 1.0 when every layer is checkpointed
                "of_forward": float(time[recompute].sum() / time[forward].sum()) if time[forward].sum() > 0 else None}
    return [row(a, "waste_recompute", "recompute (activation checkpointing)", recompute, time, of_ns, FIX, evidence)]


def _under_backward(a: Measured) -> np.ndarray:
    """Per kernel: launched by an op the autograd structure marks as recomputed inside a backward."""
    from tracekit.trace.autograd import RECOMPUTE, op_states

    k, ops = a.kernels, a.trace.ops if a.trace is not None else None
    if ops is None or not len(ops) or "op" not in k:
        return np.zeros(len(k), dtype=bool)
    state = op_states(ops)
    op = k["op"].to_numpy()
    return (op >= 0) & (state[np.maximum(op, 0)] == RECOMPUTE)
