"""Per step: the FLOPs its kernels did (from their op shapes), the achieved TFLOP/s over the
step's GPU window, and the model-FLOP utilization (MFU: the work the model needs, recompute
left out, over the device's dense matrix peak in the step's matrix dtype) beside the hardware
one (HFU: every FLOP the GPU ran, recompute included). A training step's checkpointing shows
as the gap between the two.

Unknown is not zero: a step whose FLOP-costed kernels hold less than MIN_COVERAGE of its
kernel time has null figures, and without a device peak MFU and HFU are null."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.costs.dtypes import dominant_matrix_dtype
from tracekit.costs.unknown import MIN_COVERAGE
from tracekit.hardware import Device
from tracekit.trace.frames import Trace
from tracekit.trace.step_ownership import step_rows

COLUMNS = ["flops", "recompute_flops", "flop_coverage", "achieved_tflops", "mfu", "hfu"]


def step_flops(trace: Trace, kernels: pd.DataFrame, steps: pd.DataFrame, device: Device | None) -> pd.DataFrame:
    """`steps` with COLUMNS added (rows in step_rows order, as analysis.per_step builds them)."""
    if not len(steps) or "duration_ns" not in steps:
        return steps
    rows = step_rows(trace)
    if len(rows) != len(steps):  # a step table from elsewhere (GPU annotations): no kernel owns a row of it
        return steps.assign(**{c: np.nan for c in COLUMNS})
    position = np.full(len(trace.ranges) + 1, -1, dtype=np.int64)
    position[rows] = np.arange(len(rows))
    owner = kernels["step"].to_numpy()
    slot = position[np.where(owner >= 0, owner, len(trace.ranges))]
    kernel = (kernels["kind"] == "kernel").to_numpy() & (slot >= 0)
    flops = kernels["flops"].to_numpy(np.float64)
    time = (kernels["end"] - kernels["start"]).to_numpy(np.float64)
    recompute = (kernels["phase"] == "recompute").to_numpy()
    n = len(rows)

    def per_step(weights: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return np.bincount(slot[mask], weights=weights[mask], minlength=n)[:n]

    costed = kernel & ~np.isnan(flops)
    total, redo = per_step(flops, costed), per_step(flops, costed & recompute)
    all_time = per_step(time, kernel)
    with np.errstate(divide="ignore", invalid="ignore"):
        coverage = np.where(all_time > 0, per_step(time, costed) / all_time, np.nan)
        seconds = steps["duration_ns"].to_numpy(np.float64) / 1e9
        achieved = np.where(seconds > 0, total / seconds, np.nan)
    known = coverage >= MIN_COVERAGE
    peak = np.full(n, np.nan)
    if device is not None:
        kind, dtype = kernels["cost_kind"].to_numpy(), kernels["dtype"].to_numpy()
        for i in range(n):
            mine = kernel & (slot == i)
            d = dominant_matrix_dtype(kind[mine], dtype[mine], time[mine])
            p = device.peak_flops("matrix", d) if d else None
            peak[i] = p if p else np.nan
    with np.errstate(divide="ignore", invalid="ignore"):  # a zero-length step: its rates are unknown (NaN), not a warning
        mfu = np.where(known, (achieved - np.where(seconds > 0, redo / seconds, np.nan)) / peak, np.nan)
        hfu = np.where(known, achieved / peak, np.nan)
    return steps.assign(flops=np.where(known, total, np.nan), recompute_flops=np.where(known, redo, np.nan), flop_coverage=coverage,
                        achieved_tflops=np.where(known, achieved / 1e12, np.nan), mfu=mfu, hfu=hfu)
