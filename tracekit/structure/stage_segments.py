"""Stages on the host timeline, for a trace whose phase rules name none of its work.

Inside a window (a step, or the whole capture), the stages are, first found first:
1. the user's own functions the Python frames branch into (torch.profiler with_stack): from
   the outermost frames of the user's code down, level by level, while one function holds
   the level (`main`, `run_chunk` x4); the first level with two or more functions
   (`denoise`, `refresh_cache`, `decode_frames`) gives the stages, each the union of its
   frames' spans;
2. else the structure of the op sequence (tracekit.structure.segments: a repeated
   forward, a single forward of the same weights, the networks before and after).
A function of the user is one whose file is the user's (tracekit.structure.stage_names.user_function).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.structure.stage_names import user_function
from tracekit.structure.segments import entry_ops, outermost_ops, segments
from tracekit.trace.column_text import as_text

MAX_FRAMES = 200_000  # user frames walked per window; past it, the structure alone


class HostStages:
    """The stages of one trace's windows; what does not depend on the window is found once."""

    def __init__(self, trace):
        self.trace = trace
        self._frames = None  # (user frame rows, their function, their nearest user-frame ancestor)
        self._outer = None

    def segments(self, lo: float, hi: float) -> list[tuple[str, float, float]]:
        """(stage, start, end) spans inside [lo, hi]; [] when neither source finds two stages."""
        found = self._frame_segments(lo, hi)
        if found or self.trace is None or not len(self.trace.ops):
            return found
        if self._outer is None:
            self._outer, self._entry = outermost_ops(self.trace.ops), entry_ops(self.trace.ops)
        return [(s.name, max(float(s.start), lo), min(float(s.end), hi))
                for s in segments(self.trace.ops, lo, hi, self._outer, self._entry)]

    def _user_frames(self):
        if self._frames is None:
            self._frames = user_frames(self.trace)
        return self._frames

    def _frame_segments(self, lo: float, hi: float) -> list[tuple[str, float, float]]:
        """Stages from the user's functions in the Python frames (see the module docstring, 1)."""
        rows, function, up = self._user_frames()
        if not len(rows):
            return []
        r = self.trace.ranges
        start, end = r["start"].to_numpy(), r["end"].to_numpy()
        mine = {int(i) for i in rows if end[i] >= lo and start[i] <= hi}
        level = [i for i in mine if up[i] < 0 or up[i] not in mine]
        while level:
            distinct = {function[i] for i in level}
            if len(distinct) >= 2:
                named = _through_wrappers(level, mine, function, up)
                return [(named[i], max(float(start[i]), lo), min(float(end[i]), hi)) for i in sorted(level, key=lambda i: start[i])]
            held = set(level)
            level = [i for i in mine if up[i] in held]
        return []


def _through_wrappers(level: list[int], mine: set[int], function: dict[int, str], up: dict[int, int]) -> dict[int, str]:
    """Each frame of the level by its function, except a wrapper's: a function the level calls
    several times, each time around one other function of the user's, and around different
    ones (a timer or a decorator around `denoise`, `refresh_cache`, `decode_frames`) is named
    after what it wraps there."""
    count: dict[str, int] = {}
    for i in level:
        count[function[i]] = count.get(function[i], 0) + 1
    inner: dict[int, set[str]] = {}
    for j in mine:
        if up.get(j, -1) in level:
            inner.setdefault(up[j], set()).add(function[j])
    named = {i: function[i] for i in level}
    for name in [n for n, c in count.items() if c >= 2]:
        calls = [i for i in level if function[i] == name]
        wrapped = [inner.get(i, set()) for i in calls]
        if all(len(w) == 1 for w in wrapped) and len(set().union(*wrapped)) >= 2:
            for i, w in zip(calls, wrapped):
                named[i] = next(iter(w))
    return named


def host_segments(trace, lo: float, hi: float) -> list[tuple[str, float, float]]:
    """(stage, start, end) spans inside [lo, hi] of one window (HostStages for many)."""
    return HostStages(trace).segments(lo, hi)


def user_frames(trace) -> tuple[np.ndarray, dict[int, str], dict[int, int]]:
    """The Python frames of the user's own code: rows, {row: function}, {row: nearest user-frame
    ancestor or -1}; nothing past MAX_FRAMES of them."""
    empty = (np.zeros(0, dtype=np.int64), {}, {})
    r = trace.ranges if trace is not None else None
    if r is None or not len(r) or "parent" not in r:
        return empty
    codes, distinct = pd.factorize(pd.Series(as_text(r["name"]), dtype=object))
    python = np.array(as_text(r["domain"]), dtype=object) == "python"
    functions = [user_function(str(n)) for n in distinct]
    known = np.array([f is not None for f in functions], dtype=bool)[codes] & python
    rows = np.flatnonzero(known)
    if not len(rows) or len(rows) > MAX_FRAMES:
        return empty
    function = {int(i): functions[codes[i]] for i in rows}
    parent = r["parent"].to_numpy()
    up: dict[int, int] = {}
    for i in function:
        p = int(parent[i])
        while p >= 0 and p not in function:
            p = int(parent[p])
        up[i] = p
    return rows, function, up
