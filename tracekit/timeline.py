"""Busy and idle time per device, with overlapping streams counted once.

Each GPU activity gets an exclusive share of time: the part of its interval that no
earlier-starting activity on the same device already covers. Exclusive times add up to
the union of busy intervals, so per device: sum(exclusive) + idle = span, exactly.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def exclusive_time(kernels: pd.DataFrame) -> np.ndarray:
    out = np.zeros(len(kernels), dtype=np.int64)
    start, end = kernels["start"].to_numpy(), kernels["end"].to_numpy()
    for device in np.unique(kernels["device"].to_numpy()) if len(kernels) else ():
        rows = np.flatnonzero(kernels["device"].to_numpy() == device)
        rows = rows[np.lexsort((end[rows], start[rows]))]
        s, e = start[rows], end[rows]
        # the furthest end reached by any activity that started before this one
        covered = np.maximum.accumulate(np.r_[s[0], e[:-1]])
        out[rows] = np.clip(e - np.maximum(s, covered), 0, None)
    return out


DEVICE_COLUMNS = ["device", "active_start_ns", "active_ns", "busy_ns", "idle_ns", "span_ns", "idle_span_ns", "kernel_time_ns",
                  "overlap_ns"]


def device_time(kernels: pd.DataFrame, exclusive: np.ndarray, span_ns: int) -> pd.DataFrame:
    """Per device: busy (union of activity); idle within the GPU-active window (first to last
    GPU activity on the device: what HTA and TraceLens call idle, and what a user can act on);
    and idle over the whole capture span, which also counts host time before the first and
    after the last kernel (model loading, warm-up on the CPU). busy + idle_span = span."""
    if not len(kernels):
        return pd.DataFrame(columns=DEVICE_COLUMNS)
    frame = pd.DataFrame({"device": kernels["device"].to_numpy(), "busy_ns": exclusive,
                          "kernel_time_ns": (kernels["end"] - kernels["start"]).to_numpy(),
                          "start": kernels["start"].to_numpy(), "end": kernels["end"].to_numpy()})
    per = frame.groupby("device").agg(busy_ns=("busy_ns", "sum"), kernel_time_ns=("kernel_time_ns", "sum"),
                                      active_start_ns=("start", "min"), active_end=("end", "max")).reset_index()
    per["active_ns"] = per["active_end"] - per["active_start_ns"]
    per["idle_ns"] = per["active_ns"] - per["busy_ns"]
    per["span_ns"] = span_ns
    per["idle_span_ns"] = span_ns - per["busy_ns"]
    per["overlap_ns"] = per["kernel_time_ns"] - per["busy_ns"]
    return per[DEVICE_COLUMNS]
