"""Linking: kernel -> launch -> innermost op -> enclosing ranges.

Adds to the kernel table the columns in trace.LINK_COLUMNS, and `parent` / `depth` to the
op and range tables. Reads only the Trace; returns a new Trace.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from tracekit.intervals import NO_ROW, innermost_enclosing, nest
from tracekit.trace import Trace

_GRAPH_LAUNCH = "GraphLaunch"


def link(trace: Trace) -> Trace:
    kernels, launches = trace.kernels, trace.launches
    launch = _join_launches(kernels, launches)
    has_launch = launch >= 0
    launch_start = _gather(launches["start"].to_numpy(), launch, 0)
    launch_pid = _gather(launches["pid"].to_numpy(), launch, -1)
    launch_tid = _gather(launches["tid"].to_numpy(), launch, -1)

    ops = _with_nesting(trace.ops, _thread_group(trace.ops))
    ranges = _with_nesting(trace.ranges, _range_group(trace.ranges))

    op = _enclosing(ops, _thread_group(ops), has_launch, launch_pid, launch_tid, launch_start)
    user = trace.ranges["domain"].to_numpy() != "python"
    cpu_ranges = (ranges["domain"] != "gpu").to_numpy()
    range_row = _enclosing(ranges, _thread_group(ranges), has_launch, launch_pid, launch_tid, launch_start, user & cpu_ranges)
    frame_row = _enclosing(ranges, _thread_group(ranges), has_launch, launch_pid, launch_tid, launch_start, ~user)
    gpu_range = _gpu_enclosing(ranges, kernels)

    graph = np.zeros(len(kernels), dtype=bool)
    if has_launch.any():  # one substring test per distinct launch API name
        names = launches["name"].astype("category")
        by_code = np.array([_GRAPH_LAUNCH in str(c) for c in names.cat.categories] + [False])
        graph[has_launch] = by_code[names.cat.codes.to_numpy()[launch[has_launch]]]
    linked = kernels.assign(
        launch=launch,
        op=op,
        range=range_row,
        frame=frame_row,
        gpu_range=gpu_range,
        graph_launch=graph,
        launched_before_capture=_before_capture(kernels, launches, has_launch),
    )
    return dataclasses.replace(trace, kernels=linked, ops=ops, ranges=ranges)


def _gather(values: np.ndarray, rows: np.ndarray, fill) -> np.ndarray:
    """values[rows], with `fill` where rows is -1."""
    out = np.full(len(rows), fill, dtype=values.dtype if len(values) else np.int64)
    found = rows >= 0
    out[found] = values[rows[found]]
    return out


def _join_launches(kernels: pd.DataFrame, launches: pd.DataFrame) -> np.ndarray:
    """Row of each kernel's launch: same correlation id, same process where both say it."""
    if not len(kernels) or not len(launches):
        return np.full(len(kernels), NO_ROW, dtype=np.int64)
    by_process = bool((kernels["pid"] >= 0).any())
    keys = ["pid", "correlation"] if by_process else ["correlation"]
    # Graph kernels and backtrace rows can repeat an id; the first launch row is the launch.
    table = launches[keys].assign(launch=np.arange(len(launches))).drop_duplicates(keys)
    joined = kernels[keys].merge(table, on=keys, how="left", sort=False)
    row = joined["launch"].to_numpy(dtype=float, na_value=np.nan)
    out = np.where(np.isnan(row), NO_ROW, row).astype(np.int64)
    out[kernels["correlation"].to_numpy() < 0] = NO_ROW
    return out


def _before_capture(kernels: pd.DataFrame, launches: pd.DataFrame, has_launch: np.ndarray) -> np.ndarray:
    """No launch row and an id older than every captured launch: issued before the window."""
    if not len(launches):
        return ~has_launch
    first_id = int(launches["correlation"][launches["correlation"] >= 0].min()) if (launches["correlation"] >= 0).any() else 0
    first_start = int(launches["start"].min())
    corr = kernels["correlation"].to_numpy()
    return ~has_launch & ((corr < first_id) | (kernels["start"].to_numpy() < first_start))


def _thread_group(table: pd.DataFrame) -> np.ndarray:
    return _pair_code(table["pid"].to_numpy(), table["tid"].to_numpy())


def _range_group(ranges: pd.DataFrame) -> np.ndarray:
    """Ranges nest per thread and per domain kind: Python frames, user ranges, GPU ranges."""
    kind = ranges["domain"].map({"python": 1, "gpu": 2}).fillna(0).astype(np.int64).to_numpy() if len(ranges) else np.zeros(0, np.int64)
    return _pair_code(_thread_group(ranges), kind)


def _pair_code(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One integer per distinct (a, b) pair."""
    if not len(a):
        return np.zeros(0, dtype=np.int64)
    code_a, _ = pd.factorize(a)
    code_b, uniques_b = pd.factorize(b)
    codes, _ = pd.factorize(code_a.astype(np.int64) * len(uniques_b) + code_b)
    return codes.astype(np.int64)


def _with_nesting(table: pd.DataFrame, group: np.ndarray) -> pd.DataFrame:
    parent, depth = nest(group, table["start"].to_numpy(), table["end"].to_numpy())
    return table.assign(parent=parent, depth=depth)


def _enclosing(table, group, has_launch, pid, tid, time, rows_mask=None) -> np.ndarray:
    """Innermost row of `table` (optionally only rows in `rows_mask`) enclosing each launch."""
    out = np.full(len(has_launch), NO_ROW, dtype=np.int64)
    if not len(table) or not has_launch.any():
        return out
    keep = np.ones(len(table), dtype=bool) if rows_mask is None else rows_mask
    if not keep.any():
        return out
    # Query groups must use the same codes as the table's (pid, tid) groups.
    index = pd.MultiIndex.from_arrays([table["pid"].to_numpy()[keep], table["tid"].to_numpy()[keep]])
    codes, uniques = index.factorize()
    query = pd.MultiIndex.from_arrays([pid[has_launch], tid[has_launch]])
    query_codes = uniques.get_indexer(query)
    rows = np.flatnonzero(keep)
    # Parent pointers are table rows; map them into positions among the kept rows.
    position = np.full(len(table), NO_ROW, dtype=np.int64)
    position[rows] = np.arange(len(rows))
    parent = table["parent"].to_numpy()[keep]
    parent = np.where(parent >= 0, position[np.maximum(parent, 0)], NO_ROW)
    found = innermost_enclosing(
        codes.astype(np.int64), table["start"].to_numpy()[keep], table["end"].to_numpy()[keep], parent,
        query_codes.astype(np.int64), time[has_launch],
    )
    out[has_launch] = np.where(found >= 0, rows[np.maximum(found, 0)], NO_ROW)
    return out


def _gpu_enclosing(ranges: pd.DataFrame, kernels: pd.DataFrame) -> np.ndarray:
    """GPU-side annotations enclose kernels by time on their device."""
    out = np.full(len(kernels), NO_ROW, dtype=np.int64)
    gpu = (ranges["domain"] == "gpu").to_numpy() if len(ranges) else np.zeros(0, dtype=bool)
    if not gpu.any() or not len(kernels):
        return out
    rows = np.flatnonzero(gpu)
    position = np.full(len(ranges), NO_ROW, dtype=np.int64)
    position[rows] = np.arange(len(rows))
    parent = ranges["parent"].to_numpy()[rows]
    parent = np.where(parent >= 0, position[np.maximum(parent, 0)], NO_ROW)
    found = innermost_enclosing(
        ranges["tid"].to_numpy()[rows].astype(np.int64), ranges["start"].to_numpy()[rows], ranges["end"].to_numpy()[rows], parent,
        kernels["device"].to_numpy().astype(np.int64), kernels["start"].to_numpy(),
    )
    return np.where(found >= 0, rows[np.maximum(found, 0)], NO_ROW)
