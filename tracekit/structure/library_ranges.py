"""Ranges that a library or a profiler writes for itself: never a step, a stage or a cycle.

NVTX ranges carry a domain (nsys exports it: NVTX_EVENTS.domainId, named by the eventType 75
domain-create rows; tracekit.parsers.nsys writes it as `nvtx:<name>`). Domains excluded, from
the libraries' published source:

- `NCCL`: NCCL's own ranges around every collective and group call (`ncclAllReduce`,
  `ncclGroupEnd`, `ncclCommCount`, ...), one per call, not per iteration. NCCL declares the
  domain in src/include/nvtx.h: `struct nccl_domain{static constexpr char const* name{"NCCL"};}`.
- `cuvs`: RAPIDS cuVS's per-call ranges (cuvs/core/nvtx.hpp: `struct cuvs {name = "cuvs"}`).

And by name, in any domain: `aten::` ranges (torch.autograd.profiler.emit_nvtx writes one
per op; a torch op is an op, not a range of the user's), `autograd::` ranges (the autograd
engine's own nodes), and the profiler's own span (Kineto's `PyTorch Profiler (0)`). No
cuBLAS or cuDNN NVTX domain name was found in their published headers: a library range not
listed here is caught by the whole-forward test (tracekit.structure.repeated_steps).

And by what they hold, whatever their name or domain (one_call_ranges): an export may carry
NCCL's ranges under a domain id with no domain-create row, so the name `NCCL` is absent, or a
library may name its ranges anything. A range name each of whose ranges holds at most one unit
of work is a library's per-call range: at most one device launch on its thread (a collective's
kernel, or none for `ncclGroupStart`, `ncclCommCount`), or, on a thread that launches nothing
(a CPU trace), at most one top-level op and no weight read (WEIGHT_INPUT). A step holds a whole
call of a network: MIN_CALL_READS weight reads at least, each of which launches work.
"""

from __future__ import annotations

import re

import numpy as np

from tracekit.structure.weights import WEIGHT_INPUT
from tracekit.trace.column_text import as_text, rows_in, rows_where
from tracekit.trace.frames import Trace
from tracekit.trace.step_ownership import INFERRED_DOMAIN

LIBRARY_DOMAINS = ("nvtx:NCCL", "nvtx:cuvs")
LIBRARY_NAME = re.compile(r"^(?:aten::|autograd::|PyTorch Profiler \(\d+\)$)")


UNKNOWN = np.iinfo(np.int64).max  # what a range holds where its thread records no launch and no op
NOT_USER = ("python", "gpu", INFERRED_DOMAIN)  # Python frames, GPU-side ranges, the steps tracekit adds: not a library's


def library_ranges(trace: Trace) -> np.ndarray:
    """Per row of trace.ranges: is it a library's or a profiler's own range, by its domain, its
    name or what it holds (see above)?"""
    ranges = trace.ranges
    if ranges.empty:
        return np.zeros(0, dtype=bool)
    named = rows_in(ranges["domain"], LIBRARY_DOMAINS) | rows_where(ranges["name"], lambda n: LIBRARY_NAME.search(n[:64]))
    return named | one_call_ranges(trace)


def one_call_ranges(trace: Trace) -> np.ndarray:
    """Per row of trace.ranges: is its name one whose every range (two or more) holds at most
    one unit of work, a library's per-call range (see the module doc)?"""
    r = trace.ranges
    out = np.zeros(len(r), dtype=bool)
    user = np.flatnonzero(~rows_in(r["domain"], NOT_USER))
    if not len(user):
        return out
    units = _units_held(trace, user)
    _, name = np.unique(as_text(r["name"])[user].astype(str), return_inverse=True)
    most = np.zeros(name.max() + 1, dtype=np.int64)
    np.maximum.at(most, name, units)
    count = np.bincount(name)
    out[user] = (most[name] <= 1) & (count[name] >= 2)
    return out


def _units_held(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Per range row: the device launches on its thread within it; on a thread that launches
    nothing, its top-level ops, or 2 (no library call) where one of its ops reads a weight;
    UNKNOWN on a thread that records neither."""
    r, launches, ops = trace.ranges, trace.launches, trace.ops
    start, end = r["start"].to_numpy()[rows], r["end"].to_numpy()[rows]
    thread = r["pid"].to_numpy()[rows], r["tid"].to_numpy()[rows]
    held = np.zeros(len(rows), dtype=np.int64)
    for pid, tid in set(zip(thread[0].tolist(), thread[1].tolist())):
        here = (thread[0] == pid) & (thread[1] == tid)
        lo, hi = start[here], end[here]
        on = (launches["pid"].to_numpy() == pid) & (launches["tid"].to_numpy() == tid) if len(launches) else np.zeros(0, dtype=bool)
        mine = (ops["pid"].to_numpy() == pid) & (ops["tid"].to_numpy() == tid) if len(ops) else np.zeros(0, dtype=bool)
        if not on.any() and not mine.any():  # the thread records no work at all: what a range holds is unknown
            held[here] = UNKNOWN
            continue
        if on.any():
            at = np.sort(launches["start"].to_numpy()[on])
            held[here] = np.searchsorted(at, hi, side="right") - np.searchsorted(at, lo, side="left")
            continue
        order = np.flatnonzero(mine)[np.argsort(ops["start"].to_numpy()[mine], kind="stable")]
        at = ops["start"].to_numpy()[order]
        top = ops["depth"].to_numpy()[order] == 0 if "depth" in ops else np.ones(len(order), dtype=bool)
        reads = np.isin(as_text(ops["name"])[order], list(WEIGHT_INPUT))
        tops, weights = np.r_[0, np.cumsum(top)], np.r_[0, np.cumsum(reads)]
        a, b = np.searchsorted(at, lo, side="left"), np.searchsorted(at, hi, side="right")
        held[here] = np.where(weights[b] - weights[a] > 0, 2, tops[b] - tops[a])
    return held
