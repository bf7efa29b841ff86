"""Waste an expert would remove, each found from the trace's structure (the op tree, the ops'
shapes, the costs, the autograd phases), not from kernel names: one cause row per kind of
waste, with its kernels, their time, the bytes they moved against the bytes the work needs,
the op chain and the host code that produced them, and the fix in one line.

The detectors (one module each) claim kernels; a kernel belongs to the first detector that
claims it (repeated casts excepted: an elementwise chain that runs through one claims it
first, see detect), so the rows are disjoint slices of kernel time, and analysis.causes takes the
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

    def claim(found: list[dict[str, Any] | None]) -> None:
        nonlocal free
        for r in found:
            if r is not None:
                free &= ~r["kernel_rows"]
                out.append(r)

    claim(waste_recompute.rows(a, free, time, of_ns))
    copies = waste_copies.classify(a, free)  # every copy judged once; each pass asks about its free kernels
    claim(waste_copies.rows(a, free, time, of_ns, kinds=("rewrite", "layout"), copies=copies))
    # a repeated cast is held back from the gathers and attention (a softmax's fp32 upcast is a
    # cast, not attention's work) but offered to the chains: a cast of an activation inside an
    # elementwise chain (HF's RMSNorm: cast up, pow .. mul, cast down, mul(weight)) is one of
    # its links, and its fix is the chain's (fuse the norm); the casts left are the casts row's
    casts = np.zeros(len(free), dtype=bool)
    for r in waste_copies.rows(a, free, time, of_ns, kinds=("cast",), copies=copies):
        if r is not None:
            casts |= r["kernel_rows"]
    free &= ~casts
    # elementwise chains after the gathers and attention (whose kernels they would otherwise
    # swallow: a softmax between two matmuls is a link too), before strided layouts
    claim(waste_gathers.rows(a, free, time, of_ns))
    claim(waste_attention.rows(a, free, time, of_ns))
    free |= casts
    claim(waste_fusion.rows(a, free, time, of_ns))
    claim(waste_copies.rows(a, free & casts, time, of_ns, kinds=("cast",), copies=copies))
    for r in waste_strided.rows(a, free, time, of_ns, recoverable):
        if r is not None:
            out.append(r)
    return out
