"""Nesting of time intervals per thread, and "which interval encloses this instant".

Both are the core of linking (kernel launch -> op -> ranges) and must stay about linear in
the number of events: one stack sweep to find each interval's parent, then a vectorised
binary search plus a walk up parent pointers for any number of query instants.
"""

from __future__ import annotations

import numpy as np

NO_ROW = -1
# Kineto gives start and duration in float microseconds; rounding each to nanoseconds can
# leave a child ending 1 ns after its parent. Within this slack a child still nests.
SLACK_NS = 2


def nest(group: np.ndarray, start: np.ndarray, end: np.ndarray, calls: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Parent row and depth of each interval among the intervals of its group.

    Vectorised: in (start, -end) order an interval's depth is the number of intervals of
    its group opened before it minus those closed by its start, and its parent is the
    last interval one level up. That holds when intervals nest properly; a group where
    some overlap only partly (clock jitter) is redone with an exact stack sweep, which
    treats such rows as siblings. An empty interval contains nothing: it belongs to the
    innermost non-empty interval holding its instant.

    `calls` (per row, True for the rows of groups that are call stacks: Python frames): a
    call cannot outlive its caller, so one that starts inside an open call but ends after
    it (the profiler missed its return: torch.profiler closes such a frame at the end of
    the capture) is its callee, and it closes with its caller: it holds nothing that
    starts after the caller ended. Without this, one unclosed frame swallows every later
    frame of its thread.
    """
    n = len(start)
    parent = np.full(n, NO_ROW, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int32)
    if n == 0:
        return parent, depth
    full = np.flatnonzero(end > start)
    sub_parent, sub_depth = _nest_nonempty(group[full], start[full], end[full], None if calls is None else calls[full])
    parent[full] = np.where(sub_parent >= 0, full[np.maximum(sub_parent, 0)], NO_ROW)
    depth[full] = sub_depth
    empty = np.flatnonzero(end <= start)
    if len(empty) and len(full):  # with no non-empty interval, nothing holds them: roots
        holder = innermost_enclosing(group[full], start[full], end[full], sub_parent, group[empty], start[empty])
        parent[empty] = np.where(holder >= 0, full[np.maximum(holder, 0)], NO_ROW)
        depth[empty] = np.where(holder >= 0, sub_depth[np.maximum(holder, 0)] + 1, 0)
    return parent, depth


def _nest_nonempty(group: np.ndarray, start: np.ndarray, end: np.ndarray, calls: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    n = len(start)
    parent = np.full(n, NO_ROW, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int32)
    if n == 0:
        return parent, depth
    order = np.lexsort((-end, start, group))
    origin = start.min()
    g, s, e = group[order], start[order] - origin, end[order] - origin
    new_group = np.flatnonzero(g[1:] != g[:-1]) + 1  # where each group after the first begins
    group_index = np.zeros(n, dtype=np.int64)
    group_index[new_group] = 1
    np.cumsum(group_index, out=group_index)
    first_of_group = np.r_[0, new_group]
    span = 2 * int(e.max()) + 4
    if span * (int(group_index[-1]) + 1) >= 2**62:
        return _nest_by_stack(group, start, end, calls)
    # Opens at 2s+1 and closes at 2e: an interval ending where the next starts is closed.
    base = group_index * span
    open_key = base + 2 * s + 1
    close_key = np.sort(base + 2 * e)
    # closes before each group's first key: one search per group, not per row
    closed_before = np.searchsorted(close_key, open_key) - np.searchsorted(close_key, np.arange(len(first_of_group)) * span)[group_index]
    opened_before = np.arange(n) - first_of_group[group_index]
    level = (opened_before - closed_before).astype(np.int64)

    parent_pos = np.full(n, NO_ROW, dtype=np.int64)
    # a stable sort of small integers: numpy radix-sorts 16-bit ones (same order, no comparisons)
    small = -(1 << 15) <= int(level.min()) and int(level.max()) < 1 << 15
    by_level = np.argsort(level.astype(np.int16) if small else level, kind="stable")
    bounds = np.searchsorted(level[by_level], np.arange(level.max() + 2))
    for d in range(1, int(level.max()) + 1):
        children = by_level[bounds[d] : bounds[d + 1]]
        candidates = by_level[bounds[d - 1] : bounds[d]]
        found = np.searchsorted(candidates, children) - 1
        parent_pos[children] = np.where(found >= 0, candidates[np.maximum(found, 0)], NO_ROW)

    has_parent = parent_pos >= 0
    pp = np.maximum(parent_pos, 0)
    proper = (level >= 0) & (has_parent == (level > 0))
    proper &= ~has_parent | ((g[pp] == g) & (s[pp] <= s) & (e[pp] + SLACK_NS >= e))
    parent[order] = np.where(has_parent, order[pp], NO_ROW)
    depth[order] = level
    for bad_group in np.unique(g[~proper]):
        rows = order[g == bad_group]
        sub_parent, sub_depth = _nest_by_stack(group[rows], start[rows], end[rows], None if calls is None else calls[rows])
        parent[rows] = np.where(sub_parent >= 0, rows[np.maximum(sub_parent, 0)], NO_ROW)
        depth[rows] = sub_depth
    return parent, depth


def _nest_by_stack(group: np.ndarray, start: np.ndarray, end: np.ndarray, calls: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The exact sweep over non-empty intervals: a stack of open intervals per group. In a
    call stack (`calls`, see nest) a row that outlives the open row it starts in is clipped
    to it instead of closing it."""
    n = len(start)
    parent = np.full(n, NO_ROW, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int32)
    order = np.lexsort((-end, start, group))
    g_sorted, s_sorted, e_sorted = group[order].tolist(), start[order].tolist(), end[order].tolist()
    is_call = [False] * n if calls is None else calls[order].tolist()
    rows = order.tolist()
    stack: list[int] = []
    stack_end: list[int] = []
    current_group = None
    for pos in range(n):
        g, s, e = g_sorted[pos], s_sorted[pos], e_sorted[pos]
        if g != current_group:
            stack.clear()
            stack_end.clear()
            current_group = g
        while stack_end and (stack_end[-1] <= s or (stack_end[-1] + SLACK_NS < e and not is_call[pos])):
            stack.pop()
            stack_end.pop()
        if stack_end and is_call[pos]:
            e = min(e, stack_end[-1])
        if stack:
            parent[rows[pos]] = rows[stack[-1]]
            depth[rows[pos]] = len(stack)
        stack.append(pos)
        stack_end.append(e)
    return parent, depth


def innermost_enclosing(
    group: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    parent: np.ndarray,
    query_group: np.ndarray,
    query_time: np.ndarray,
) -> np.ndarray:
    """For each query instant, the row of the innermost interval of its group enclosing it.

    `parent` must come from `nest` on the same intervals. Returns -1 where none encloses.
    """
    result = np.full(len(query_time), NO_ROW, dtype=np.int64)
    if len(start) == 0 or len(query_time) == 0:
        return result
    order = np.lexsort((-end, start, group))
    sorted_group = group[order]
    sorted_start = start[order]
    # Each query's candidate: the last interval of its group starting at or before it.
    # Searching on (group, start) pairs: groups are contiguous in sorted order.
    group_ids, group_first = np.unique(sorted_group, return_index=True)
    group_last = np.append(group_first[1:], len(order))
    slot = np.searchsorted(group_ids, query_group)
    slot_ok = (slot < len(group_ids)) & (group_ids[np.minimum(slot, len(group_ids) - 1)] == query_group)
    for k in np.flatnonzero(np.bincount(slot[slot_ok], minlength=len(group_ids))):
        lo, hi = group_first[k], group_last[k]
        queries = np.flatnonzero(slot_ok & (slot == k))
        pos = np.searchsorted(sorted_start[lo:hi], query_time[queries], side="right") - 1
        found = pos >= 0
        result[queries[found]] = order[lo + pos[found]]
    # The candidate may have ended before the instant (a finished sibling): climb to the
    # ancestor that still encloses it. At most `max depth` vectorised steps.
    pending = np.flatnonzero(result >= 0)
    while len(pending):
        rows = result[pending]
        outside = end[rows] < query_time[pending]
        pending = pending[outside]
        result[pending] = parent[result[pending]]
        pending = pending[result[pending] >= 0]
    return result


def levels_down(parent: np.ndarray, depth: np.ndarray):
    """(rows, their parents) of a nested table, one depth level at a time from the roots' children
    down: a value carried from each row's parent is final before its children read it."""
    if not len(depth):
        return
    order = np.argsort(depth, kind="stable")
    levels = depth[order]
    bounds = np.searchsorted(levels, np.arange(int(levels.max()) + 2))
    for d in range(1, int(levels.max()) + 1):
        rows = order[bounds[d]: bounds[d + 1]]
        yield rows, parent[rows]
