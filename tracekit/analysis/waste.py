"""Waste an expert would remove, each found from the trace's structure (the op tree, the ops'
shapes, the costs, the autograd phases), not from kernel names: one cause row per kind of
waste, with its kernels, their time, the bytes they moved against the bytes the work needs,
the op chain and the host code that produced them, and the fix in one line.

The detectors (one module each) claim kernels; a kernel belongs to the first detector that
claims it, so the rows are disjoint slices of kernel time, and analysis.causes takes the
claimed kernels out of the "kernel time above the roofline" row: the running total still
never passes 100%. A row's time is the GPU time its kernels hold alone inside the steps
(the same time the recoverable row counts), so the rows compare with the idle rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tracekit.analysis import waste_attention, waste_copies, waste_fusion, waste_gathers, waste_recompute, waste_strided

if TYPE_CHECKING:
    from tracekit.analysis.measured import Measured


def detect(a: Measured, time: np.ndarray, of_ns: float, recoverable: np.ndarray) -> list[dict[str, Any]]:
    """Every waste row, each claiming kernels no earlier row claimed. `time`: per kernel, the
    GPU time it holds alone inside the steps; `recoverable`: the part above the roofline
    (analysis.fix.work). Strided elementwise comes last and counts only the recoverable part:
    its work is needed, its speed is not."""
    if a.trace is None or not len(a.kernels):
        return []
    free = (a.kernels["kind"] == "kernel").to_numpy() & (a.kernels["block"] != "collective").to_numpy()
    out = []
    # elementwise chains after the copies, gathers and attention (whose kernels they would
    # otherwise swallow: a softmax between two matmuls is a link too), before strided layouts
    for detector in (waste_recompute.rows, waste_copies.rows, waste_gathers.rows, waste_attention.rows,
                     waste_fusion.rows):
        for r in detector(a, free, time, of_ns):
            if r is not None:
                free &= ~r["kernel_rows"]
                out.append(r)
    for r in waste_strided.rows(a, free, time, of_ns, recoverable):
        if r is not None:
            out.append(r)
    return out
