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
    steps = pd.DataFrame(out, columns=STEP_COLUMNS)
    cut = cut_short(steps)
    if cut.any():  # its window is not the step's: a rate over it would be made up
        steps.loc[cut, "window_source"] = "gpu annotation, cut short (ends well before its next step starts)"
        steps.loc[cut, ["achieved_tbps", "bandwidth_share_peak", "bandwidth_share_sustained"]] = np.nan
    return steps


CUT_SHORT = 0.5  # a window under this share of its kind's median, while its period is the usual one


def cut_short(steps: pd.DataFrame) -> np.ndarray:
    """Per step: is its annotation cut short? Seen in a real H200 trace: one of 12 CUDA-graph
    decode steps annotated 2.8 ms while its neighbours ran 9.0 ms, the next step starting the
    usual ~9 ms after it. A window under CUT_SHORT of the median window of the steps of the same
    name, whose start-to-next-start period is at least 0.8 of the median window, ended early in the
    record, not on the GPU. The last step of a name has no period and is never called cut."""
    out = np.zeros(len(steps), dtype=bool)
    for _, g in steps.groupby("step", sort=False):
        if len(g) < 3:
            continue
        start, dur = g["start_ns"].to_numpy(np.float64), g["duration_ns"].to_numpy(np.float64)
        period = np.r_[np.diff(start), np.nan]
        usual = float(np.median(dur))
        with np.errstate(invalid="ignore"):
            out[g.index.to_numpy()[(dur < CUT_SHORT * usual) & (period >= 0.8 * usual)]] = True
    return out


def cut_short_warning(steps: pd.DataFrame) -> list[str]:
    """One warning naming the annotations cut short, if any."""
    cut = steps["window_source"].astype(str).str.contains("cut short").to_numpy() if len(steps) else np.zeros(0, bool)
    if not cut.any():
        return []
    rows = steps[cut]
    listed = ", ".join(f"{r['step']} at {r['start_ns'] / 1e6:,.3f} ms ({r['duration_ns'] / 1e6:,.3f} ms)" for _, r in rows.head(3).iterrows())
    return [f"trace health: {int(cut.sum()):,} GPU annotation step window(s) end well before the next step starts "
            f"(under {CUT_SHORT:.0%} of their kind's median window): {listed}; their window is kept as recorded, "
            "their rates are unknown"]


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
