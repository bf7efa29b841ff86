"""Denoising steps of a diffusion pipeline: their time on the host and the GPU work they launched.

A denoising step is, in order of trust:
  an annotation   a user / NVTX range named `denoise_step...`, `denoising step ...` or an
                  xfuser step marker (`xfuser ... step`), one range per step;
  the loop        from Python frames (torch.profiler with_stack): each scheduler `step`
                  (diffusers/xfuser schedulers/*.py: step) ends a denoising step, which began
                  at the first outermost denoiser forward (a diffusers / xfuser transformer or
                  UNet model's forward) after the previous scheduler step ended.
Per step: its time is its GPU window, as for any step (tracekit.trace.step_ownership): the
first start to the last end of the GPU work launched inside its host window (a CUDA graph
replayed by a compiled denoiser counts: its launch lies inside the window); a step that
launched nothing (a CPU profile) keeps its host window. The host window is kept beside it,
with the kernels' count and busy time. A loop with neither an annotation nor Python frames
(no with_stack) leaves the table empty.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.trace.column_text import as_text, rows_where

ANNOTATION = re.compile(r"(?i)^denoise_?step|denoising[ _]step|^xfuser.*\bstep\b")
SCHEDULER_STEP = re.compile(r"(diffusers|xfuser)/.*schedul\w*/\w+\.py\(\d+\): step$")
# the model files, not their building blocks (unet_2d_blocks.py also holds the VAE's decoder blocks)
# (xDiT wraps diffusers' transformers in xfuser/model_executor/models/transformers/transformer_*.py)
DENOISER = re.compile(r"(diffusers|xfuser)/(.*/)?models/(transformers|unets)/(transformer|unet)_\w+(?<!_blocks)\.py\(\d+\): forward$")
DENOISE_COLUMNS = ["index", "start_ns", "duration_ns", "window_source", "host_start_ns", "host_duration_ns", "kernels", "busy_ns", "source"]


def _outermost(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Indices (into start/end, sorted by start) of intervals not inside an earlier one."""
    keep, reach = [], -np.inf
    for i in np.argsort(start, kind="stable"):
        if start[i] >= reach:
            keep.append(i)
            reach = end[i]
    return np.array(keep, dtype=np.int64)


def denoise_windows(trace) -> tuple[np.ndarray, np.ndarray, str]:
    """(start, end, source) of each denoising step, in time order."""
    r = trace.ranges if trace is not None else None
    if r is None or not len(r):
        return np.zeros(0), np.zeros(0), ""
    domain = np.array(as_text(r["domain"]), dtype=object)
    start, end = r["start"].to_numpy(dtype=np.float64), r["end"].to_numpy(dtype=np.float64)
    marked = ~np.isin(domain, ["python", "gpu"]) & rows_where(r["name"], lambda n: ANNOTATION.search(n[:256]))
    if marked.any():
        rows = np.flatnonzero(marked)
        rows = rows[_outermost(start[rows], end[rows])]
        return start[rows], end[rows], "step annotation"
    python = domain == "python"
    sched = np.flatnonzero(python & rows_where(r["name"], SCHEDULER_STEP.search))
    if not len(sched):
        return np.zeros(0), np.zeros(0), ""
    fwd = np.flatnonzero(python & rows_where(r["name"], DENOISER.search))
    fwd = fwd[_outermost(start[fwd], end[fwd])] if len(fwd) else fwd
    sched = sched[_outermost(start[sched], end[sched])]
    f_start = np.sort(start[fwd])
    out_s, out_e, prev_end = [], [], -np.inf
    for s in sched:
        first = f_start[(f_start >= prev_end) & (f_start <= start[s])]
        out_s.append(first[0] if len(first) else start[s])
        out_e.append(end[s])
        prev_end = end[s]
    return np.array(out_s), np.array(out_e), "scheduler.step frames"


def denoise_steps(trace, kernels: pd.DataFrame) -> pd.DataFrame:
    lo, hi, source = denoise_windows(trace)
    if not len(lo):
        return pd.DataFrame(columns=DENOISE_COLUMNS)
    launched = np.full(len(kernels), np.nan)
    if len(kernels) and trace is not None and len(trace.launches):
        has = kernels["launch"].to_numpy() >= 0
        launched[has] = trace.launches["start"].to_numpy(dtype=np.float64)[kernels["launch"].to_numpy()[has]]
    excl = kernels["exclusive_ns"].to_numpy(dtype=np.float64) if len(kernels) else np.zeros(0)
    k_start = kernels["start"].to_numpy(dtype=np.float64) if len(kernels) else np.zeros(0)
    k_end = kernels["end"].to_numpy(dtype=np.float64) if len(kernels) else np.zeros(0)
    rows = []
    for i, (s, e) in enumerate(zip(lo, hi)):
        mine = (launched >= s) & (launched <= e)
        on_gpu = bool(mine.any())
        g_lo, g_hi = (k_start[mine].min(), k_end[mine].max()) if on_gpu else (s, e)
        rows.append({"index": i, "start_ns": float(g_lo), "duration_ns": float(g_hi - g_lo),
                     "window_source": "kernels" if on_gpu else "host range", "host_start_ns": float(s), "host_duration_ns": float(e - s),
                     "kernels": int(mine.sum()), "busy_ns": float(excl[mine].sum()), "source": source})
    return pd.DataFrame(rows, columns=DENOISE_COLUMNS)
