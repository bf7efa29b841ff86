"""What to fix first: ONE ranked list of every cause of lost time, each in ns of the same
denominator, so the rows compare and (the GPU-time rows) add up.

The denominator is the step time: the steps' GPU windows (where each step's own kernels ran,
the time every per-step figure is over) and the GPU idle their host ranges hold outside those
windows (a serving step whose host range outlasts its kernels loses that time too). Not the
steps' wall time from host range start to GPU window end: with the GPU running behind the
host, a step's host range opens while the GPU still runs earlier work (the step before the
first profiled one: 85.8 ms in a checkpointed training trace), time that is in no row and no
step. Without steps, the time from first to last GPU activity. Summed over the GPUs of the
trace (every device's idle or busy time is counted on it). The recoverable tables' shares
are of the same number (analysis.findings).

GPU-time rows are disjoint slices of that time, so their running total never passes 100%:
GPU idle inside the steps' GPU windows by cause, GPU idle outside them (inside the host
ranges) by cause, copies (memcpy / memset time no kernel hides), communication no compute
hides, and kernel time recoverable at the sustained roofline. Host-time rows (launch calls
longer than the kernels they launch; launch-call time above the same call's fastest runs,
which is what the profiler's instrumentation and contention add) say where the host-wait
idle comes from: they overlap it, so they carry no running total.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from tracekit.trace.launch_api import SYNC_API
from tracekit.trace.grouping import key_of

if TYPE_CHECKING:
    from tracekit.analysis.measured import Measured

HOST_TIME_CAUSES = ("launch_overhead", "profiler_overhead")  # host time: overlaps the idle rows
FASTEST = 0.1  # a call's fastest runs: the quantile that stands for its uninstrumented time
# A launch call whose work started this long after the call returned had a queue of work ahead
# of it on the GPU: a long call then is the launch queue pushing back (the GPU is the limit),
# not the profiler's instrumentation, so it is left out of the profiler's share.
BACKLOG_NS = 1_000_000


STEP_TIME = "step time"
# what the step time is, where a report states the denominator
STEP_TIME_MEANS = "the steps' GPU windows and the GPU idle inside their host ranges outside those windows"


def denominator(a: Measured, idle_window_ns: float, outside: dict[str, Any]) -> tuple[str, float]:
    """(name, ns): what every share in the ranked list is of (the module docstring).
    `idle_window_ns`: the steps' GPU windows (or first to last activity), summed over devices;
    `outside`: the idle inside the steps' host ranges outside them (idle.idle_outside_gpu_windows)."""
    devices = int(a.kernels["device"].nunique()) if len(a.kernels) else 0
    over = f", summed over {devices} GPUs" if devices > 1 else ""
    if len(a.steps):
        return f"{STEP_TIME}{over}", idle_window_ns + float(outside.get("idle_ns") or 0.0)
    return f"time from first to last GPU activity{over}", idle_window_ns


def _row(cause: str, what: str, where: str, time_ns: float, of_ns: float, evidence: dict[str, Any]) -> dict[str, Any]:
    return {"cause": cause, "what": what, "where": where, "time_ns": float(time_ns),
            "share": float(time_ns) / of_ns if of_ns else None, "evidence": evidence}


# what the GPU waited for, by idle category (timeline.idle_gaps)
IDLE_WHAT = {"host_wait": "waiting for the host to launch work", "sync": "the host blocked in a synchronising call",
             "queued": "work submitted but not started, nothing recorded running on the GPU (it was held by work "
                       "from before the capture, an event wait or another process)",
             "other": "nothing recorded (launch latency, or no launch call)"}
# the ranked list's short names for the same
IDLE_SHORT = {"host_wait": "host late to launch", "sync": "host blocked in a sync call", "queued": "submitted, not started",
              "other": "nothing recorded"}


def _host_name(h: dict | None) -> str:
    return f"{h['kind']} {h['name']}" if h else ""


def idle_rows(f, of_ns: float) -> list[dict[str, Any]]:
    """GPU idle by cause, inside the GPU windows and outside them, each with its host code."""
    out = []
    for r in f.idle.to_dict(orient="records") if len(f.idle) else []:
        if r["idle_ns"] > 0 and r["category"] in IDLE_WHAT:
            h = f.idle_host_by_cause.get(r["category"])
            out.append(_row(f"idle_{r['category']}", f"GPU idle: {IDLE_SHORT[r['category']]}", _host_name(h), r["idle_ns"], of_ns,
                            {"gaps": int(r["gaps"]), "host": h, "where": f.idle_window}))
    o = f.outside
    for category, t in (o.get("by_cause") or {}).items():
        if t > 0 and category in IDLE_WHAT:
            h = (o.get("host_by_cause") or {}).get(category)
            out.append(_row(f"idle_outside_{category}", f"idle before/after step kernels: {IDLE_SHORT[category]}", _host_name(h), t, of_ns,
                            {"gaps": int((o.get("gaps_by_cause") or {}).get(category, 0)), "host": h,
                             "where": "outside the steps' GPU windows"}))
    return out


def _in_scope(a: Measured) -> np.ndarray:
    k = a.kernels
    return k["step"].to_numpy() >= 0 if len(a.steps) else np.ones(len(k), dtype=bool)


UNNAMED = "(no name recorded)"


def _largest_by_name(k, rows: np.ndarray, time: np.ndarray) -> tuple[str, float, int]:
    """Of the activities in `rows`: the name holding the most `time`, that time and its count.
    A missing name (-1) counts in the total only."""
    names = key_of(k["name"], missing="nan")
    by_name = np.bincount(np.maximum(names[0][rows], 0), weights=np.where(names[0][rows] >= 0, time[rows], 0.0),
                          minlength=max(len(names[1]), 1))
    if not len(names[1]) or not by_name.max() > 0:  # every name missing: the row still stands, unnamed
        return UNNAMED, 0.0, int(np.count_nonzero(rows))
    top = int(np.argmax(by_name))
    return str(names[1][top]), float(by_name.max()), int(np.count_nonzero(rows & (names[0] == top)))


def copy_row(a: Measured, of_ns: float) -> dict[str, Any] | None:
    """Copies and memsets: the GPU time they hold alone (what no kernel hides)."""
    k = a.kernels
    copy = (k["kind"] != "kernel").to_numpy() & _in_scope(a)
    time = k["exclusive_ns"].to_numpy(dtype=np.float64)
    if not copy.any() or not time[copy].sum() > 0:
        return None
    top, top_ns, count = _largest_by_name(k, copy, time)
    return _row("copies", "copies / memsets (unhidden)", f"{top} ({count:,} calls)", float(time[copy].sum()), of_ns,
                {"copy": top, "copy_ns": top_ns, "calls": count})


def comm_row(a: Measured, of_ns: float) -> dict[str, Any] | None:
    """Communication no compute hides (its exclusive time)."""
    from tracekit.trace.kernel_names import trace_labels

    k = a.kernels
    comm = (k["block"] == "collective").to_numpy() & (k["kind"] == "kernel").to_numpy() & _in_scope(a)
    time = k["exclusive_ns"].to_numpy(dtype=np.float64)
    if not comm.any() or not time[comm].sum() > 0:
        return None
    top, top_ns, _ = _largest_by_name(k, comm, time)
    return _row("exposed_communication", "communication (exposed)", trace_labels(k["name"].unique())[top], float(time[comm].sum()), of_ns,
                {"kernel": top, "exposed_ns": top_ns, "comm_kernel_time_ns": float(k["duration_ns"].to_numpy()[comm].sum())})


def recoverable_row(f, work: dict[str, np.ndarray], a: Measured, of_ns: float,
                    claimed: np.ndarray | None = None) -> dict[str, Any] | None:
    """Kernel time recoverable at the sustained roofline (kernels only: copies are their own
    row; kernels a waste row claimed are in that row), named by the op (or, without one, the
    kernel) that holds the most of it."""
    from tracekit.trace.kernel_names import trace_labels

    kernel = (a.kernels["kind"] == "kernel").to_numpy()
    if claimed is not None:
        kernel = kernel & ~claimed
    total = float(np.nansum(np.where(kernel, work["recoverable_ns"], 0.0)))
    if not total > 0:
        return None
    op = f.fix_ops.iloc[0] if len(f.fix_ops) else None
    top = f.fix_kernels.iloc[0] if len(f.fix_kernels) else None
    if claimed is not None and claimed.any():  # the tables rank every kernel: name the largest unclaimed one
        rest = np.nan_to_num(np.where(kernel, work["recoverable_ns"], 0.0))
        name, held, _ = _largest_by_name(a.kernels, kernel, rest)
        return _row("recoverable", "kernel time above the roofline", trace_labels(a.kernels["name"].unique())[name], total, of_ns,
                    {"kernel": name, "recoverable_ns": held, "time_ns": float(np.nansum(np.where(kernel, work["time_ns"], 0.0))),
                     "t_min_ns": float(np.nansum(np.where(kernel, work["t_min_ns"], 0.0)))})
    if op is not None and (top is None or op["recoverable_ns"] >= top["recoverable_ns"]):
        where = f"{op['what']} {op['detail']}".strip()
        evidence = {"op": str(op["what"]), "shapes": str(op["detail"]), "recoverable_ns": float(op["recoverable_ns"]),
                    "time_ns": float(op["time_ns"]), "t_min_ns": float(op["t_min_ns"])}
    elif top is not None:
        where = trace_labels(a.kernels["name"].unique())[str(top["what"])]
        evidence = {"kernel": str(top["what"]), "recoverable_ns": float(top["recoverable_ns"]),
                    "time_ns": float(top["time_ns"]), "t_min_ns": float(top["t_min_ns"])}
    else:
        return None
    return _row("recoverable", "kernel time above the roofline", where, total, of_ns, evidence)


def launch_row(f, a: Measured, of_ns: float, host_wait_ns: float) -> dict[str, Any] | None:
    """Host time in launch calls that took longer than the kernel they launched, counted only
    as far as it explains GPU idle: while the GPU is busy a long launch call is the launch
    queue pushing back (the GPU is the limit), not a cost. Its time is the smaller of the
    launch calls' time and the GPU's idle waiting for the host to launch work."""
    from tracekit.trace.kernel_names import trace_labels

    s = f.short_kernels
    if not s.get("count"):
        return None
    explained = min(float(s["launch_ns"]), host_wait_ns)
    if not explained > 0:
        return None
    top = s["top"][0]["name"] if s.get("top") else ""
    return _row("launch_overhead", f"launch calls longer than their kernels ({s['count']:,}; host)",
                trace_labels(a.kernels["name"].unique())[top] if top else "", explained, of_ns,
                {"kernels": int(s["count"]), "kernel_time_ns": float(s["time_ns"]), "launch_ns": float(s["launch_ns"]),
                 "host_wait_idle_ns": host_wait_ns})


def profiler_row(a: Measured, of_ns: float, first_run: np.ndarray) -> dict[str, Any] | None:
    """Launch-call time above the same call's fastest runs (its FASTEST quantile): the
    profiler's instrumentation (record_shapes, with_stack) and host contention stretch the
    calls it records; the fastest runs of a call are the closest the trace has to its
    uninstrumented time. Inside the steps' host ranges where the trace has steps. Calls
    whose work started BACKLOG_NS or more after they returned are left out: they waited on a
    full launch queue (the GPU busy, possibly with work from before the capture), which the
    profiler did not cause; so are the calls that first launched each kernel (idle.first_runs)."""
    t = a.trace
    if t is None or not len(t.launches):
        return None
    lt = t.launches
    start, end = lt["start"].to_numpy(np.int64), lt["end"].to_numpy(np.int64)
    dur = (end - start).astype(np.float64)
    # calls that launched GPU work (kernels, copies), without the synchronising ones: a
    # blocking copy is long because it waits for the GPU, not because it is instrumented
    launched = np.zeros(len(lt), dtype=bool)
    rows = a.kernels["launch"].to_numpy()
    launched[rows[rows >= 0]] = True
    first_start = np.full(len(lt), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first_start, rows[rows >= 0], a.kernels["start"].to_numpy(np.int64)[rows >= 0])
    backlog = first_start - end >= BACKLOG_NS
    first = np.zeros(len(lt), dtype=bool)  # the calls that first launched each kernel (idle.first_runs)
    first[rows[first_run & (rows >= 0)]] = True
    names = key_of(lt["name"], missing="nan")
    sync = np.array([bool(SYNC_API.search(str(n))) for n in names[1]], dtype=bool)
    keep = (dur > 0) & launched & ~backlog & ~first & (names[0] >= 0)
    keep[keep] &= ~sync[names[0][keep]]
    if len(a.steps) and "host_start_ns" in a.steps:
        # a step without a host range (a GPU annotation no host range matches) holds no call
        lo = pd.to_numeric(a.steps["host_start_ns"], errors="coerce").to_numpy(np.float64)
        hi = lo + pd.to_numeric(a.steps["host_duration_ns"], errors="coerce").to_numpy(np.float64)
        lo, hi = np.nan_to_num(lo, nan=0.0).astype(np.int64), np.nan_to_num(hi, nan=0.0).astype(np.int64)
        order = np.argsort(lo)
        i = np.searchsorted(lo[order], start, side="right") - 1
        keep &= (i >= 0) & (start < hi[order][np.maximum(i, 0)])
    if not keep.any():
        return None
    codes = names[0][keep]
    d = dur[keep]
    fastest = np.zeros(len(names[1]), dtype=np.float64)
    for code in np.unique(codes):  # one quantile per distinct call name (a few dozen)
        fastest[code] = np.quantile(d[codes == code], FASTEST)
    excess = np.clip(d - fastest[codes], 0, None)
    by_name = np.bincount(codes, weights=excess, minlength=len(names[1]))
    total = float(excess.sum())
    if not total > 0:
        return None
    top = str(names[1][int(np.argmax(by_name))])
    return _row("profiler_overhead", "launch calls above their fastest 10% (profiler; host)", top, total, of_ns,
                {"launch_ns": float(d.sum()), "calls": int(keep.sum()), "top_call": top, "top_excess_ns": float(by_name.max()),
                 "first_launches_left_out": int((first & launched).sum())})


def ranked(a: Measured, f, work: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """Every cause, ranked by time; GPU-time rows carry the running total of their shares."""
    from tracekit.analysis.waste import detect

    of = f.denominator_ns
    idle = idle_rows(f, of)
    host_wait = sum(r["time_ns"] for r in idle if r["cause"].endswith("host_wait"))
    waste = detect(a, work["time_ns"], of, work["recoverable_ns"])
    claimed = np.zeros(len(a.kernels), dtype=bool)
    for r in waste:
        claimed |= r.pop("kernel_rows")
    rows = [*idle, copy_row(a, of), comm_row(a, of), *waste, recoverable_row(f, work, a, of, claimed),
            launch_row(f, a, of, host_wait), profiler_row(a, of, work["first_run"])]
    rows = [r for r in rows if r is not None]
    # Host time costs the GPU only through the host-wait idle it is part of: a host-time row
    # ranks by the smaller of its time and that idle (after a GPU-time row of equal time).
    rows.sort(key=lambda r: (-min(r["time_ns"], host_wait), 1) if r["cause"] in HOST_TIME_CAUSES else (-r["time_ns"], 0))
    running = 0.0
    for r in rows:
        if r["cause"] in HOST_TIME_CAUSES or r["share"] is None:
            r["cumulative_share"] = None
        else:
            running += r["share"]
            r["cumulative_share"] = running
    return rows
