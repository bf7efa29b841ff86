"""The `top` tool's body: the rows of one of the analysis' tables, largest first, filtered.

kernels (per kernel name: calls, time, FLOPs, bytes, roofline efficiency, bound; filtered by
phase and block from the kernels themselves), ops (per op and input shapes), blocks (phase x
block), steps, copies, idle (the GPU's idle time by cause) and idle_host (the host code the
GPU waited on). `name_contains` matches the name as the trace wrote it or as shown escaped.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tracekit.mcp_server.fields import NotInTrace, table_rows
from tracekit.reports.text import mcp_text

TABLES = ("kernels", "ops", "blocks", "steps", "copies", "idle", "idle_host")
NAME_COLUMN = {"kernels": "name", "ops": "op", "blocks": "block", "steps": "step", "copies": "name", "idle": "category",
               "idle_host": "name"}


def top(a, table: str, limit: int = 20, phase: str | None = None, block: str | None = None,
        name_contains: str | None = None) -> dict[str, Any]:
    if table not in TABLES:
        raise NotInTrace(f"table must be one of {', '.join(TABLES)}")
    if (phase or block) and table not in ("kernels", "blocks", "copies"):
        raise NotInTrace("phase and block filter the kernels, copies and blocks tables only")
    frame = _table(a, table, phase, block)
    if name_contains:
        text = frame[NAME_COLUMN[table]].astype(object).to_numpy()
        keep = np.fromiter((isinstance(t, str) and (name_contains in t or name_contains in mcp_text(t)) for t in text),
                           dtype=bool, count=len(text))
        frame = frame[keep]
    out = table_rows(frame, limit)
    out["table"] = table
    return out


def _table(a, table: str, phase: str | None, block: str | None) -> pd.DataFrame:
    from tracekit.analysis.rollup import kernel_summary

    if table in ("kernels", "copies"):
        k = a.kernels
        keep = _in(k, phase, block)
        if keep.all():
            return a.kernel_summary if table == "kernels" else a.copy_summary
        return kernel_summary(k[keep], copies=table == "copies")
    if table == "ops":
        return a.ops.sort_values("time_ns", ascending=False, kind="stable")
    if table == "blocks":
        return a.blocks[_in(a.blocks, phase, block)]
    if table == "steps":
        return a.steps
    f = a.findings
    if f is None:
        return pd.DataFrame({NAME_COLUMN[table]: []})
    return f.idle if table == "idle" else f.idle_host


def _in(frame: pd.DataFrame, phase: str | None, block: str | None) -> np.ndarray:
    """The rows of `frame` in `phase` and `block` (None: any)."""
    keep = np.ones(len(frame), dtype=bool)
    for column, value in (("phase", phase), ("block", block)):
        if value:
            keep &= (frame[column].astype(object) == value).to_numpy()
    return keep
