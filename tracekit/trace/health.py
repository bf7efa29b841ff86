"""Trace health: what a trace holds that cannot be true, counted per activity kind, with what
the analysis does about it (drop, clamp, shift, fall back).

Profilers fail in ways the file format does not show: every kernel of a CUDA-graph replay
written with ts 0 and dur 0, kernels that start before the call that launched them (a
session's first activities with corrupted times, or a GPU clock offset from the CPU's),
correlation ids written twice, step markers or device properties missing. Each problem is a
`Problem` row in `meta["health"]`; the first warning of the trace names them all with
counts, every renderer shows them, and summary.json carries them.

The parser finds what only raw times show (`zero_times`: the span would otherwise start at
the epoch); `check` finds the rest on the linked trace (it needs each kernel's launch) and
applies the remedies it names. numpy only: the parsers' column tables are checked before
pandas is imported.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from tracekit.trace.tables import ColumnTrace, coded, column

# A GPU activity's start may precede its launch call's start by the clocks' skew (CUPTI
# converts GPU timestamps to the CPU clock); beyond this it is not skew.
LAUNCH_SKEW_NS = 2_000
# Two activities of one stream run in order; an overlap of more than this is not rounding.
STREAM_OVERLAP_NS = 1_000
# A zero timestamp is impossible where the rest of the capture lies this far from zero.
ZERO_FAR_US = 1e6
# More than this share of linked kernels ahead of their launches: the clocks are offset.
CLOCK_OFFSET_SHARE = 0.5
# CPU and GPU clocks disagree by microseconds (CUPTI's clock conversion): an activity at most this
# far before its launch call is read as that offset, not as a corrupted time.
CLOCK_SKEW_NS = 20_000
# The problem a GPU activity whose ts and dur are both 0 is recorded with (lost_time_counts reads it back).
LOST_TIMES = "have ts 0 and dur 0, outside the capture (the profiler lost their times)"
# Kineto's marker of one profiler step (torch.profiler's schedule).
_PROFILER_STEP = "ProfilerStep#"


@dataclasses.dataclass(frozen=True)
class Problem:
    kind: str  # activity kind: kernel, memcpy, memset, launch, range, trace
    problem: str  # what is impossible or missing
    count: int  # rows with the problem (1 for a missing marker)
    of: int  # rows of that kind in the trace (0 where not counted)
    action: str  # what the analysis does about it

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        of = f" of {self.of:,}" if self.of else ""
        noun = f" {self.kind}s" if self.count != 1 or self.of else f" {self.kind}"
        return f"{self.count:,}{of}{noun} {self.problem}: {self.action}"


def zero_times(ts_us: np.ndarray, dur_us: np.ndarray, others_first_us: float | None) -> np.ndarray:
    """Rows whose time is ts 0, dur 0 while every other event of the trace lies more than
    ZERO_FAR_US from zero: the profiler lost their times (the capture is elsewhere)."""
    zero = (ts_us == 0) & (dur_us == 0)
    if others_first_us is None or abs(others_first_us) <= ZERO_FAR_US:
        return np.zeros(len(ts_us), dtype=bool)
    return zero


def zero_time_problems(kinds: np.ndarray, dropped: np.ndarray, labels: tuple[str, ...]) -> list[Problem]:
    """One Problem per GPU activity kind (codes `kinds` into `labels`) with dropped zero times."""
    out = []
    for code, kind in enumerate(labels):
        mine = kinds == code
        n = int((dropped & mine).sum())
        if n:
            gpu = kind in ("kernel", "memcpy", "memset")
            out.append(Problem(kind, LOST_TIMES, n,
                               int(mine.sum()), "dropped, so kernel-level times, shares and rates are unknown" if gpu
                               else "dropped"))
    return out


def kernel_times_unknown(meta: dict[str, Any]) -> bool:
    """The parser dropped every GPU activity's time: only GPU annotations kept GPU times."""
    return bool(meta.get("kernel_times_unknown"))



def lost_time_counts(meta: dict[str, Any]) -> dict[str, int]:
    """Per kind (kernel, memcpy, memset, runtime call), how many the trace recorded whose times
    the profiler lost (dropped by the parser): the count is known, only the times are not."""
    out: dict[str, int] = {}
    for p in meta.get("health") or []:
        if p.get("problem") == LOST_TIMES and p.get("kind") in ("kernel", "memcpy", "memset", "runtime call"):
            out[p["kind"]] = out.get(p["kind"], 0) + int(p["count"])
    return out


def check(trace: ColumnTrace) -> ColumnTrace:
    """The linked column tables (both parsers build them) with their health problems found, recorded in
    meta["health"] (after any the parser found), remedied as recorded, and named in the first
    warning."""
    problems = list(trace.meta.get("health") or [])
    trace, found = _before_launch(trace)
    problems += found
    problems += _stream_overlaps(trace.kernels)
    problems += _unlinked(trace.kernels, trace.launches)
    problems += _duplicated_ids(trace.launches)
    problems += _missing_markers(trace)
    if trace.meta.get("cut_short"):
        problems.append(Problem("trace", "file is truncated (the job died mid-write, or an event cap)", 1, 0,
                                "read up to the last whole event; the last step may be partial"))
    meta = {**trace.meta, "health": [p.to_dict() if isinstance(p, Problem) else p for p in problems]}
    warnings = list(trace.warnings)
    if problems:
        warnings.insert(0, warning_line(meta["health"]))
    return dataclasses.replace(trace, meta=meta, warnings=warnings)


def warning_line(health: list[dict[str, Any]]) -> str:
    """One line: problems that share a wording and a remedy (one per activity kind) are
    named once, with each kind's count."""
    groups: dict[tuple[str, str], list[Problem]] = {}
    for p in health:
        problem = Problem(**p)
        groups.setdefault((problem.problem, problem.action), []).append(problem)
    parts = []
    for (problem, action), members in groups.items():
        if len(members) == 1:
            parts.append(members[0].describe())
            continue
        counts = ", ".join(f"{m.count:,}{f' of {m.of:,}' if m.of else ''} {m.kind}s" for m in members)
        parts.append(f"{counts} {problem}: {action}")
    return "trace health: " + "; ".join(parts)


def _kind_counts(kernels) -> dict[str, int]:
    kinds = coded(kernels, "kind")
    counts = np.bincount(kinds.codes[kinds.codes >= 0], minlength=len(kinds.labels))
    return {str(label): int(n) for label, n in zip(kinds.labels, counts)}


def _before_launch(trace: ColumnTrace) -> tuple[ColumnTrace, list[Problem]]:
    """Activities that start before their own launch call.

    - Most of the linked ones: the GPU clock is offset from the CPU's. Every GPU time
      (activities and GPU annotations) is shifted by the largest lead of the bulk (leads
      within CLOCK_SKEW_NS of their median: one corrupted outlier does not set the shift);
      those still before their launch after it are dropped.
    - A few, by at most CLOCK_SKEW_NS: a small offset, seen only on kernels that ran on an
      idle GPU (a queued kernel starts long after its launch whatever the clocks say); the
      GPU times are shifted by that much, and nothing is dropped.
    - A few, by more: their times are corrupted (a session's first activities): dropped."""
    k, launches = trace.kernels, trace.launches
    launch = column(k, "launch") if len(k) else np.zeros(0, dtype=np.int64)
    linked = launch >= 0
    if not linked.any():
        return trace, []
    lead = np.zeros(len(k), dtype=np.int64)
    lead[linked] = column(launches, "start")[launch[linked]] - column(k, "start")[linked]
    early = linked & (lead > LAUNCH_SKEW_NS)
    n = int(early.sum())
    if not n:
        return trace, []
    of = int(linked.sum())
    if n > CLOCK_OFFSET_SHARE * of:
        bulk = early & (lead <= int(np.median(lead[early])) + CLOCK_SKEW_NS)
        shift = int(lead[bulk].max())
        problems = [Problem("kernel", "start before their own launch call (the GPU clock is offset from the CPU's)", n, of,
                            f"every GPU time is shifted {shift / 1000:,.3f} us later, so none precedes its launch")]
        outliers = early & (lead > shift)
        if outliers.any():
            problems.append(Problem("kernel", "start before their own launch call even after the clock shift (corrupted times)",
                                    int(outliers.sum()), of, "dropped: their times cannot be true"))
            trace = _drop_kernels(trace, ~outliers)
        return _shift_gpu(trace, shift), problems
    far = early & (lead > CLOCK_SKEW_NS)
    problems = []
    if (early & ~far).any():
        shift = int(lead[early & ~far].max())
        problems.append(Problem("kernel", "start before their own launch call by a few microseconds (a small clock offset, "
                                          "seen on kernels that ran on an idle GPU)", int((early & ~far).sum()), of,
                                f"every GPU time is shifted {shift / 1000:,.3f} us later, so none precedes its launch"))
    if far.any():
        problems.append(Problem("kernel", "start before their own launch call (corrupted times, e.g. at the session's start)",
                                int(far.sum()), of, "dropped: their times cannot be true"))
        trace = _drop_kernels(trace, ~far)
    if (early & ~far).any():
        trace = _shift_gpu(trace, shift)
    return trace, problems


def _shift_gpu(trace: ColumnTrace, shift: int) -> ColumnTrace:
    k, r = trace.kernels, trace.ranges
    gpu = coded(r, "domain").equals("gpu") if len(r) else np.zeros(0, dtype=bool)
    r_start, r_end = column(r, "start") + np.where(gpu, shift, 0), column(r, "end") + np.where(gpu, shift, 0)
    k_start, k_end = column(k, "start") + shift, column(k, "end") + shift
    span = max(int(trace.meta.get("span_ns") or 0), int(k_end.max()) if len(k_end) else 0, int(r_end.max()) if len(r_end) else 0)
    meta = {**trace.meta, "span_ns": span}
    return dataclasses.replace(trace, kernels=k.with_columns(start=k_start, end=k_end),
                               ranges=r.with_columns(start=r_start, end=r_end), meta=meta)


def _drop_kernels(trace: ColumnTrace, keep: np.ndarray) -> ColumnTrace:
    return dataclasses.replace(trace, kernels=trace.kernels.take(np.flatnonzero(keep)))


def _stream_overlaps(kernels) -> list[Problem]:
    """Activities of one stream that start more than STREAM_OVERLAP_NS before the one before
    them ended (a stream runs its work in order). Busy time is a union, so they are kept."""
    if not len(kernels):
        return []
    device, stream = column(kernels, "device"), column(kernels, "stream")
    start, end = column(kernels, "start"), column(kernels, "end")
    order = np.lexsort((start, stream, device))
    device, stream, start, end = device[order], stream[order], start[order], end[order]
    new_stream = np.r_[True, (device[1:] != device[:-1]) | (stream[1:] != stream[:-1])]
    # the latest end so far within each stream: one long activity can cover several after it
    latest = np.empty_like(end)
    bounds = np.r_[np.flatnonzero(new_stream), len(end)]
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        latest[lo:hi] = np.maximum.accumulate(end[lo:hi])
    overlap = ~new_stream[1:] & (start[1:] < latest[:-1] - STREAM_OVERLAP_NS)
    n = int(overlap.sum())
    if not n:
        return []
    return [Problem("kernel", "overlap the activity before them on their own stream", n, len(kernels),
                    "kept: busy time counts their union once")]


def _unlinked(kernels, launches) -> list[Problem]:
    """Activities that carry a correlation id no launch call of the capture has, not issued
    before the capture: their launch, op and shapes are unknown."""
    if not len(kernels) or not len(launches):
        return []
    missing = (column(kernels, "launch") < 0) & (column(kernels, "correlation") >= 0) & ~column(kernels, "launched_before_capture").astype(bool)
    n = int(missing.sum())
    if not n:
        return []
    return [Problem("kernel", "have a correlation id that no launch call in the capture has", n, len(kernels),
                    "kept without a launch, op or shapes (uncosted unless a model fills them)")]


def _duplicated_ids(launches) -> list[Problem]:
    """Launch calls whose (process, correlation id) another launch call already has."""
    if not len(launches):
        return []
    corr, pid = column(launches, "correlation"), column(launches, "pid")
    valid = corr >= 0
    # sorted by (process, id), a repeat sits right after its first: counted in one pass
    # (np.unique over rows, axis=0, was ~0.3 s on 100k launches)
    pid, corr = pid[valid], corr[valid]
    order = np.lexsort((corr, pid))
    pid, corr = pid[order], corr[order]
    n = int(np.count_nonzero((pid[1:] == pid[:-1]) & (corr[1:] == corr[:-1])))
    if not n:
        return []
    return [Problem("launch", "repeat a correlation id another launch call has", n, len(launches),
                    "each activity with that id is linked to the first call with it")]


def _missing_markers(trace: Any) -> list[Problem]:
    """Markers a torch.profiler trace of GPU work normally holds: ProfilerStep#N ranges (the
    schedule's steps) and deviceProperties (the GPU's name)."""
    if trace.meta.get("format") != "kineto" or not (len(trace.kernels) or kernel_times_unknown(trace.meta)):
        return []
    out = []
    names = coded(trace.ranges, "name") if len(trace.ranges) else None
    if names is None or not names.where(lambda n: str(n).startswith(_PROFILER_STEP)).any():
        # a missing marker matters where no other step range (decode, serving) stands in for it
        from tracekit.trace.step_ownership import SERVING_STEP, STEP

        if names is None or not names.where(lambda n: bool(STEP.search(str(n)[:256]) or SERVING_STEP.search(str(n)[:256]))).any():
            out.append(Problem("range", "ProfilerStep#N marker is missing, and no other step range stands in for it", 1, 0,
                               "steps come from the trace's structure where it shows them, else per-step figures are absent"))
    if not trace.meta.get("devices"):
        out.append(Problem("trace", "deviceProperties marker is missing (the GPU is unnamed)", 1, 0,
                           "the device comes from --device, else the roofline is unknown"))
    return out
