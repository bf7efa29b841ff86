"""GPU idle time and launch overhead, the overhead no roofline shows: where idle counts (the
steps' GPU windows, or first to last GPU activity), the idle gaps by cause
(timeline.idle_gaps: waiting for the host, for a synchronisation, submitted but not started,
nothing recorded), the idle the steps' host ranges hold outside their GPU windows, and
kernels that ran shorter than the host call that launched them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from tracekit.analysis.idle_host import charges as idle_charges, top_by_cause
from tracekit.trace.launch_api import SYNC_API
from tracekit.trace.grouping import group_rows, key_of, label_column
from tracekit.trace.timeline import IDLE_CATEGORIES, difference, idle_gaps, union

if TYPE_CHECKING:
    from tracekit.analysis.measured import Measured


def idle_outside_gpu_windows(a: Measured, windows: dict[int, np.ndarray], launches=None, launching=None) -> dict[str, Any]:
    """Steps measure their time on the GPU; where a step's host range reaches past its GPU
    window (before its first kernel, after its last), GPU idle time there is invisible to
    the step figures. Measured here: that idle time, by cause, with the host record behind
    it, and the steps' wall time (host range and GPU window together)."""
    s = a.steps
    if not len(s) or "host_start_ns" not in s:
        return {}
    gpu_lo, gpu_hi = s["start_ns"].to_numpy(np.int64), (s["start_ns"] + s["duration_ns"]).to_numpy(np.int64)
    host_lo, host_hi = s["host_start_ns"].to_numpy(np.int64), (s["host_start_ns"] + s["host_duration_ns"]).to_numpy(np.int64)
    wall = union(np.column_stack([np.minimum(gpu_lo, host_lo), np.maximum(gpu_hi, host_hi)]))
    wall_ns = float((wall[:, 1] - wall[:, 0]).sum())
    outside = {d: difference(wall, w) for d, w in windows.items()}
    if not any(len(o) for o in outside.values()):
        return {"wall_ns": wall_ns, "idle_ns": 0.0}
    gaps = gaps_of(a, outside, launches)
    if not len(gaps):
        return {"wall_ns": wall_ns, "idle_ns": 0.0}
    by_cause = gaps.groupby("category")["idle_ns"].sum()
    host = top_by_cause(idle_charges(a, gaps, launching), by_cause.to_dict())
    cause = str(by_cause.idxmax())
    return {"wall_ns": wall_ns, "idle_ns": float(gaps["idle_ns"].sum()), "gaps": int(len(gaps)),
            "by_cause": {str(c): float(v) for c, v in by_cause.items()}, "main_cause": cause, "host": host.get(cause),
            "host_by_cause": host, "gaps_by_cause": {str(c): int(n) for c, n in gaps.groupby("category").size().items()}}


def idle_windows(a: Measured) -> tuple[dict[int, np.ndarray], str]:
    """Where idle time counts: inside the steps (the same windows on every device), or,
    in a trace without steps, from each device's first activity to its last."""
    k = a.kernels
    devices = [int(d) for d in np.unique(k["device"].to_numpy())]
    if len(a.steps):
        steps = a.steps
        iv = union(np.column_stack([steps["start_ns"].to_numpy(np.int64), (steps["start_ns"] + steps["duration_ns"]).to_numpy(np.int64)]))
        return {d: iv for d in devices}, "inside steps"
    out = {}
    for d in devices:
        on = k["device"].to_numpy() == d
        out[d] = np.array([[int(k["start"].to_numpy()[on].min()), int(k["end"].to_numpy()[on].max())]], dtype=np.int64)
    return out, "from first to last GPU activity"


def gaps_of(a: Measured, windows: dict[int, np.ndarray], launches: tuple | None = None) -> pd.DataFrame:
    """Idle gaps of an analysis' devices inside `windows`, by cause (timeline.idle_gaps).
    `launches`: launch_and_sync_calls(a), when already made."""
    launch_start, sync_calls, launch_end = launch_and_sync_calls(a) if launches is None else launches
    return idle_gaps(a.kernels, launch_start, sync_calls, windows, launch_end)


def launch_and_sync_calls(a: Measured) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What the idle rules read of the host's calls: per kernel its launch call's start and end
    (-1: none), and the synchronizing calls (start, end, pid)."""
    k = a.kernels
    launch_start = np.full(len(k), -1, dtype=np.int64)
    launch_end = launch_start
    sync_calls = np.zeros((0, 3), dtype=np.int64)
    if a.trace is not None and len(a.trace.launches):
        launches = a.trace.launches
        row = k["launch"].to_numpy()
        launch_start = np.where(row >= 0, launches["start"].to_numpy()[np.maximum(row, 0)], -1)
        launch_end = np.where(row >= 0, launches["end"].to_numpy()[np.maximum(row, 0)], -1)
        name = key_of(launches["name"], missing="nan")  # one search per distinct call name
        is_sync = np.array([bool(SYNC_API.search(str(n))) for n in name[1]], dtype=bool)[name[0]]
        sync_calls = launches.loc[is_sync, ["start", "end", "pid"]].to_numpy(np.int64)
    return launch_start, sync_calls, launch_end


def idle_table(gaps: pd.DataFrame, window_ns: float) -> pd.DataFrame:
    total = float(gaps["idle_ns"].sum()) if len(gaps) else 0.0
    rows = []
    for cat in IDLE_CATEGORIES:
        mine = gaps[gaps["category"] == cat] if len(gaps) else gaps
        t = float(mine["idle_ns"].sum()) if len(mine) else 0.0
        rows.append({"category": cat, "gaps": int(len(mine)), "idle_ns": t,
                     "share_of_idle": t / total if total else np.nan, "share_of_window": t / window_ns if window_ns else np.nan})
    return pd.DataFrame(rows)


def short_kernels(a: Measured, first_run: np.ndarray) -> dict[str, Any]:
    """Kernels that ran for less time than the host call that launched them: launching
    them costs more than running them (fuse them, or capture them in a CUDA graph).
    `first_run`: first_runs(a.kernels), left out (a first launch loads the kernel's module)."""
    k = a.kernels
    if a.trace is None or not len(a.trace.launches):
        return {"count": 0, "time_ns": 0.0, "launch_ns": 0.0, "kernels": 0, "top": []}
    launches = a.trace.launches
    row = k["launch"].to_numpy()
    # A graph launch issues all of its kernels in one call: no kernel of it is "behind" it.
    is_kernel = (k["kind"] == "kernel").to_numpy() & (row >= 0) & ~k["graph_launch"].to_numpy(dtype=bool)
    call = np.where(row >= 0, (launches["end"] - launches["start"]).to_numpy()[np.maximum(row, 0)], 0)
    # a kernel's first run waits for its module to load (first_runs): a warm-up, not launch overhead
    short = is_kernel & (k["duration_ns"].to_numpy() < call) & ~first_run
    name = key_of(k["name"], missing="nan")
    groups = group_rows([(name[0][short], name[1])], int(short.sum()), dropna=False)
    names = label_column((name[0][short], name[1]), groups.first)
    # by name first (groupby's order), so that equal counts rank as they always did
    order = sorted(range(groups.n), key=lambda i: names[i])
    top = pd.DataFrame({"size": groups.size[order], "sum": groups.sum(k["duration_ns"].to_numpy()[short])[order]},
                       index=names[order]).sort_values("size", ascending=False).head(5)
    return {"count": int(short.sum()), "time_ns": float(k["duration_ns"].to_numpy()[short].sum()),
            "launch_ns": float(call[short].sum()), "kernels": int(is_kernel.sum()),
            "top": [{"name": n, "count": int(r["size"]), "time_ns": float(r["sum"])} for n, r in top.iterrows()]}


def first_runs(kernels: pd.DataFrame) -> np.ndarray:
    """The kernel rows that are each kernel function's first run in the trace. CUDA loads a
    kernel's module on its first launch (lazy loading, the default since CUDA 12.2; kernels
    compiled at run time, as nvFuser's and Triton's, load there too), so that launch call is
    long for the load, not for the profiler nor for launch overhead: the host-time causes
    (launch-bound, profiler) leave it out."""
    first = np.zeros(len(kernels), dtype=bool)
    is_kernel = (kernels["kind"] == "kernel").to_numpy()
    if not is_kernel.any():
        return first
    rows = np.flatnonzero(is_kernel)
    codes = key_of(kernels["name"], missing="nan")[0][rows]
    order = np.lexsort((kernels["start"].to_numpy(np.int64)[rows], codes))  # by name, then start
    lead = np.ones(len(order), dtype=bool)
    lead[1:] = codes[order][1:] != codes[order][:-1]
    first[rows[order][lead]] = True
    return first
