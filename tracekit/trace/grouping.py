"""Group-by on integer codes with numpy: the sums the summary tables need, without pandas
groupby.

A pandas groupby on string or categorical keys costs milliseconds of fixed overhead per
call (factorizing, index building, one aggregation function per column) and, under pandas
3, converts object keys to Arrow strings row by row. The tables here group a few tens of
thousands of kernels into a few hundred groups: codes per row, one np.unique to number the
groups, then np.bincount per summed column.

Groups are numbered in order of first appearance (pandas `groupby(sort=False)`), so a
table sorted afterwards comes out in the very same order as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.trace.column_text import category_text
from tracekit.trace.tables import dense_ranks

# A key: per row an int64 code (-1: missing), and the label of each code.
Key = tuple[np.ndarray, np.ndarray]


def key_of(values, missing: object = None) -> Key:
    """Codes and labels of a column: a categorical's own codes and categories (as str),
    else pd.factorize. `missing` labels a missing value when missing rows are kept."""
    if isinstance(values, pd.Series) and isinstance(values.dtype, pd.CategoricalDtype):
        labels = np.array(category_text(values.cat.categories) + [missing], dtype=object)
        codes = values.cat.codes.to_numpy().astype(np.int64)
        return codes, labels
    codes, uniques = pd.factorize(np.asarray(values, dtype=object))
    labels = np.empty(len(uniques) + 1, dtype=object)
    labels[:-1] = list(uniques)
    labels[-1] = missing
    return codes.astype(np.int64), labels


def label_column(key: Key, rows: np.ndarray) -> np.ndarray:
    """The key's label at each of `rows` (code -1 picks the `missing` label, stored last)."""
    codes, labels = key
    return labels[codes[rows]]


@dataclass
class Groups:
    group: np.ndarray  # per row: its group, -1 for rows left out (a missing key)
    first: np.ndarray  # per group: the first row in it
    size: np.ndarray  # per group: its rows
    _sorted: np.ndarray | None = None

    @property
    def n(self) -> int:
        return len(self.first)

    def sum(self, values: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """Per group sum of integers or integer-valued floats (nanosecond times): exact in any
        order below 2**53, so np.bincount gives what groupby's sum gives. Integers stay integers."""
        values = np.asarray(values)
        rows = self.group >= 0 if mask is None else (self.group >= 0) & mask
        total = np.bincount(self.group[rows], weights=values[rows].astype(np.float64), minlength=self.n)
        if values.dtype.kind in "iub":
            return np.rint(total).astype(np.int64)
        return total

    def float_sum(self, values: np.ndarray) -> np.ndarray:
        """Per group sum of fractional floats, bit for bit what pandas' groupby sum gives (it
        compensates rounding, Kahan style, so np.bincount's plain sum differs in the last
        bits): pandas' own routine, grouped by our integer codes."""
        rows = self.group >= 0
        sums = pd.Series(np.asarray(values, dtype=np.float64)[rows]).groupby(self.group[rows]).sum()
        return sums.reindex(np.arange(self.n), fill_value=0.0).to_numpy()

    def known_sum(self, values: np.ndarray) -> np.ndarray:
        """Per group sum of the known (non-NaN) values; NaN where none is known
        (tracekit.unknown.known_sum). Bit for bit Series.sum over each group: numpy's pairwise
        sum of the group's values in row order, done for all groups of one size at once."""
        values = np.asarray(values, dtype=np.float64)
        grouped = values[self._order()]
        known = np.bincount(self.group[self._order()], weights=~np.isnan(grouped), minlength=self.n)
        grouped = np.where(np.isnan(grouped), 0.0, grouped)
        starts = np.r_[0, np.cumsum(self.size)[:-1]].astype(np.int64)
        out = np.zeros(self.n)
        for size in np.unique(self.size):
            which = np.flatnonzero(self.size == size)
            # one row per group, its values in row order: a row-wise sum is np.sum of each group
            out[which] = grouped[starts[which, None] + np.arange(size)].sum(axis=1)
        return np.where(known > 0, out, np.nan)

    def _order(self) -> np.ndarray:
        """The grouped rows, group by group, each group's rows in their original order."""
        if self._sorted is None:
            rows = np.flatnonzero(self.group >= 0)
            self._sorted = rows[np.argsort(self.group[rows], kind="stable")]
        return self._sorted

    def nunique(self, codes: np.ndarray) -> np.ndarray:
        """Per group: how many distinct values of `codes` it holds; a negative code is a
        missing value and not counted (as pandas' nunique leaves out NaN)."""
        codes = np.asarray(codes, dtype=np.int64)
        rows = (self.group >= 0) & (codes >= 0)
        codes = codes[rows]
        pairs = np.unique(self.group[rows] * (int(codes.max(initial=0)) + 1) + codes)  # one int per (group, value)
        return np.bincount(pairs // (int(codes.max(initial=0)) + 1), minlength=self.n)


def combine(columns: list[np.ndarray]) -> np.ndarray:
    """Per row, a code for its combination of values in `columns` (integer arrays of one
    length): equal combinations, equal codes; codes are 0..m-1 in sorted order."""
    combined = np.zeros(len(columns[0]) if columns else 0, dtype=np.int64)
    span = 1  # combined < span
    for column in columns:
        values, m = dense_ranks(column)
        m = max(m, 1)
        if span * m >= 1 << 62:  # mixed radix; renumbered only when the next digit could overflow
            combined, span = dense_ranks(combined)
            span = max(span, 1)
        combined = combined * m + values
        span *= m
    return dense_ranks(combined)[0]


def group_rows(keys: list[Key], n_rows: int, dropna: bool = True) -> Groups:
    """Number the distinct combinations of `keys` in order of first appearance. With
    `dropna`, rows with a missing key belong to no group (pandas' default)."""
    combined = combine([codes for codes, _ in keys]) if keys else np.zeros(n_rows, dtype=np.int64)
    missing = np.zeros(n_rows, dtype=bool)
    for codes, _ in keys:
        missing |= codes < 0
    rows = np.flatnonzero(~missing) if dropna else np.arange(n_rows)
    group = np.full(n_rows, -1, dtype=np.int64)
    if not len(rows):
        return Groups(group, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    # each distinct combination (in sorted order) and the row of its first occurrence
    inverse, n = dense_ranks(combined[rows])
    first = np.full(n, len(rows), dtype=np.int64)
    np.minimum.at(first, inverse, np.arange(len(rows), dtype=np.int64))
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    group[rows] = rank[inverse.reshape(-1)]
    return Groups(group, rows[first[order]], np.bincount(group[rows], minlength=len(order)))
