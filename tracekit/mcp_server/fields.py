"""Tables and summaries as the JSON data an MCP tool returns: rows bounded by a limit, numbers
as numbers (NaN and infinities as null: unknown is not zero), every string through
reports.text.mcp_text, keys included (stage and range names are keys in some summaries)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tracekit.reports.text import mcp_text

MAX_ROWS = 500  # the most rows any tool returns; its `limit` argument is capped here


class NotInTrace(Exception):
    """A table, kind or name the analysis lacks: the caller's mistake, told as a tool error.
    Its message is the server's own sentence and holds no trace text."""


def clean(value: Any) -> Any:
    """`value` as strict JSON data with every string escaped for the medium."""
    if isinstance(value, str):
        return mcp_text(value)
    if isinstance(value, dict):
        return {mcp_text(k) if isinstance(k, str) else k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [clean(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if value is None:
        return None
    try:  # pandas' missing values (NA, NaT) and anything else scalar-like
        import pandas as pd

        if pd.isna(value):
            return None
    except (TypeError, ValueError, ImportError):
        pass
    return mcp_text(value)


def table_rows(frame, limit: int, columns: list[str] | None = None) -> dict[str, Any]:
    """The first `limit` rows of a DataFrame as cleaned records, with how many were left off."""
    limit = max(1, min(int(limit), MAX_ROWS))
    frame = frame if columns is None else frame[[c for c in columns if c in frame.columns]]
    rows = [clean(r) for r in frame.head(limit).to_dict(orient="records")]
    return {"rows": rows, "total_rows": int(len(frame)), "left_off": max(0, int(len(frame)) - len(rows))}
