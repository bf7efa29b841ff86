"""Which step owns which kernel: the one rule, for the step table and for the model.

A step owns every kernel launched inside its time window on any thread of its process: the
backward pass runs on autograd's own thread, outside the step range's call stack, but it is
still that step's work. Kernels without a launch (issued before the capture, or graph
replays seen only on the GPU) fall back to the GPU-side copy of the step annotation, and
failing that to the step whose GPU window they ran in.

A step's GPU window is where its work ran on the GPU: its GPU-side annotation
(`gpu_user_annotation` of the same name, paired in order of occurrence) widened to the
kernels it owns by launch, or, without one, the first start to the last end of those
kernels. Only a step that owns nothing on the GPU falls back to its host range. With CUDA
graphs and asynchronous serving the GPU runs the step long after its host range ends, and
kernels launched before the capture (no launch event) that run inside a later step's host
range are the queued work of earlier steps: the GPU window, not the host range, decides.

"""

from __future__ import annotations

import re

import numpy as np

from tracekit.trace.column_text import as_text, rows_in, rows_where
from tracekit.trace.frames import Trace

# torch.profiler steps, decode-step ranges, and serving engines' step ranges:
#   SGLang      f"step[EXTEND bs={bs} toks={ext_toks}]", f"step[{mode.name} bs={bs}]" (+ roofline suffix)
#   TRT-LLM     f"[Executor] _forward_step {iter_counter}: {n} ctx reqs, {m} gen reqs"
#   ROCm ATOM   `prefill[bs=2 tok=14721 ctx=[..]]`, `decode[bs=64 tok=64 d=64]`
STEP = re.compile(r"^ProfilerStep#\d+$|(?i:^decode_step|\bdecode step\b|^step\[)"
                  r"|^\[Executor\] _forward_step \d+|^(?:prefill|decode|mixed)\[bs=")
# A user's prefill range beside its decode-step ranges (`prefill`, then `decode_step` x N: a
# generation loop that names its decode steps names its prefill too): a step of its own where
# the trace has decode steps and no step range overlaps it, so the prefill's GPU time is a
# step's, not outside every step.
PREFILL_STEP = re.compile(r"(?i)^prefill(?:[ _]step)?$")
# A serving engine's batch annotation: a step of its own only where no step range above
# overlaps it (SGLang nests a vLLM-style range around its step[DECODE ..]). vLLM V1 forms
# (vllm/v1/worker/gpu_worker.py, Worker.annotate_profile):
#   f"execute_new_{num_new}_cached_{num_cached}"                       (PR #22496)
#   "execute_context_N(T)_generation_M(T)", "execute_T_context_N(..)_generation_M(..)" (PR #31193, #37524)
SERVING_STEP = re.compile(r"^execute_(\d+_)?context_\d+\(|^execute_new_\d+_cached_\d+$")
# A diffusion pipeline's call (torch.profiler with_stack: the Python frame of a diffusers or
# xDiT pipeline's `__call__`, diffusers/pipelines/<family>/pipeline_*.py or
# xfuser/model_executor/pipelines/pipeline_*.py): one generation (prompt -> images or a
# video), a step of its own where no step range overlaps it. The outermost call only (an
# xDiT pipeline calls into diffusers').
PIPELINE_CALL = re.compile(r"(diffusers|xfuser)/(.*/)?pipelines?/.*\.py\(\d+\): __call__$")
# The domain of the steps tracekit.structure.steps adds to a trace that marks none.
INFERRED_DOMAIN = "inferred"

def step_rows(trace: Trace) -> np.ndarray:
    """Rows of trace.ranges that are steps on the host: step ranges (not GPU-side copies), and
    where no step range overlaps them, serving batch ranges and diffusion pipeline calls
    (Python frames: PIPELINE_CALL); the inferred steps (INFERRED_DOMAIN), where a trace that
    marks none was given them."""
    r = trace.ranges
    if r.empty:
        return np.zeros(0, dtype=np.int64)
    inferred = np.flatnonzero(rows_in(r["domain"], [INFERRED_DOMAIN]))
    if len(inferred):
        return inferred
    host = ~rows_in(r["domain"], ["python", "gpu", INFERRED_DOMAIN])

    def matching(pattern: re.Pattern) -> np.ndarray:  # one search per distinct name, not per range
        return rows_where(r["name"], lambda n: pattern.search(n[:256]))

    primary = matching(STEP) & host
    serving = matching(SERVING_STEP) & host & ~primary
    steps = np.flatnonzero(primary)
    start, end = r["start"].to_numpy(), r["end"].to_numpy()
    if len(steps):
        prefill = np.flatnonzero(matching(PREFILL_STEP) & host & ~primary)
        alone = [i for i in prefill if not ((start[steps] < end[i]) & (end[steps] > start[i])).any()]
        steps = np.sort(np.r_[steps, np.array(alone, dtype=np.int64)])
    if serving.any():
        alone = [i for i in np.flatnonzero(serving) if not ((start[steps] < end[i]) & (end[steps] > start[i])).any()]
        steps = np.sort(np.r_[steps, np.array(alone, dtype=np.int64)])
    python = rows_in(r["domain"], ["python"])
    if python.any():
        calls = np.flatnonzero(matching(PIPELINE_CALL) & python)
        calls = calls[np.argsort(start[calls], kind="stable")]
        outer, reach = [], -np.inf
        for i in calls:
            if start[i] >= reach and not ((start[steps] < end[i]) & (end[steps] > start[i])).any():
                outer.append(i)
            reach = max(reach, end[i])
        if outer:
            steps = np.sort(np.r_[steps, np.array(outer, dtype=np.int64)])
    return steps


def kernel_steps(trace: Trace, kernels=None, steps: np.ndarray | None = None, blind_by_time: bool = True) -> np.ndarray:
    """Per kernel: the trace.ranges row of the innermost step whose window holds its launch
    (same process), else of the host step paired with its GPU-side step annotation; -1 for
    none. `steps`: the range rows that are steps (default: step_rows). `blind_by_time`: a
    kernel with neither a launch nor a GPU-side annotation goes to the step whose GPU window
    (gpu_windows, from the kernels owned so far) it ran in; only a step that owns
    nothing on the GPU lends its host range for this."""
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
    # Still nothing (issued before the capture, no GPU-side annotation): the step whose GPU
    # window the kernel ran in. A kernel that ran inside a step's host range but before the
    # step's own work began on the GPU is an earlier step's queued work: nobody's here.
    blind = np.flatnonzero((owner < 0) & ~has_launch)
    if len(blind) and blind_by_time:
        lo, hi, _ = gpu_windows(trace.ranges, kernels, steps, owner)
        _claim_by_time(owner, blind, kernels["start"].to_numpy(), steps[order], lo[order], hi[order])
    return owner


WINDOW_SOURCES = ("gpu annotation", "kernels", "host range", "gpu annotation + kernels")


def gpu_windows(r, kernels, steps: np.ndarray, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per step (rows of the ranges table `r` in `steps`): the [start, end] of its GPU window
    and where it comes from (WINDOW_SOURCES): its GPU-side annotation widened to the kernels
    it owns (`owner`, as kernel_steps; "gpu annotation + kernels" where they reach past it),
    else the first start to the last end of those kernels, else (a step that owns nothing on
    the GPU) its host range."""
    steps = np.asarray(steps, dtype=np.int64)
    lo = r["start"].to_numpy()[steps].astype(np.int64).copy()
    hi = r["end"].to_numpy()[steps].astype(np.int64).copy()
    source = np.full(len(steps), WINDOW_SOURCES[2], dtype=object)
    if not len(steps):
        return lo, hi, source
    k_lo = np.full(len(steps), np.iinfo(np.int64).max, dtype=np.int64)
    k_hi = np.full(len(steps), np.iinfo(np.int64).min, dtype=np.int64)
    if len(kernels):
        position = np.full(len(r) + 1, -1, dtype=np.int64)
        position[steps] = np.arange(len(steps))
        slot = position[np.where(owner >= 0, owner, len(r))]
        owned = slot >= 0
        np.minimum.at(k_lo, slot[owned], kernels["start"].to_numpy(np.int64)[owned])
        np.maximum.at(k_hi, slot[owned], kernels["end"].to_numpy(np.int64)[owned])
    has_kernels = k_hi > np.iinfo(np.int64).min
    a_lo, a_hi = annotation_windows(r, steps)
    annotated = a_hi >= 0
    lo = np.where(annotated, a_lo, np.where(has_kernels, k_lo, lo))
    hi = np.where(annotated, a_hi, np.where(has_kernels, k_hi, hi))
    lo = np.where(has_kernels, np.minimum(lo, k_lo), lo)
    hi = np.where(has_kernels, np.maximum(hi, k_hi), hi)
    source[has_kernels] = WINDOW_SOURCES[1]
    source[annotated] = WINDOW_SOURCES[0]
    # a GPU-side marker (a few-us ProfilerStep copy on some ROCm traces) that the step's own
    # kernels outrun: the window is the kernels' as much as the annotation's, and says so
    widened = annotated & has_kernels & ((k_lo < a_lo) | (k_hi > a_hi))
    source[widened] = WINDOW_SOURCES[3]
    return lo, hi, source


def annotation_windows(r, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per step: [start, end] of its GPU-side annotation (-1, -1 for none). Kineto copies a
    host range onto the GPU under the same name; a name that repeats (vLLM's
    `execute_new_0_cached_4`) is paired in order of occurrence, per device, and only where
    the device holds as many copies as the host has ranges of that name."""
    lo = np.full(len(steps), -1, dtype=np.int64)
    hi = np.full(len(steps), -1, dtype=np.int64)
    pairs = paired_annotations(r, steps)
    for i, rows in pairs.items():
        lo[i] = int(r["start"].to_numpy()[rows].min())
        hi[i] = int(r["end"].to_numpy()[rows].max())
    return lo, hi


def paired_annotations(r, steps: np.ndarray) -> dict[int, list[int]]:
    """Position in `steps` -> the GPU-side annotation rows (of ranges table `r`) paired with
    that host step."""
    if r.empty or not len(steps):
        return {}
    names = as_text(r["name"])
    domain = as_text(r["domain"])
    start = r["start"].to_numpy()
    step_names = names[steps]
    wanted = set(step_names.tolist())
    gpu = np.flatnonzero((domain == "gpu") & np.isin(names, list(wanted)))
    if not len(gpu):
        return {}
    device = r["pid"].to_numpy()[gpu]
    out: dict[int, list[int]] = {}
    for name in wanted:
        hosts = np.flatnonzero(step_names == name)
        hosts = hosts[np.argsort(start[steps[hosts]], kind="stable")]
        mine = gpu[names[gpu] == name]
        for dev in np.unique(device[names[gpu] == name]):
            copies = mine[device[names[gpu] == name] == dev]
            if len(copies) != len(hosts):
                continue
            copies = copies[np.argsort(start[copies], kind="stable")]
            for h, c in zip(hosts, copies):
                out.setdefault(int(h), []).append(int(c))
    return out


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
    host_by_copy = {c: int(hosts[i]) for i, rows in paired_annotations(r, np.asarray(hosts)).items() for c in rows}
    distinct, inverse = np.unique(annotations, return_inverse=True)
    mapped = np.full(len(distinct), -1, dtype=np.int64)
    for j, node in enumerate(distinct):
        while node >= 0 and node not in host_by_copy and names[node] not in host_by_name:
            node = parent[node]
        if node >= 0:
            mapped[j] = host_by_copy.get(int(node), host_by_name.get(names[node], -1))
    return mapped[inverse]
