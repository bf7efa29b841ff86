"""The step table: per ProfilerStep#N / decode / serving step, its time on the GPU, its
kernels and copies, GPU busy time, bytes moved and achieved bandwidth against the device's
peak and sustained.

Which kernels a step owns and where its GPU window lies is tracekit.trace.step_ownership's
rule. `start_ns` / `duration_ns` are the GPU window: every share, bandwidth and idle-in-step
figure is over it. The host range that launched the work is kept beside it
(`host_start_ns`, `host_duration_ns`), with how far the GPU ran behind the host
(`gpu_lag_ns` = GPU window end - host range end; positive: the GPU finished later). Bytes come only from
kernels with a cost; when those cover less than half of the step's kernel time the
figures are unknown (NaN), not a small number.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.costs.unknown import MIN_COVERAGE
from tracekit.trace.column_text import as_text
from tracekit.trace.frames import Trace
from tracekit.trace.step_ownership import kernel_steps, gpu_windows, step_rows
from tracekit.trace.timeline import union

STEP_COLUMNS = ["step", "start_ns", "duration_ns", "window_source", "host_start_ns", "host_duration_ns", "gpu_lag_ns",
                "kernels", "copies", "busy_ns", "busy_in_window_ns", "coverage", "bytes", "achieved_tbps",
                "bandwidth_share_peak", "bandwidth_share_sustained"]


def _busy_in_windows(kernels: pd.DataFrame, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per window: the time any GPU activity ran inside it (union per device, clipped to the
    window, summed over devices): what the window's idle time is the rest of. A step's
    own kernels can run past its window (launched late, run after it): this counts the
    window, `busy_ns` the kernels."""
    out = np.zeros(len(starts), dtype=np.int64)
    if not len(kernels):
        return out
    device = kernels["device"].to_numpy()
    for dev in np.unique(device):
        merged = union(kernels[["start", "end"]].to_numpy()[device == dev])
        for i, (lo, hi) in enumerate(zip(starts, ends)):
            a, b = np.searchsorted(merged[:, 1], lo, side="right"), np.searchsorted(merged[:, 0], hi, side="left")
            part = merged[a:b]
            out[i] += int((np.minimum(part[:, 1], hi) - np.maximum(part[:, 0], lo)).clip(min=0).sum())
    return out


def step_table(trace: Trace, kernels: pd.DataFrame, exclusive: np.ndarray, bandwidth: float | None, sustained: float,
               owner: np.ndarray | None = None) -> pd.DataFrame:
    steps = step_rows(trace)
    if not len(steps):
        return pd.DataFrame(columns=STEP_COLUMNS)
    owner = kernel_steps(trace, kernels) if owner is None else owner
    r = trace.ranges
    names = as_text(r["name"])
    nbytes = (kernels["bytes_read"] + kernels["bytes_written"]).to_numpy(dtype=np.float64)
    duration_k = (kernels["end"] - kernels["start"]).to_numpy(dtype=np.float64)
    costed = ~np.isnan(nbytes)
    # Per step sums in one pass over the kernels (bincount by the step's position), not one
    # pass per step.
    position = np.full(len(r) + 1, len(steps), dtype=np.int64)
    position[steps] = np.arange(len(steps))
    slot = position[np.where(owner >= 0, owner, len(r))]  # len(steps): no step

    def per_step(weights: np.ndarray | None = None, mask: np.ndarray | None = None) -> np.ndarray:
        rows = slice(None) if mask is None else mask
        w = None if weights is None else weights[rows]
        return np.bincount(slot[rows], weights=w, minlength=len(steps) + 1)[: len(steps)]

    is_kernel = (kernels["kind"] == "kernel").to_numpy()
    counts, copies, times = per_step(mask=is_kernel), per_step(mask=~is_kernel), per_step(duration_k)
    costed_times, moved_all = per_step(duration_k, costed), per_step(np.nan_to_num(nbytes), costed)
    busy = per_step(np.asarray(exclusive, dtype=np.float64))
    lo, hi, source = gpu_windows(trace.ranges, kernels, steps, owner)
    in_window = _busy_in_windows(kernels, lo, hi)
    rows = []
    for i, s in enumerate(steps):
        duration = int(hi[i] - lo[i])
        host_start, host_end = int(r["start"].iat[s]), int(r["end"].iat[s])
        on_gpu = source[i] != "host range"
        time = float(times[i])
        coverage = float(costed_times[i] / time) if time > 0 else float("nan")
        known = coverage >= MIN_COVERAGE
        moved = float(moved_all[i]) if known else float("nan")
        rate = moved / (duration * 1e-9) if duration > 0 and known else float("nan")
        rows.append({
            "step": names[s], "start_ns": int(lo[i]), "duration_ns": duration, "window_source": source[i],
            "host_start_ns": host_start, "host_duration_ns": host_end - host_start,
            "gpu_lag_ns": int(hi[i]) - host_end if on_gpu else None,
            "kernels": int(counts[i]), "copies": int(copies[i]),
            "busy_ns": int(busy[i]), "busy_in_window_ns": int(in_window[i]), "coverage": coverage, "bytes": moved,
            # bytes per second over the step's GPU window, against the device's bandwidth
            "achieved_tbps": rate / 1e12,
            "bandwidth_share_peak": rate / bandwidth if bandwidth else float("nan"),
            "bandwidth_share_sustained": rate / (bandwidth * sustained) if bandwidth else float("nan"),
        })
    return pd.DataFrame(rows, columns=STEP_COLUMNS).sort_values(["host_start_ns", "start_ns"]).reset_index(drop=True)
