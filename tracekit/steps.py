"""Steps: ProfilerStep#N and decode-step ranges, with per-step time and bandwidth accounting.

A step owns every kernel launched inside its time window on any thread of its process: the
backward pass runs on autograd's own thread, outside the step range's call stack, but it is
still that step's work. Kernels without a launch (issued before the capture, or graph
replays seen only on the GPU) fall back to the GPU-side copy of the step annotation, and
failing that to the step whose window they ran in.

Per step: wall time, kernels, GPU busy time, bytes moved and achieved bandwidth against the
device's peak and sustained. Bytes come only from kernels with a cost; when those cover less
than half of the step's kernel time the figures are unknown (NaN), not a small number.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.column_text import as_text
from tracekit.trace import Trace
from tracekit.unknown import MIN_COVERAGE

# torch.profiler steps, decode-step ranges, SGLang `step[DECODE bs=N]`.
STEP = re.compile(r"^ProfilerStep#\d+$|(?i:^decode_step|\bdecode step\b|^step\[)")
# A serving engine's batch annotation (vLLM `execute_context_N(..)_generation_M(..)`): a step
# of its own only where no step range above overlaps it (SGLang nests it in `step[DECODE ..]`).
SERVING_STEP = re.compile(r"^execute_(\d+_)?context_\d+\(")

STEP_COLUMNS = ["step", "start_ns", "duration_ns", "kernels", "busy_ns", "busy_in_window_ns", "coverage", "bytes", "achieved_tbps",
                "bandwidth_share_peak", "bandwidth_share_sustained"]


def step_rows(trace: Trace) -> np.ndarray:
    """Rows of trace.ranges that are steps on the host (not GPU-side copies, not Python frames)."""
    r = trace.ranges
    if r.empty:
        return np.zeros(0, dtype=np.int64)
    names = r["name"].astype("category")
    host = ~np.isin(as_text(r["domain"]), ["python", "gpu"])
    # One regex search per distinct name, not per range.
    def matching(pattern: re.Pattern) -> np.ndarray:
        by_code = np.array([bool(pattern.search(str(n)[:256])) for n in names.cat.categories] + [False])
        return by_code[names.cat.codes.to_numpy()]

    primary = matching(STEP) & host
    serving = matching(SERVING_STEP) & host & ~primary
    steps = np.flatnonzero(primary)
    if serving.any():
        start, end = r["start"].to_numpy(), r["end"].to_numpy()
        alone = [i for i in np.flatnonzero(serving) if not ((start[steps] < end[i]) & (end[steps] > start[i])).any()]
        steps = np.sort(np.r_[steps, np.array(alone, dtype=np.int64)])
    return steps


def kernel_steps(trace: Trace, kernels: pd.DataFrame | None = None) -> np.ndarray:
    """Per kernel: the trace.ranges row of the innermost step whose window holds its launch
    (same process), else of the host step named like its GPU-side step annotation; -1 for none."""
    kernels = trace.kernels if kernels is None else kernels
    owner = np.full(len(kernels), -1, dtype=np.int64)
    steps = step_rows(trace)
    if not len(steps) or not len(kernels):
        return owner
    r = trace.ranges
    launch = kernels["launch"].to_numpy()
    has_launch = launch >= 0
    launch_start = np.full(len(kernels), np.iinfo(np.int64).min, dtype=np.int64)
    launch_pid = np.full(len(kernels), -1, dtype=np.int64)
    if has_launch.any():
        launch_start[has_launch] = trace.launches["start"].to_numpy()[launch[has_launch]]
        launch_pid[has_launch] = trace.launches["pid"].to_numpy()[launch[has_launch]]

    # Outer steps first, so that a step nested in another (decode_step in ProfilerStep#3)
    # takes its kernels from the outer one.
    depth = r["depth"].to_numpy()[steps]
    start, end, pid = (r[c].to_numpy()[steps] for c in ("start", "end", "pid"))
    order = np.lexsort((start, depth))
    for pid_value in np.unique(pid):
        in_process = has_launch & ((launch_pid == pid_value) | (launch_pid < 0) | (pid_value < 0))
        mine = order[pid[order] == pid_value]
        _claim_by_time(owner, np.flatnonzero(in_process), launch_start, steps[mine], start[mine], end[mine])

    # No launch: the GPU-side annotation of a step (same name as the host range) decides.
    gpu_range = kernels["gpu_range"].to_numpy()
    fallback = (owner < 0) & ~has_launch & (gpu_range >= 0)
    if fallback.any():
        owner[fallback] = host_range_by_gpu_annotation(r, gpu_range[fallback], steps)
    # Still nothing (issued before the capture, no GPU-side annotation): the step whose
    # window the kernel ran in, the window the idle time inside steps is measured over.
    blind = np.flatnonzero((owner < 0) & ~has_launch)
    if len(blind):
        _claim_by_time(owner, blind, kernels["start"].to_numpy(), steps[order], start[order], end[order])
    return owner


def _claim_by_time(owner: np.ndarray, rows: np.ndarray, times: np.ndarray, steps: np.ndarray, start: np.ndarray,
                   end: np.ndarray) -> None:
    """owner[row] = the last of `steps` (in the order given) whose [start, end] holds times[row]."""
    rows = rows[np.argsort(times[rows], kind="stable")]
    sorted_times = times[rows]
    for step, lo_t, hi_t in zip(steps, start, end):
        lo, hi = np.searchsorted(sorted_times, lo_t, side="left"), np.searchsorted(sorted_times, hi_t, side="right")
        owner[rows[lo:hi]] = step


def host_range_by_gpu_annotation(r: pd.DataFrame, annotations: np.ndarray, hosts: np.ndarray) -> np.ndarray:
    """For each GPU-side annotation row: the host range among `hosts` with the name of it or
    of its nearest enclosing annotation (Kineto copies a host range onto the GPU under the
    same name); -1 for none. One walk up the annotation tree per distinct annotation."""
    names = as_text(r["name"])
    parent = r["parent"].to_numpy()
    host_by_name = {names[s]: s for s in hosts}
    distinct, inverse = np.unique(annotations, return_inverse=True)
    mapped = np.full(len(distinct), -1, dtype=np.int64)
    for j, node in enumerate(distinct):
        while node >= 0 and names[node] not in host_by_name:
            node = parent[node]
        if node >= 0:
            mapped[j] = host_by_name[names[node]]
    return mapped[inverse]


def _busy_in_windows(kernels: pd.DataFrame, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per window: the time any GPU activity ran inside it (union per device, clipped to the
    window, summed over devices): what the window's idle time is the rest of. A step's
    own kernels can run past its window (launched late, run after it): this counts the
    window, `busy_ns` the kernels."""
    from tracekit.timeline import union

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

    counts, times = per_step(), per_step(duration_k)
    costed_times, moved_all = per_step(duration_k, costed), per_step(np.nan_to_num(nbytes), costed)
    busy = per_step(np.asarray(exclusive, dtype=np.float64))
    in_window = _busy_in_windows(kernels, r["start"].to_numpy()[steps], r["end"].to_numpy()[steps])
    rows = []
    for i, s in enumerate(steps):
        duration = int(r["end"].iat[s] - r["start"].iat[s])
        time = float(times[i])
        coverage = float(costed_times[i] / time) if time > 0 else float("nan")
        known = coverage >= MIN_COVERAGE
        moved = float(moved_all[i]) if known else float("nan")
        rate = moved / (duration * 1e-9) if duration > 0 and known else float("nan")
        rows.append({
            "step": names[s], "start_ns": int(r["start"].iat[s]), "duration_ns": duration, "kernels": int(counts[i]),
            "busy_ns": int(busy[i]), "busy_in_window_ns": int(in_window[i]), "coverage": coverage, "bytes": moved,
            # bytes per second over the step's wall time, against the device's bandwidth
            "achieved_tbps": rate / 1e12,
            "bandwidth_share_peak": rate / bandwidth if bandwidth else float("nan"),
            "bandwidth_share_sustained": rate / (bandwidth * sustained) if bandwidth else float("nan"),
        })
    return pd.DataFrame(rows, columns=STEP_COLUMNS).sort_values("start_ns").reset_index(drop=True)
