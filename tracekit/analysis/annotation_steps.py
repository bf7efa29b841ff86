"""The step table of a trace whose kernel times were lost (trace.health: every GPU activity
had ts 0 and dur 0) but whose GPU-side annotations kept their GPU times.

The steps are then the outermost GPU annotations (Kineto's `gpu_user_annotation` copies of
the host ranges: a prefill and each decode step, say), in time order: what ran on the GPU
between their start and end is known only as a whole. Every kernel-level figure (kernels,
busy time, coverage) is unknown, not zero. With a model, a step's bytes are the model's
(weights, KV, activations) where its batch is known, and its bandwidth is those bytes over
the annotation's window; nothing is computed from the lost times.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analysis.per_step import STEP_COLUMNS
from tracekit.trace.column_text import as_text
from tracekit.trace.frames import Trace
from tracekit.trace.step_ownership import host_range_by_gpu_annotation


def annotation_step_rows(trace: Trace) -> np.ndarray:
    """Rows of trace.ranges that are outermost GPU annotations, in start order."""
    r = trace.ranges
    if r.empty:
        return np.zeros(0, dtype=np.int64)
    gpu = as_text(r["domain"]) == "gpu"
    parent = r["parent"].to_numpy()
    outer = gpu & ((parent < 0) | ~gpu[np.maximum(parent, 0)])
    rows = np.flatnonzero(outer)
    return rows[np.argsort(r["start"].to_numpy()[rows], kind="stable")]


def annotation_step_table(trace: Trace, bandwidth: float | None, sustained: float, model_bytes: dict[int, float] | None = None) -> pd.DataFrame:
    """STEP_COLUMNS for the outermost GPU annotations. `model_bytes`: host range row -> the
    model's bytes for that step (tracekit.model), for the steps it could cost."""
    rows = annotation_step_rows(trace)
    if not len(rows):
        return pd.DataFrame(columns=STEP_COLUMNS)
    r = trace.ranges
    names = as_text(r["name"])
    start, end = r["start"].to_numpy(), r["end"].to_numpy()
    hosts = np.flatnonzero(as_text(r["domain"]) == "user")
    host_of = host_range_by_gpu_annotation(r, rows, hosts) if len(hosts) else np.full(len(rows), -1)
    out = []
    for row, host in zip(rows, host_of):
        duration = int(end[row] - start[row])
        moved = (model_bytes or {}).get(int(host), float("nan")) if host >= 0 else float("nan")
        rate = moved / (duration * 1e-9) if duration > 0 and np.isfinite(moved) else float("nan")
        out.append({
            "step": names[row], "start_ns": int(start[row]), "duration_ns": duration, "window_source": "gpu annotation",
            "host_start_ns": int(start[host]) if host >= 0 else None,
            "host_duration_ns": int(end[host] - start[host]) if host >= 0 else None,
            "gpu_lag_ns": int(end[row] - end[host]) if host >= 0 else None,
            # the kernels' times are lost: how many ran in the window, and for how long, is unknown
            "kernels": None, "copies": None, "busy_ns": None, "busy_in_window_ns": None, "coverage": float("nan"),
            "bytes": moved, "achieved_tbps": rate / 1e12,
            "bandwidth_share_peak": rate / bandwidth if bandwidth else float("nan"),
            "bandwidth_share_sustained": rate / (bandwidth * sustained) if bandwidth else float("nan"),
        })
    return pd.DataFrame(out, columns=STEP_COLUMNS)


def model_step_bytes(run) -> dict[int, float]:
    """Host range row -> the model's bytes for that step (weights, KV, activations: read and
    written), for the steps whose batch the model knows; a step with unknown KV is left out."""
    out = {}
    for step in run.steps:
        if step.blocks is None or not step.batch.tokens_known:
            continue
        total = float(np.sum(step.blocks["bytes_read"]) + np.sum(step.blocks["bytes_written"]))
        if np.isfinite(total):
            out[int(step.row)] = total
    return out
