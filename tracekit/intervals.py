"""Nesting of time intervals per thread, and "which interval encloses this instant".

Both are the core of linking (kernel launch -> op -> ranges) and must stay about linear in
the number of events: one stack sweep to find each interval's parent, then a vectorised
binary search plus a walk up parent pointers for any number of query instants.
"""

from __future__ import annotations

import numpy as np

NO_ROW = -1


def nest(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Parent row and depth of each interval among the intervals of its group.

    Rows of one group that overlap only partly (clock jitter) are treated as siblings.
    """
    n = len(start)
    parent = np.full(n, NO_ROW, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int32)
    # Outer intervals first when two start together: sort by (group, start, -end).
    order = np.lexsort((-end, start, group))
    g_sorted, s_sorted, e_sorted = group[order].tolist(), start[order].tolist(), end[order].tolist()
    rows = order.tolist()
    stack: list[int] = []  # positions in sorted order
    stack_end: list[int] = []
    current_group = None
    for pos in range(n):
        g, s, e = g_sorted[pos], s_sorted[pos], e_sorted[pos]
        if g != current_group:
            stack.clear()
            stack_end.clear()
            current_group = g
        while stack_end and stack_end[-1] < e:
            stack.pop()
            stack_end.pop()
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
