"""Which step owns which kernel: the one rule, for the step table and for the model.

A step owns every kernel launched inside its time window on any thread of its process: the
backward pass runs on autograd's own thread, outside the step range's call stack, but it is
still that step's work. Kernels without a launch (issued before the capture, or graph
replays seen only on the GPU) fall back to the GPU-side copy of the step annotation, and
failing that to the step whose window they ran in.

"""

from __future__ import annotations

import re

import numpy as np

from tracekit.trace.column_text import as_text
from tracekit.trace.frames import Trace

# torch.profiler steps, decode-step ranges, SGLang `step[DECODE bs=N]`.
STEP = re.compile(r"^ProfilerStep#\d+$|(?i:^decode_step|\bdecode step\b|^step\[)")
# A serving engine's batch annotation (vLLM `execute_context_N(..)_generation_M(..)`): a step
# of its own only where no step range above overlaps it (SGLang nests it in `step[DECODE ..]`).
SERVING_STEP = re.compile(r"^execute_(\d+_)?context_\d+\(")

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


def kernel_steps(trace: Trace, kernels=None, steps: np.ndarray | None = None, blind_by_time: bool = True) -> np.ndarray:
    """Per kernel: the trace.ranges row of the innermost step whose window holds its launch
    (same process), else of the host step named like its GPU-side step annotation; -1 for none.
    `steps`: the range rows that are steps (default: step_rows). `blind_by_time`: a kernel
    with neither a launch nor a GPU-side annotation goes to the step whose window it ran in."""
    kernels = trace.kernels if kernels is None else kernels
    owner = np.full(len(kernels), -1, dtype=np.int64)
    steps = step_rows(trace) if steps is None else np.asarray(steps, dtype=np.int64)
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
    if len(blind) and blind_by_time:
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


def host_range_by_gpu_annotation(r, annotations: np.ndarray, hosts: np.ndarray) -> np.ndarray:
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
