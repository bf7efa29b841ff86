"""Stages on the host timeline, for a trace whose phase rules name none of its work.

Inside a window (a step, or the whole capture), the stages are, first found first:
1. the user's own functions the Python frames branch into (torch.profiler with_stack): from
   the outermost frames of the user's code down, level by level, while one function holds
   the level (`main`, `run_chunk` x4); the first level with two or more functions
   (`denoise`, `refresh_cache`, `decode_frames`) gives the stages, each the union of its
   frames' spans;
2. else the structure of the op sequence (tracekit.analysis.stage_structure: a repeated
   forward, a single forward of the same weights, the networks before and after).
A function of the user is one whose file is the user's (tracekit.analysis.stage_names.user_function).
"""

from __future__ import annotations

import numpy as np

from tracekit.analysis.stage_names import user_function
from tracekit.analysis.stage_structure import segments
from tracekit.trace.column_text import as_text

MAX_FRAMES = 200_000  # user frames walked per window; past it, the structure alone


def host_segments(trace, lo: float, hi: float) -> list[tuple[str, float, float]]:
    """(stage, start, end) spans inside [lo, hi]; [] when neither source finds two stages."""
    found = frame_segments(trace, lo, hi)
    if found:
        return found
    if trace is None or not len(trace.ops):
        return []
    return [(s.name, max(float(s.start), lo), min(float(s.end), hi)) for s in segments(trace.ops, lo, hi)]


def frame_segments(trace, lo: float, hi: float) -> list[tuple[str, float, float]]:
    """Stages from the user's functions in the Python frames (see the module docstring, 1)."""
    r = trace.ranges if trace is not None else None
    if r is None or not len(r) or "parent" not in r:
        return []
    start, end = r["start"].to_numpy(), r["end"].to_numpy()
    python = (as_text(r["domain"]) == "python") & (end >= lo) & (start <= hi)
    rows = np.flatnonzero(python)
    if not len(rows) or len(rows) > MAX_FRAMES:
        return []
    names = as_text(r["name"])
    function = {int(i): user_function(names[i]) for i in rows}
    mine = {i for i, f in function.items() if f is not None}
    parent = r["parent"].to_numpy()
    up: dict[int, int] = {}  # a user frame -> its nearest user-frame ancestor (-1: none)
    for i in mine:
        p = int(parent[i])
        while p >= 0 and p not in mine:
            p = int(parent[p])
        up[i] = p
    level = [i for i in mine if up[i] < 0]
    while level:
        distinct = {function[i] for i in level}
        if len(distinct) >= 2:
            return [(function[i], max(float(start[i]), lo), min(float(end[i]), hi)) for i in sorted(level, key=lambda i: start[i])]
        held = set(level)
        level = [i for i in mine if up[i] in held]
    return []
