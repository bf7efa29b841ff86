"""The timeline as Chrome trace JSON (Perfetto, chrome://tracing), every GPU activity
annotated with its phase, block, FLOPs, bytes, efficiency and bound; ranges and ops as
they were, so the picture is the familiar one with tracekit's answers in each slice."""

from __future__ import annotations

import math
from typing import Any

import msgspec

from tracekit.analysis import Analysis

_US = 1e-3  # ns -> µs


def _clean(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    return value.item() if hasattr(value, "item") else value


def write_perfetto(a: Analysis, path: str) -> int:
    k = a.kernels
    events: list[dict[str, Any]] = []
    for r in k[["name", "kind", "device", "stream", "start", "end", "phase", "block", "flops", "bytes_read", "bytes_written",
                "efficiency", "efficiency_sustained", "bound", "intensity", "cost_source", "unknown_reason", "op_name"]].itertuples(index=False):
        events.append({
            "ph": "X", "cat": str(r.kind), "name": str(r.name), "pid": f"GPU {r.device}", "tid": f"stream {r.stream}",
            "ts": r.start * _US, "dur": (r.end - r.start) * _US,
            "args": {"phase": str(r.phase), "block": str(r.block), "op": None if r.op_name is None or r.op_name != r.op_name else str(r.op_name),
                     "flops": _clean(r.flops), "bytes": _clean(r.bytes_read + r.bytes_written), "efficiency": _clean(r.efficiency),
                     "efficiency_sustained": _clean(r.efficiency_sustained), "bound": None if r.bound is None or r.bound != r.bound else str(r.bound),
                     "intensity": _clean(r.intensity), "cost": str(r.cost_source) if r.cost_source == r.cost_source and r.cost_source is not None else str(r.unknown_reason)},
        })
    trace = getattr(a, "trace", None)
    if trace is not None:
        for table, cat in ((trace.ops, "cpu_op"), (trace.ranges[trace.ranges["domain"] != "python"], "range")):
            for r in table[["name", "pid", "tid", "start", "end"]].itertuples(index=False):
                events.append({"ph": "X", "cat": cat, "name": str(r.name), "pid": f"process {r.pid}", "tid": f"thread {r.tid}",
                               "ts": r.start * _US, "dur": (r.end - r.start) * _US})
    with open(path, "wb") as f:
        f.write(msgspec.json.encode({"traceEvents": events, "displayTimeUnit": "ms",
                                     "otherData": {"tracekit": "annotated timeline", "source": a.meta.get("path")}}))
    return len(events)
