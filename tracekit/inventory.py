"""What is in a linked trace: counts, link shares, top kernels. The data `info` shows."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tracekit.column_text import as_text
from tracekit.trace import Trace


def has_shapes(input_dims: Any) -> bool:
    """An op has shapes when at least one input has a non-empty dims list."""
    return isinstance(input_dims, list) and any(isinstance(d, list) and len(d) > 0 for d in input_dims)


def inventory(trace: Trace, top: int = 10) -> dict[str, Any]:
    k = trace.kernels
    is_kernel = (k["kind"] == "kernel").to_numpy()
    gpu_rows = len(k)
    op_has_shapes = _ops_with_shapes(trace.ops["input_dims"].to_numpy())
    op = k["op"].to_numpy()
    with_op = op >= 0
    with_shapes = with_op.copy()
    with_shapes[with_op] = op_has_shapes[op[with_op]]
    meta = trace.meta
    return {
        "path": meta.get("path"),
        "format": meta.get("format"),
        "schema": meta.get("schema"),
        "tool_versions": meta.get("tool_versions", {}),
        # devices the trace names; else the ids its GPU activity ran on, unnamed
        "devices": meta.get("devices") or [{"id": int(d), "name": None} for d in sorted(set(trace.kernels["device"].tolist()))],
        "rank": meta.get("rank"),
        "world_size": meta.get("world_size"),
        "span_ns": meta.get("span_ns"),
        "origin_abs_ns": meta.get("origin_abs_ns"),
        "counts": {
            "kernels": int(is_kernel.sum()),
            "memcpys": int((k["kind"] == "memcpy").sum()),
            "memsets": int((k["kind"] == "memset").sum()),
            "launches": len(trace.launches),
            "ops": len(trace.ops),
            "ops_with_shapes": int(op_has_shapes.sum()),
            "ranges": int((trace.ranges["domain"] != "python").sum()) if len(trace.ranges) else 0,
            "python_frames": int((trace.ranges["domain"] == "python").sum()) if len(trace.ranges) else 0,
        },
        "links": {
            "gpu_activities": gpu_rows,
            "to_launch": _share(k["launch"].to_numpy() >= 0),
            "to_op": _share(with_op),
            "to_op_with_shapes": _share(with_shapes),
            "graph_launched": int(k["graph_launch"].sum()),
            "launched_before_capture": int(k["launched_before_capture"].sum()),
        },
        "top_kernels": _top_kernels(trace, top),
        "warnings": list(trace.warnings),
    }


def _ops_with_shapes(dims: np.ndarray) -> np.ndarray:
    """has_shapes per op, decided once per distinct object: parsers intern equal inputs, so
    a trace's hundreds of thousands of ops share a few thousand dims lists."""
    if not len(dims):
        return np.zeros(0, dtype=bool)
    ids = np.fromiter(map(id, dims), dtype=np.uint64, count=len(dims))
    distinct, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    return np.array([has_shapes(dims[i]) for i in first], dtype=bool)[inverse]


def _share(mask: np.ndarray) -> dict[str, Any]:
    n = int(mask.sum())
    return {"count": n, "share": (n / len(mask)) if len(mask) else 0.0}


def _top_kernels(trace: Trace, top: int) -> list[dict[str, Any]]:
    k = trace.kernels
    if not len(k):
        return []
    duration = (k["end"] - k["start"]).rename("time_ns")
    # Per name by category code (bincount), names in order of first appearance as
    # groupby(sort=False) gives them: no string column of one row per kernel is built.
    names = k["name"].astype("category")
    codes = names.cat.codes.to_numpy()
    named = codes >= 0
    present, first = np.unique(codes[named], return_index=True)
    present = present[np.argsort(first, kind="stable")]
    sums = np.bincount(codes[named], weights=duration.to_numpy()[named], minlength=len(names.cat.categories))
    counts = np.bincount(codes[named], minlength=len(names.cat.categories))
    grouped = pd.DataFrame({"sum": sums[present].astype(np.int64), "count": counts[present]},
                           index=pd.Index([str(c) for c in names.cat.categories[present]], name="name"))
    total = float(duration.sum()) or 1.0
    rows = grouped.sort_values("sum", ascending=False).head(top)
    return [
        {"name": name, "time_ns": int(r["sum"]), "count": int(r["count"]), "share": float(r["sum"]) / total}
        for name, r in rows.iterrows()
    ]
