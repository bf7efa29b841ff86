"""Steps: ProfilerStep#N and decode-step ranges, with per-step time and bandwidth accounting.

A kernel belongs to the step whose range encloses its launch (or, on the GPU side, the
step's GPU annotation). Per step: wall time of the range, kernels, GPU busy time, bytes
moved, and achieved bandwidth = bytes / step time against the device's peak and sustained.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.attribution.match import at_kernels, with_ancestors
from tracekit.trace import Trace

STEP = re.compile(r"^ProfilerStep#\d+$|(?i:^decode_step|\bdecode step\b|^step\[)")


def step_table(trace: Trace, kernels: pd.DataFrame, exclusive: np.ndarray, bandwidth: float | None, sustained: float) -> pd.DataFrame:
    r = trace.ranges
    cols = ["step", "start_ns", "duration_ns", "kernels", "busy_ns", "bytes", "achieved_tbps", "bandwidth_share_peak", "bandwidth_share_sustained"]
    if r.empty:
        return pd.DataFrame(columns=cols)
    names = r["name"].astype(str).to_numpy()
    is_step = np.array([bool(STEP.search(n)) for n in names]) & (r["domain"].astype(str).to_numpy() != "python")
    if not is_step.any():
        return pd.DataFrame(columns=cols)
    # The step a range row belongs to: itself if a step, else its nearest step ancestor.
    owner = np.where(is_step, np.arange(len(r)), -1)
    parent, depth = r["parent"].to_numpy(), r["depth"].to_numpy()
    order = np.argsort(depth, kind="stable")
    for row in order:  # parents come first; a Python loop over ranges only, not kernels
        if owner[row] < 0 and parent[row] >= 0:
            owner[row] = owner[parent[row]]
    cpu = at_kernels(np.ones(len(r), bool), kernels["range"].to_numpy())
    step_of = np.full(len(kernels), -1)
    ptr = kernels["range"].to_numpy()
    step_of[cpu] = owner[ptr[cpu]]
    gpu_ptr = kernels["gpu_range"].to_numpy()
    fill = (step_of < 0) & (gpu_ptr >= 0)
    step_of[fill] = owner[gpu_ptr[fill]]
    # A GPU-side copy of a CPU step range (same name) counts as that step.
    step_rows = np.flatnonzero(is_step & (r["domain"].astype(str).to_numpy() != "gpu"))
    by_name = {names[i]: i for i in step_rows}
    step_of = np.array([by_name.get(names[s], s) if s >= 0 else -1 for s in step_of]) if len(step_of) else step_of
    nbytes = (kernels["bytes_read"].fillna(0) + kernels["bytes_written"].fillna(0)).to_numpy()
    rows = []
    for s in step_rows:
        mine = step_of == s
        duration = int(r["end"].iat[s] - r["start"].iat[s])
        moved = float(nbytes[mine].sum())
        tbps = moved / duration / 1e3 if duration else float("nan")
        rows.append({
            "step": names[s], "start_ns": int(r["start"].iat[s]), "duration_ns": duration, "kernels": int(mine.sum()),
            "busy_ns": int(exclusive[mine].sum()), "bytes": moved, "achieved_tbps": tbps,
            # bytes per second over the step's wall time, against the device's bandwidth
            "bandwidth_share_peak": moved / (duration * 1e-9) / bandwidth if bandwidth and duration else float("nan"),
            "bandwidth_share_sustained": moved / (duration * 1e-9) / (bandwidth * sustained) if bandwidth and duration else float("nan"),
        })
    return pd.DataFrame(rows, columns=cols).sort_values("start_ns").reset_index(drop=True)
