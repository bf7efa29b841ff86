"""The Trace: the tables every parser produces, and the contract with everything after.

Times are int64 nanoseconds from the start of the capture (the earliest event in the
file). Names are pandas Categoricals: a trace repeats a few thousand names millions of
times, so each table holds small integer codes (HTA's symbol table, done by pandas).
Both parsers hand over the same columns as numpy arrays first (tables.py): the
DataFrames are built from them after linking, so reading and linking need no pandas.

The columns of each table are in schema.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from tracekit.trace.tables import Coded, ColumnTable, ColumnTrace, default_column

if TYPE_CHECKING:  # pandas is imported where a DataFrame is built: the parsers and linking run without it
    import pandas as pd


def make_table(columns: dict[str, str], data: dict[str, Any] | None = None, n: int = 0) -> pd.DataFrame:
    """A table with exactly the contract's columns: values from `data`, defaults elsewhere.

    Defaults say "absent": -1 for integers, None for categories and objects, False for flags.
    """
    import pandas as pd

    data = data or {}
    if data:
        n = len(next(iter(data.values())))
    out = {}
    for col, dtype in columns.items():
        values = data.get(col)
        if values is None:
            values = default_column(dtype, n)
        if isinstance(values, Coded):
            values = values.to_categorical()
        if dtype == "object":
            series = pd.Series(values, dtype=object)
        elif dtype in ("category", "bool"):
            series = pd.Series(values).astype(dtype)
        elif dtype == "float64":
            series = pd.Series(values, dtype=np.float64)
        else:  # integers: rows a source lacks a value for (NaN after a concat) get -1
            series = pd.Series(values)
            if series.hasnans:
                series = series.fillna(-1)
            series = series.astype(dtype)
        out[col] = series.reset_index(drop=True)
    return pd.DataFrame(out, index=pd.RangeIndex(n))


@dataclass
class Trace:
    kernels: pd.DataFrame
    launches: pd.DataFrame
    ops: pd.DataFrame
    ranges: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def range_stack(self, kernel: int) -> list[str]:
        """The names of the ranges (user annotations, ProfilerStep#N, Python frames) that
        enclose kernel row `kernel`'s launch, outermost first: linking's innermost range
        and its parents."""
        row = int(self.kernels["range"].iat[kernel]) if "range" in self.kernels else -1
        names, parents = self.ranges["name"], self.ranges["parent"].to_numpy()
        stack: list[str] = []
        while 0 <= row < len(parents) and len(stack) < 1024:  # parents point up; the bound stops a cycle
            stack.append(str(names.iat[row]))
            row = int(parents[row])
        return stack[::-1]


def to_frame(table: ColumnTable) -> pd.DataFrame:
    """A ColumnTable as the Trace's DataFrame (exactly the contract's columns, plus those
    linking added)."""
    return make_table(table.spec, table.columns, n=table.n)


def to_trace(tables: ColumnTrace) -> Trace:
    """The pandas Trace of a trace read as column tables."""
    return Trace(to_frame(tables.kernels), to_frame(tables.launches), to_frame(tables.ops), to_frame(tables.ranges),
                 tables.meta, tables.warnings)
