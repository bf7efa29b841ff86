"""Nsight Systems rows -> numpy columns (no pandas: `tracekit info` on an export never imports it).

A query's rows come from the sqlite3 cursor as tuples; each column becomes one numpy array,
typed from the values it holds (integers, numbers with NULLs, or anything else kept as
objects for `Checks` to judge). Names are integer ids into the StringIds table: they become
`Coded` columns (codes beside sorted labels), each distinct id looked up once.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Sequence

import numpy as np

from tracekit.parsers.columns import Checks
from tracekit.parsers import nsys_schema as S
from tracekit.trace.tables import Coded

PROCESS_MASK = np.int64(0xFFFFFFFFFF000000 - (1 << 64))  # globalTid & PROCESS_MASK: its globalPid (as int64)
UNKNOWN_STRING = "<unknown string id>"
_NUMBERS = frozenset((int, float, type(None)))


def fetch(conn: sqlite3.Connection, sql: str) -> dict[str, tuple]:
    """A query's columns, by name, as tuples of the values SQLite gave."""
    cursor = conn.execute(sql)
    names = [d[0] for d in cursor.description]
    rows = cursor.fetchall()
    columns = list(zip(*rows)) if rows else [()] * len(names)
    return dict(zip(names, columns))


def typed(values: Sequence[Any]) -> np.ndarray:
    """One column's values as an array: int64 when all are integers, float64 (NaN for NULL)
    when all are numbers or NULL, else objects (text, blobs: Checks counts them)."""
    kinds = set(map(type, values))
    if kinds <= {int}:
        return np.array(values, dtype=np.int64) if len(values) else np.zeros(0, dtype=np.int64)
    if kinds <= _NUMBERS:
        return np.array(values, dtype=np.float64)  # None -> NaN
    return objects(values)


def objects(values: Sequence[Any]) -> np.ndarray:
    """Values as a 1-d object array, each element kept as it is (a list stays one element)."""
    return np.fromiter(values, dtype=object, count=len(values))


def as_text(value: Any) -> str:
    """A text column's value as str: NULL -> "", a blob decoded (bad bytes replaced)."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value if isinstance(value, str) else str(value)


def labelled(values: Sequence[Any], object_labels: bool = False) -> Coded:
    """Values (None: missing) -> codes into their distinct values, sorted (a Categorical's
    inferred categories)."""
    labels = sorted({v for v in values if v is not None})
    index = {label: i for i, label in enumerate(labels)}
    index[None] = -1
    codes = np.fromiter(map(index.__getitem__, values), dtype=np.int32, count=len(values))
    return Coded(codes, labels, object_labels)


def joined(parts: list[Coded], object_labels: bool = False) -> Coded:
    """Coded columns one after another, with the sorted union of their labels."""
    labels = sorted(set().union(*(p.labels for p in parts)))
    index = {label: i for i, label in enumerate(labels)}
    codes = [np.append(np.array([index[label] for label in p.labels], dtype=np.int32), np.int32(-1))[p.codes] for p in parts]
    return Coded(np.concatenate(codes) if codes else np.zeros(0, dtype=np.int32), labels, object_labels)


def checked(checks: Checks, rows: dict[str, tuple], what: str, ints: dict[str, Any]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The rows' `start` / `end` and the integer columns `ints` names (column -> int64 or
    int32) converted, for the rows whose times are usable; and those rows' positions."""
    start, end, keep = checks.times_ns(typed(rows["start"]), typed(rows["end"]), what)
    out = {"start": start, "end": end, **{c: checks.ints(typed(rows[c]), f"{what}: {c}", dtype) for c, dtype in ints.items()}}
    kept = np.flatnonzero(keep)
    return {c: v[kept] for c, v in out.items()}, kept


class StringTable:
    """StringIds: id -> text. An id that appears twice reads its first text; ids below 0 are
    no ids."""

    def __init__(self, ids: np.ndarray, texts: list[str], checks: Checks):
        self.checks = checks
        valid = ids >= 0
        self.ids, first = np.unique(ids[valid], return_index=True)  # first: each id's first row
        self.texts = objects(texts)[valid][first]
        checks.count(f"{{n}} {S.STRINGS} ids appear twice; the first text of each is used", int(valid.sum()) - len(self.ids))

    def names(self, ids: Any, object_labels: bool = False) -> Coded:
        """String ids -> their texts, coded (NULL and negative ids are missing; ids the table
        lacks read UNKNOWN_STRING and are counted). Labels are sorted, as numpy sorts text
        (trailing NULs are not part of a label)."""
        ids = self.checks.ints(ids, "name id")
        valid = ids >= 0
        distinct, inverse = np.unique(ids[valid], return_inverse=True)
        if len(self.ids):
            at = np.minimum(np.searchsorted(self.ids, distinct), len(self.ids) - 1)
            found, stored = self.ids[at] == distinct, self.texts[at].tolist()
        else:
            found, stored = np.zeros(len(distinct), dtype=bool), [""] * len(distinct)
        unknown = ~found
        if unknown.any():
            self.checks.count(f"{{n}} names refer to ids missing from the {S.STRINGS} table (emptied or damaged?); shown as "
                              f"{UNKNOWN_STRING}", int(unknown[inverse].sum()))
        texts = [UNKNOWN_STRING if not f else t.rstrip("\x00") for f, t in zip(found.tolist(), stored)]
        named = labelled(texts, object_labels)
        codes = np.full(len(ids), -1, dtype=np.int32)
        codes[valid] = named.codes[inverse.reshape(-1)]
        return Coded(codes, named.labels, object_labels)
