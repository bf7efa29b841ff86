"""The pieces the Kineto tables are built from: per-chunk column pieces (`Columns`), the clock
that turns Kineto's microseconds into nanoseconds from the first event (`Clock`), and pids /
tids that are names rather than numbers, coded so that how a file was cut into chunks never
shows."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import numpy as np

from tracekit.trace.tables import Interner

_TRAILING_INT = re.compile(r"(-?\d+)\s*$")


class Columns:
    """Per-chunk column pieces of one table, joined once at the end."""

    def __init__(self) -> None:
        self.parts: dict[str, list[Any]] = defaultdict(list)
        self.rows = 0

    def add(self, **columns: Any) -> None:
        for name, values in columns.items():
            self.parts[name].append(values)
        self.rows += len(next(iter(columns.values())))

    def keep(self, rows: np.ndarray) -> None:
        """Only the rows where `rows` (a mask over all the pieces) is True, as one piece."""
        for name, parts in self.parts.items():
            self.parts[name] = [np.concatenate(parts)[rows]]
        self.rows = int(rows.sum())

    def array(self, name: str, dtype=np.int64) -> np.ndarray:
        parts = self.parts.get(name)
        return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype=dtype)



class Clock:
    """Kineto microseconds (floats) -> int64 ns from the earliest event."""

    def __init__(self, tables: list[Columns], windows: list[tuple[float, float]]):
        self.origin_us = min(float(np.min(ts)) for c in tables for ts in c.parts["ts"])
        last = max(float(np.max(ts + np.maximum(dur, 0.0))) for c in tables for ts, dur in zip(c.parts["ts"], c.parts["dur"]))
        self.span_ns = round((last - self.origin_us) * 1000)
        first = min(windows) if windows else None  # the profiler's own "PyTorch Profiler (0)" span
        self.window = [self._ns(first[0]), self._ns(first[1])] if first else None

    def _ns(self, us: float) -> int:
        return round((us - self.origin_us) * 1000)

    def start_end(self, columns: Columns) -> tuple[np.ndarray, np.ndarray]:
        start = np.rint((columns.array("ts", np.float64) - self.origin_us) * 1000.0).astype(np.int64)
        return start, start + np.rint(np.maximum(columns.array("dur", np.float64), 0.0) * 1000.0).astype(np.int64)


def isin(values: np.ndarray, members: np.ndarray) -> np.ndarray:
    """np.isin; by a lookup table when the ids span a range not much larger than their count
    (correlation ids count up from 1: millions of them hash slowly, index fast)."""
    if len(values) and len(members):
        lo, hi = int(min(values.min(), members.min())), int(max(values.max(), members.max()))
        if hi - lo < 8 * (len(values) + len(members)) + 1024:
            return np.isin(values, members, kind="table")
    return np.isin(values, members)


def thread_ids(values: list[int | str], names: Interner) -> np.ndarray:
    """Kineto pids and tids are ints, or strings such as "25738" or "stream 7" in older
    traces: the number they end with. A name with no number ("worker") is -2, -3, ... by
    `names`, the same code wherever the name appears (renumbered in name order at the end,
    see KinetoTables.build, so that how the file was cut into chunks never shows)."""
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        pass
    cache: dict[Any, int] = {}

    def as_int(v: int | str) -> int:
        if isinstance(v, int):
            return v if -(1 << 63) <= v < (1 << 63) else -1
        if v not in cache:
            m = _TRAILING_INT.search(v[-32:])  # bounded: `\d+\s*$` is quadratic on a long run of digits
            cache[v] = int(m.group(1)) if m and len(m.group(1)) < 19 else thread_name_code(names.code(v))
        return cache[v]

    return np.array([as_int(v) for v in values], dtype=np.int64)


def thread_name_code(index: np.ndarray | int) -> np.ndarray | int:
    """The pid / tid code of the index-th thread name: -2, -3, ... (-1 is an unknown id)."""
    return -(index + 2)


def renumber_thread_names(ids: np.ndarray, new_codes: np.ndarray) -> np.ndarray:
    """pid / tid codes of thread names (-2, -3, ...) replaced by `new_codes[index]`."""
    index = thread_name_code(ids)  # the inverse of thread_name_code: -2 -> 0, -3 -> 1, ...
    named = (index >= 0) & (index < len(new_codes))
    return np.where(named, new_codes[np.where(named, index, 0)], ids) if named.any() else ids
