"""What is in a linked trace: counts, link shares, top kernels. The data `info` shows."""

from __future__ import annotations

from typing import Any

import numpy as np

from tracekit.trace.health import lost_time_counts
from tracekit.trace.kernel_names import trace_labels
from tracekit.trace.tables import coded, column


def has_shapes(input_dims: Any) -> bool:
    """An op has shapes when at least one input has a non-empty dims list."""
    return isinstance(input_dims, list) and any(isinstance(d, list) and len(d) > 0 for d in input_dims)


def inventory(trace: Any, top: int = 10) -> dict[str, Any]:
    """`trace`: a linked Trace, or the linked column tables `api.scan` gives (no pandas)."""
    k = trace.kernels
    kind = coded(k, "kind")
    is_kernel = kind.equals("kernel")
    gpu_rows = len(k)
    op_has_shapes = _ops_with_shapes(column(trace.ops, "input_dims"))
    op = column(k, "op")
    with_op = op >= 0
    with_shapes = with_op.copy()
    with_shapes[with_op] = op_has_shapes[op[with_op]]
    python = coded(trace.ranges, "domain").equals("python")
    meta = trace.meta
    # activities the profiler recorded without their times (the parser dropped them from the
    # tables): counted all the same, their times unknown
    lost = lost_time_counts(meta)
    return {
        "path": meta.get("path"),
        "format": meta.get("format"),
        "schema": meta.get("schema"),
        "tool_versions": meta.get("tool_versions", {}),
        # devices the trace names; else the ids its GPU activity ran on, unnamed
        "devices": meta.get("devices") or [{"id": int(d), "name": None} for d in np.unique(column(k, "device")).tolist()],
        "rank": meta.get("rank"),
        "world_size": meta.get("world_size"),
        "span_ns": meta.get("span_ns"),
        "origin_abs_ns": meta.get("origin_abs_ns"),
        "counts": {
            "kernels": int(is_kernel.sum()) + lost.get("kernel", 0),
            "memcpys": int(kind.equals("memcpy").sum()) + lost.get("memcpy", 0),
            "memsets": int(kind.equals("memset").sum()) + lost.get("memset", 0),
            "launches": len(trace.launches) + lost.get("runtime call", 0),
            "ops": len(trace.ops),
            "ops_with_shapes": int(op_has_shapes.sum()),
            "ranges": int((~python).sum()),
            "python_frames": int(python.sum()),
        },
        "times_unknown": {f"{kind}s": n for kind, n in lost.items()},
        "links": {
            "gpu_activities": gpu_rows,
            "to_launch": _share(column(k, "launch") >= 0),
            "to_op": _share(with_op),
            "to_op_with_shapes": _share(with_shapes),
            "graph_launched": int(column(k, "graph_launch").sum()),
            "launched_before_capture": int(column(k, "launched_before_capture").sum()),
        },
        "top_kernels": _top_kernels(k, top),
        "warnings": list(trace.warnings),
    }


def _ops_with_shapes(dims: np.ndarray) -> np.ndarray:
    """has_shapes per op, decided once per distinct object: parsers intern equal inputs, so
    a trace's hundreds of thousands of ops share a few thousand dims lists."""
    if not len(dims):
        return np.zeros(0, dtype=bool)
    ids = np.fromiter(map(id, dims), dtype=np.uint64, count=len(dims))
    distinct, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    return np.array([has_shapes(dims[i]) for i in first], dtype=bool)[inverse.reshape(-1)]


def _share(mask: np.ndarray) -> dict[str, Any]:
    n = int(mask.sum())
    return {"count": n, "share": (n / len(mask)) if len(mask) else 0.0}


def _top_kernels(k: Any, top: int) -> list[dict[str, Any]]:
    """The names with the most GPU time: sums per name code (bincount); ties keep the names'
    order of first appearance. No string column of one row per kernel is built."""
    if not len(k):
        return []
    duration = column(k, "end") - column(k, "start")
    names = coded(k, "name")
    named = names.codes >= 0
    codes = names.codes[named]
    present, first = np.unique(codes, return_index=True)
    present = present[np.argsort(first, kind="stable")]
    sums = np.bincount(codes, weights=duration[named], minlength=len(names.labels))[present].astype(np.int64)
    counts = np.bincount(codes, minlength=len(names.labels))[present]
    total = float(duration.sum()) or 1.0
    order = np.argsort(-sums, kind="stable")[:top]
    label = trace_labels(str(names.labels[c]) for c in present)  # the label analyze gives each of them
    return [
        {"name": str(names.labels[present[i]]), "label": label[str(names.labels[present[i]])], "time_ns": int(sums[i]),
         "count": int(counts[i]), "share": float(sums[i]) / total}
        for i in order
    ]
