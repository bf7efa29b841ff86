"""Tables as plain numpy columns: what both parsers build and linking reads, before (or
instead of) pandas.

Importing pandas costs ~0.3 s, most of what `tracekit info` on an everyday trace would
otherwise spend, and the Kineto parser's worker processes never need it. So the Kineto and
Nsight Systems parsers build `ColumnTable`s (one numpy array per column; names as integer
codes beside their labels, `Coded`), linking adds its columns with numpy alone, and
`frames.to_frame` turns a table into the Trace's DataFrame (frames.py) only when a stage that
needs pandas asks for it.

`column` and `coded` read a column from either form, so a stage that needs no pandas reads
the DataFrames of a loaded Trace the same way (the inventory of `tracekit.load`'s trace,
a capture trace's launch context).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


def dense_ranks(values: np.ndarray) -> tuple[np.ndarray, int]:
    """(np.unique(values, return_inverse=True)'s inverse as int64, the number of distinct
    values). Integers spanning a range not much wider than their count are ranked through a
    table of the values present (no sort); anything else goes through np.unique."""
    values = np.asarray(values).reshape(-1)
    if not len(values):
        return np.zeros(0, dtype=np.int64), 0
    if values.dtype.kind in "iub":
        lo, hi = int(values.min()), int(values.max())
        if hi - lo < max(2 * len(values), 1 << 16) and -(1 << 62) < lo and hi < 1 << 62:
            shifted = values.astype(np.int64) - lo
            present = np.zeros(hi - lo + 1, dtype=bool)
            present[shifted] = True
            rank = np.cumsum(present, dtype=np.int64) - 1
            return rank[shifted], int(rank[-1]) + 1
    distinct, inverse = np.unique(values, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64, copy=False), len(distinct)


@dataclass(frozen=True)
class Coded:
    """A categorical column: `labels[codes[i]]` is row i's value; code -1 is missing.
    `object_labels`: the labels are kept as Python objects in the DataFrame's categories
    (trace names), not inferred (pandas 3 would make a list of str a pyarrow string index)."""

    codes: np.ndarray
    labels: list[Any]
    object_labels: bool = True

    def __len__(self) -> int:
        return len(self.codes)

    def take(self, rows: np.ndarray) -> "Coded":
        return Coded(self.codes[rows], self.labels, self.object_labels)

    def to_categorical(self):
        """The pandas Categorical (imports pandas)."""
        import pandas as pd

        labels = pd.Index(self.labels, dtype=object) if self.object_labels else self.labels
        return pd.Categorical.from_codes(self.codes, categories=labels)

    def where(self, predicate) -> np.ndarray:
        """Rows whose value satisfies `predicate` (called once per label, not per row)."""
        by_code = np.array([bool(predicate(label)) for label in self.labels] + [False], dtype=bool)
        return by_code[self.codes]

    def equals(self, value: Any) -> np.ndarray:
        return self.where(lambda label: label == value)

    def without_unused(self) -> "Coded":
        """Only the labels some row uses, in their original order (pandas'
        remove_unused_categories)."""
        used = np.zeros(len(self.labels) + 1, dtype=bool)
        used[self.codes] = True
        used = used[:-1]
        if used.all():
            return self
        remap = np.full(len(self.labels) + 1, -1, dtype=self.codes.dtype)
        remap[np.flatnonzero(used)] = np.arange(int(used.sum()))
        return Coded(remap[self.codes], [label for label, u in zip(self.labels, used) if u], self.object_labels)


@dataclass
class ColumnTable:
    """One table of the Trace contract (`spec`: trace.KERNEL_COLUMNS, ...) as numpy columns.
    A column the source did not give reads as the contract's "absent" default."""

    spec: dict[str, str]
    columns: dict[str, Any]
    n: int = 0

    def __post_init__(self) -> None:
        if self.columns:
            lengths = {len(v) for v in self.columns.values()}
            if len(lengths) > 1:
                raise ValueError(f"columns of different lengths: {sorted(lengths)}")
            self.n = lengths.pop()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, name: str) -> Any:
        value = self.columns.get(name)
        if value is None:
            if name not in self.spec:
                raise KeyError(f"no column {name!r} in this table")
            return default_column(self.spec[name], self.n)
        return value

    def take(self, rows: np.ndarray) -> "ColumnTable":
        return ColumnTable(self.spec, {k: v.take(rows) if isinstance(v, Coded) else v[rows] for k, v in self.columns.items()})

    def with_columns(self, **columns: Any) -> "ColumnTable":
        return ColumnTable({**self.spec, **{k: _dtype_of(v) for k, v in columns.items() if k not in self.spec}},
                           {**self.columns, **columns}, self.n)



@dataclass
class ColumnTrace:
    """The Trace's four tables as ColumnTables; tracekit.trace.frames.to_trace gives the pandas Trace."""

    kernels: ColumnTable
    launches: ColumnTable
    ops: ColumnTable
    ranges: ColumnTable
    meta: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)



def default_column(dtype: str, n: int) -> Any:
    """The contract's "absent" value for a column of this dtype (what trace.make_table fills
    a missing column with): -1 for integers, None for categories and objects, False for
    flags, NaN for floats."""
    if dtype == "category":
        return Coded(np.full(n, -1, dtype=np.int32), [])
    if dtype == "object":
        return np.full(n, None, dtype=object)
    if dtype == "bool":
        return np.zeros(n, dtype=bool)
    if dtype == "float64":
        return np.full(n, np.nan)
    return np.full(n, -1, dtype=dtype)


def _dtype_of(value: Any) -> str:
    return "category" if isinstance(value, Coded) else str(np.asarray(value).dtype)


# -- reading a column from either form ------------------------------------------------------

def column(table: Any, name: str) -> np.ndarray:
    """A column's values as a numpy array (labels for a categorical), from a ColumnTable or a
    DataFrame."""
    if isinstance(table, ColumnTable):
        value = table[name]
        if isinstance(value, Coded):
            labels = np.empty(len(value.labels) + 1, dtype=object)  # filled one by one: a label may be a tuple
            for i, label in enumerate(value.labels):
                labels[i] = label
            return labels[value.codes]  # code -1 picks the trailing None
        return value
    return table[name].to_numpy()


def coded(table: Any, name: str) -> Coded:
    """A categorical column as codes and labels, from a ColumnTable or a DataFrame."""
    if isinstance(table, ColumnTable):
        value = table[name]
        if isinstance(value, Coded):
            return value
        return _factorized(np.asarray(value, dtype=object))
    series = table[name]
    if series.dtype.name != "category":
        series = series.astype("category")
    return Coded(series.cat.codes.to_numpy(), list(series.cat.categories))


def _factorized(values: np.ndarray) -> Coded:
    index: dict[Any, int] = {}
    codes = np.fromiter((-1 if v is None else index.setdefault(v, len(index)) for v in values), dtype=np.int32, count=len(values))
    return Coded(codes, list(index))


class Interner:
    """Values -> stable integer codes, in order of first sight across calls; None is -1.
    `max_chars`: a string label longer than this is cut to it (ending "…"), and strings that
    agree up to the cut share one code (cut_labels counts them)."""

    def __init__(self, max_chars: int | None = None) -> None:
        self.index: dict[Any, int] = {None: -1}  # None (a missing value) is never a label
        self.values: list[Any] = []
        self.max_chars = max_chars

    def codes(self, values: list) -> np.ndarray:
        if values.count(None) == len(values):  # a column most events leave empty (collectives, ...)
            return np.full(len(values), -1, dtype=np.int32)
        index = self.index
        # dict.fromkeys keeps first-sight order at C speed; only new values get a code here.
        fresh = [value for value in dict.fromkeys(values) if value not in index]
        if self.max_chars is not None and any(isinstance(v, str) and len(v) > self.max_chars for v in fresh):
            fresh = self._cut_long(fresh)
        index.update(zip(fresh, range(len(self.values), len(self.values) + len(fresh))))
        self.values += fresh
        return np.fromiter(map(index.__getitem__, values), dtype=np.int32, count=len(values))

    def _cut_long(self, fresh: list) -> list:
        """The fresh values with each long string's code made that of its cut form; the
        values left to add (short ones, and cut forms not seen before)."""
        keep = []
        for value in fresh:
            if not (isinstance(value, str) and len(value) > self.max_chars):
                keep.append(value)
                continue
            label = value[: self.max_chars - 1] + "\u2026"
            if label not in self.index:
                self.index[label] = len(self.values) + len(keep)
                keep.append(label)
            self.index[value] = self.index[label]
        return keep

    def code(self, value: Any) -> int:
        code = self.index.get(value)
        if code is None:
            code = self.index[value] = len(self.values)
            self.values.append(value)
        return code

    def cut_labels(self) -> int:
        """The labels that are cut forms (the same count however the values came in chunks)."""
        if self.max_chars is None:
            return 0
        return sum(1 for v in self.values if isinstance(v, str) and len(v) == self.max_chars and v.endswith("\u2026"))

    def coded(self, codes: np.ndarray, object_labels: bool = True) -> Coded:
        return Coded(codes, list(self.values), object_labels)
