"""Step windows and throughput moved with their kernels' projected times.

A step's time is its GPU window as `analyze` measured it (Analysis.steps: the step's
GPU-side annotation widened to its kernels, else their span). The projected window keeps its
margins around the step's kernels and moves with them:

    start' = start + (first start' − first start),   end' = end + (last end' − last end)

of the kernels the step owns, replayed (tracekit.projection.replay): a kernel never starts
before its launch, so a step whose GPU waited for the host barely moves. A step with no
kernel keeps its window. Throughput = the step's items / its window, items from
tracekit.analysis.throughput.step_items (tokens, frames, samples; else one step).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from tracekit.trace.column_text import as_text

if TYPE_CHECKING:
    from tracekit.analysis.result import Analysis

PROJECTED_STEP_COLUMNS = ["step", "measured_ns", "host_ns", "projected_ns", "low_ns", "high_ns", "busy_ns", "busy_projected_ns", "ratio",
                "host_bound", "items", "unit", "throughput", "throughput_projected", "throughput_low", "throughput_high"]


def _owners(a: Analysis) -> list[np.ndarray | None]:
    """Per row of a.steps: the kernels it owns (row positions), matched through the step's
    range (its name and host start): kernels carry the range row that owns them."""
    k = a.kernels
    owner = k["step"].to_numpy()
    if a.trace is None or not len(a.steps):
        return [None] * len(a.steps)
    r = a.trace.ranges
    ids = np.unique(owner[owner >= 0])
    names = as_text(r["name"])
    by_key: dict[tuple, list[int]] = {}
    for s in ids:
        by_key.setdefault((names[s], int(r["start"].iat[s])), []).append(int(s))
    order = np.argsort(owner, kind="stable")
    cuts = np.searchsorted(owner[order], ids)
    ends = np.searchsorted(owner[order], ids, side="right")
    rows_of = {int(s): order[c:e] for s, c, e in zip(ids, cuts, ends)}
    out = []
    for name, host_start in zip(a.steps["step"], a.steps["host_start_ns"]):
        found = by_key.get((name, int(host_start)))
        out.append(rows_of[found.pop(0)] if found else None)
    return out


def steps_frame(a: Analysis, ratio: np.ndarray, ends: dict, items: pd.DataFrame | None) -> pd.DataFrame:
    """`ratio`: per kernel, the point projected / measured time; `ends`: per "ratio" / "low" /
    "high", the replayed (start', end') of every kernel."""
    if not len(a.steps):
        return pd.DataFrame(columns=PROJECTED_STEP_COLUMNS)
    k = a.kernels
    start, end = k["start"].to_numpy(dtype=np.float64), k["end"].to_numpy(dtype=np.float64)
    excl = k["exclusive_ns"].to_numpy(dtype=np.float64)
    per = {} if items is None or not len(items) else {row["step"]: row for row in items.to_dict(orient="records")}
    out = []
    for i, (step, mine) in enumerate(zip(a.steps.to_dict(orient="records"), _owners(a))):
        wall = float(step["duration_ns"])
        moved = {}
        for col, (s_new, e_new) in ends.items():
            if mine is None or not len(mine):
                moved[col] = wall
                continue
            first, last = start[mine].min(), end[mine].max()
            moved[col] = float(wall + (e_new[mine].max() - last) - (s_new[mine].min() - first))
        busy = float(excl[mine].sum()) if mine is not None else 0.0
        span = float(end[mine].max() - start[mine].min()) if mine is not None and len(mine) else 0.0
        got = per.get(step["step"], {})
        n_items = got.get("items")
        n_items = float(n_items) if n_items is not None and n_items == n_items else 1.0
        lo, hi = min(moved["low"], moved["high"]), max(moved["low"], moved["high"])
        out.append({"step": step["step"], "measured_ns": wall, "host_ns": float(step["host_duration_ns"]),
                    "projected_ns": moved["ratio"], "low_ns": lo, "high_ns": hi, "busy_ns": busy,
                    "busy_projected_ns": float((excl[mine] * ratio[mine]).sum()) if mine is not None else 0.0,
                    "ratio": moved["ratio"] / wall if wall > 0 else None,
                    # host-bound: the GPU was idle, waiting for launches, most of its kernels' window
                    "host_bound": bool(mine is None or busy < 0.5 * span),
                    "items": n_items, "unit": got.get("unit") or "steps",
                    "throughput": _rate(n_items, wall), "throughput_projected": _rate(n_items, moved["ratio"]),
                    "throughput_low": _rate(n_items, hi), "throughput_high": _rate(n_items, lo)})
    return pd.DataFrame(out, columns=PROJECTED_STEP_COLUMNS)


def _rate(items: float, ns: float) -> float | None:
    return items / (ns * 1e-9) if ns > 0 else None


def step_totals(steps: pd.DataFrame) -> dict:
    """Sums over the steps (None without steps) and the point ratio of the step time."""
    if not len(steps):
        return {"steps": 0, "step_measured_ns": None, "step_projected_ns": None, "step_low_ns": None, "step_high_ns": None,
                "step_ratio": None}
    measured = float(steps["measured_ns"].sum())
    projected = float(steps["projected_ns"].sum())
    return {"steps": len(steps), "step_measured_ns": measured, "step_projected_ns": projected,
            "step_low_ns": float(steps["low_ns"].sum()), "step_high_ns": float(steps["high_ns"].sum()),
            "step_ratio": projected / measured if measured > 0 else None}


def throughput(steps: pd.DataFrame) -> dict | None:
    """Items per second over all steps of the most common unit: measured, projected, range."""
    if not len(steps):
        return None
    unit = steps["unit"].mode().iat[0]
    mine = steps[steps["unit"] == unit]
    items = float(mine["items"].sum())
    rate = {col: _rate(items, float(mine[col].sum())) for col in ("measured_ns", "projected_ns", "low_ns", "high_ns")}
    return {"unit": unit, "items": items, "measured": rate["measured_ns"], "projected": rate["projected_ns"],
            "low": rate["high_ns"], "high": rate["low_ns"],
            "ratio": rate["projected_ns"] / rate["measured_ns"] if rate["measured_ns"] and rate["projected_ns"] else None}
