"""Linking: kernel -> launch -> innermost op -> enclosing ranges.

Adds to the kernel table the columns in trace.LINK_COLUMNS, and `parent` / `depth` to the
op and range tables. Reads only the trace's tables; returns a new trace of the same form.
numpy only: the parsers' column tables (tables.py) are linked before pandas is imported;
a Trace's DataFrames are read through the same accessors.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from tracekit.trace.launch_api import GRAPH_LAUNCH_API, KERNEL_LAUNCH_API
from tracekit.trace.intervals import NO_ROW, innermost_enclosing, nest
from tracekit.trace.tables import ColumnTrace, coded, column, dense_ranks


def link(trace: Any) -> Any:
    """A Trace (DataFrames) or a ColumnTrace, with the link columns added."""
    kernel_columns, op_nesting, range_nesting = link_columns(trace.kernels, trace.launches, trace.ops, trace.ranges)
    warnings = list(trace.warnings) + _launches_without_activity(trace.launches, kernel_columns["launch"])
    if isinstance(trace, ColumnTrace):
        return dataclasses.replace(trace, kernels=trace.kernels.with_columns(**kernel_columns), warnings=warnings,
                                   ops=trace.ops.with_columns(**op_nesting), ranges=trace.ranges.with_columns(**range_nesting))
    return dataclasses.replace(trace, kernels=trace.kernels.assign(**kernel_columns), ops=trace.ops.assign(**op_nesting),
                               ranges=trace.ranges.assign(**range_nesting), warnings=warnings)


ORPHAN_MIN, ORPHAN_SHARE = 10, 0.05  # fewer unmatched launches than this are the capture's edge


def _launches_without_activity(launches, launch_of_kernel: np.ndarray) -> list[str]:
    """A warning when many kernel launch calls have no GPU activity: a trace trimmed after
    the fact, a profiler that dropped activities, or launches captured into a CUDA graph
    (nothing runs then). Figures that count kernels miss them: the reader should know."""
    if not len(launches):
        return []
    is_launch = coded(launches, "name").where(lambda name: bool(KERNEL_LAUNCH_API.search(str(name)[:128])))
    linked = np.zeros(len(launches), dtype=bool)
    linked[launch_of_kernel[launch_of_kernel >= 0]] = True
    total, orphan = int(is_launch.sum()), int((is_launch & ~linked).sum())
    if orphan < ORPHAN_MIN or orphan < ORPHAN_SHARE * total:
        return []
    return [f"{orphan:,} of {total:,} kernel launch calls have no GPU activity in the trace: launched into a CUDA/HIP graph "
            "being captured (nothing runs then), or the trace was trimmed or the profiler dropped activities; "
            "figures that count kernels do not see them"]


def link_columns(kernels, launches, ops, ranges) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(the kernels' link columns, the ops' parent/depth, the ranges' parent/depth)."""
    launch = _join_launches(kernels, launches)
    has_launch = launch >= 0
    launch_start = _gather(column(launches, "start"), launch, 0)
    launch_pid = _gather(column(launches, "pid"), launch, -1)
    launch_tid = _gather(column(launches, "tid"), launch, -1)

    op_pid, op_tid = column(ops, "pid"), column(ops, "tid")
    op_parent, op_depth = nest(_pair_code(op_pid, op_tid), column(ops, "start"), column(ops, "end"))
    domain = coded(ranges, "domain")
    python, gpu = domain.equals("python"), domain.equals("gpu")
    range_pid, range_tid = column(ranges, "pid"), column(ranges, "tid")
    # Ranges nest per thread and per domain kind: Python frames, user ranges, GPU ranges.
    kind = np.where(python, 1, np.where(gpu, 2, 0))
    range_parent, range_depth = nest(_pair_code(_pair_code(range_pid, range_tid), kind), column(ranges, "start"), column(ranges, "end"),
                                     calls=python)

    op_rows = _Intervals(op_pid, op_tid, column(ops, "start"), column(ops, "end"), op_parent)
    range_rows = _Intervals(range_pid, range_tid, column(ranges, "start"), column(ranges, "end"), range_parent)
    query = (has_launch, launch_pid, launch_tid, launch_start)
    graph = np.zeros(len(kernels), dtype=bool)
    if has_launch.any():  # one substring test per distinct launch API name
        graph[has_launch] = coded(launches, "name").where(lambda name: bool(GRAPH_LAUNCH_API.search(str(name))))[launch[has_launch]]
    kernel_columns = {
        "launch": launch,
        "op": op_rows.enclosing(*query),
        "range": range_rows.enclosing(*query, rows_mask=~python & ~gpu),
        "frame": range_rows.enclosing(*query, rows_mask=python),
        "gpu_range": _gpu_enclosing(range_rows, gpu, kernels),
        "graph_launch": graph,
        "launched_before_capture": _before_capture(kernels, launches, has_launch),
        "capture_op": np.zeros(len(kernels), dtype=bool),  # set by graph-capture pairing (capture_pairing.py)
    }
    return kernel_columns, {"parent": op_parent, "depth": op_depth}, {"parent": range_parent, "depth": range_depth}


def launch_context(trace: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per launch row of a linked trace: the innermost op and the innermost user range (not a
    Python frame, not a GPU annotation) enclosing the call on its thread, -1 for none. What
    linking gives each kernel through its launch, for launches that ran no kernel in the
    trace (a graph capture's launches record the graph's nodes; they run at replay)."""
    launches, ops, ranges = trace.launches, trace.ops, trace.ranges
    n = len(launches)
    if not n:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    query = (np.ones(n, dtype=bool), column(launches, "pid"), column(launches, "tid"), column(launches, "start"))
    op_rows = _Intervals(column(ops, "pid"), column(ops, "tid"), column(ops, "start"), column(ops, "end"), column(ops, "parent"))
    domain = coded(ranges, "domain")
    user = ~domain.equals("python") & ~domain.equals("gpu")
    range_rows = _Intervals(column(ranges, "pid"), column(ranges, "tid"), column(ranges, "start"), column(ranges, "end"),
                            column(ranges, "parent"))
    return op_rows.enclosing(*query), range_rows.enclosing(*query, rows_mask=user)


def _gather(values: np.ndarray, rows: np.ndarray, fill) -> np.ndarray:
    """values[rows], with `fill` where rows is -1."""
    out = np.full(len(rows), fill, dtype=values.dtype if len(values) else np.int64)
    found = rows >= 0
    out[found] = values[rows[found]]
    return out


def _join_launches(kernels, launches) -> np.ndarray:
    """Row of each kernel's launch: same correlation id, same process where both say it.
    Graph kernels and backtrace rows can repeat an id; the first launch row is the launch."""
    out = np.full(len(kernels), NO_ROW, dtype=np.int64)
    if not len(kernels) or not len(launches):
        return out
    kernel_corr, launch_corr = column(kernels, "correlation"), column(launches, "correlation")
    kernel_pid = column(kernels, "pid")
    if (kernel_pid >= 0).any():
        kernel_key, launch_key = _joint_keys((kernel_pid, kernel_corr), (column(launches, "pid"), launch_corr))
    else:
        kernel_key, launch_key = kernel_corr, launch_corr
    keys, first = np.unique(launch_key, return_index=True)  # first: the first row of each key
    at = np.minimum(np.searchsorted(keys, kernel_key), len(keys) - 1)
    found = (keys[at] == kernel_key) & (kernel_corr >= 0)
    out[found] = first[at[found]]
    return out


def _joint_keys(left: tuple[np.ndarray, ...], right: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray]:
    """One int64 per row for tuples of integer columns, equal exactly where the tuples are:
    each column is replaced by its rank among the values of both sides (so the product of
    the ranks' ranges stays far inside int64), then the ranks are combined."""
    n_left = len(left[0])
    key = np.zeros(n_left + len(right[0]), dtype=np.int64)
    span = 1  # the keys so far lie in [0, span)
    for a, b in zip(left, right):
        rank, distinct = dense_ranks(np.concatenate((a, b)))
        if span * max(distinct, 1) >= 2**62:  # re-rank what is there first: never overflows
            key = dense_ranks(key)[0]
            span = int(key.max()) + 1 if len(key) else 1
        key = key * distinct + rank
        span *= max(distinct, 1)
    return key[:n_left], key[n_left:]


def _before_capture(kernels, launches, has_launch: np.ndarray) -> np.ndarray:
    """No launch row and an id older than every captured launch of its own process (ids are
    per process: an Nsight export of two ranks counts each from its own start), or a start
    before the first captured launch: issued before the window."""
    if not len(launches):
        return ~has_launch
    launch_corr = column(launches, "correlation")
    valid = launch_corr >= 0
    first_id = np.full(len(has_launch), int(launch_corr[valid].min()) if valid.any() else 0, dtype=np.int64)
    k_pid, l_pid = column(kernels, "pid"), column(launches, "pid")
    if k_pid is not None and l_pid is not None and valid.any():
        pids, codes = np.unique(l_pid[valid], return_inverse=True)
        lowest = np.full(len(pids), np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(lowest, codes, launch_corr[valid].astype(np.int64))
        at = np.clip(np.searchsorted(pids, k_pid), 0, len(pids) - 1)
        own = pids[at] == k_pid
        first_id[own] = lowest[at[own]]
    first_start = int(column(launches, "start").min())
    return ~has_launch & ((column(kernels, "correlation") < first_id) | (column(kernels, "start") < first_start))


def _pair_code(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One integer per distinct (a, b) pair (the joint keys of one side, the other empty)."""
    if not len(a):
        return np.zeros(0, dtype=np.int64)
    return _joint_keys((np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)), (np.zeros(0, np.int64), np.zeros(0, np.int64)))[0]


@dataclasses.dataclass
class _Intervals:
    """A nested table's rows per (pid, tid), for "which row encloses this launch"."""

    pid: np.ndarray
    tid: np.ndarray
    start: np.ndarray
    end: np.ndarray
    parent: np.ndarray

    def enclosing(self, has_launch, pid, tid, time, rows_mask=None) -> np.ndarray:
        """Innermost row (optionally only rows in `rows_mask`) enclosing each launch."""
        out = np.full(len(has_launch), NO_ROW, dtype=np.int64)
        if not len(self.start) or not has_launch.any():
            return out
        keep = np.ones(len(self.start), dtype=bool) if rows_mask is None else rows_mask
        if not keep.any():
            return out
        rows = np.flatnonzero(keep)
        # Query groups use the same codes as the table's (pid, tid) groups; -1: no such thread.
        codes, query_codes = _joint_keys((self.pid[rows], self.tid[rows]), (pid[has_launch], tid[has_launch]))
        known = np.isin(query_codes, codes)
        query_codes = np.where(known, query_codes, -1)
        found = innermost_enclosing(codes, self.start[rows], self.end[rows], self.parents_among(rows), query_codes, time[has_launch])
        out[has_launch] = np.where(found >= 0, rows[np.maximum(found, 0)], NO_ROW)
        return out

    def parents_among(self, rows: np.ndarray) -> np.ndarray:
        """The parent pointers of `rows` (table rows) as positions among those rows."""
        position = np.full(len(self.start), NO_ROW, dtype=np.int64)
        position[rows] = np.arange(len(rows))
        parent = self.parent[rows]
        return np.where(parent >= 0, position[np.maximum(parent, 0)], NO_ROW)


def _gpu_enclosing(ranges: _Intervals, gpu: np.ndarray, kernels) -> np.ndarray:
    """GPU-side annotations enclose kernels by time on their device (their tid)."""
    out = np.full(len(kernels), NO_ROW, dtype=np.int64)
    if not gpu.any() or not len(kernels):
        return out
    rows = np.flatnonzero(gpu)
    found = innermost_enclosing(
        ranges.tid[rows].astype(np.int64), ranges.start[rows], ranges.end[rows], ranges.parents_among(rows),
        column(kernels, "device").astype(np.int64), column(kernels, "start"),
    )
    return np.where(found >= 0, rows[np.maximum(found, 0)], NO_ROW)
