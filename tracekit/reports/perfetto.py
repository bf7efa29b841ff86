"""The timeline as Chrome trace JSON (Perfetto, chrome://tracing), every GPU activity
annotated with its phase, block, FLOPs, bytes, efficiency and bound; ops and ranges as
they were, so the picture is the familiar one with tracekit's answers in each slice.

Perfetto's JSON importer wants numeric pids and tids, named by `process_name` /
`thread_name` metadata events (ph M); a flow (ph s on the launching op, ph f with
"bp": "e" on the kernel, one id per launch) draws the arrow from each op to its kernels.
GPUs get pids after the host processes' so that the two never collide.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec
import numpy as np

from tracekit.analysis import Analysis

_US = 1e-3  # ns -> µs


def _clean(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    return value.item() if hasattr(value, "item") else value


def _str(value: Any) -> str | None:
    return None if value is None or (isinstance(value, float) and value != value) else str(value)


class _Ids:
    """Numeric pid / tid for each host process and thread, each GPU and stream, with the
    metadata events that name them."""

    def __init__(self) -> None:
        self.meta: list[dict[str, Any]] = []
        self.pids: dict[tuple, int] = {}
        self.tids: dict[tuple, int] = {}

    def pid(self, key: tuple, name: str, sort: int) -> int:
        if key not in self.pids:
            pid = len(self.pids) + 1
            self.pids[key] = pid
            self.meta.append({"ph": "M", "cat": "__metadata", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}})
            self.meta.append({"ph": "M", "cat": "__metadata", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": sort}})
        return self.pids[key]

    def tid(self, pid: int, key: tuple, name: str) -> int:
        if (pid, key) not in self.tids:
            tid = len(self.tids) + 1
            self.tids[(pid, key)] = tid
            self.meta.append({"ph": "M", "cat": "__metadata", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
        return self.tids[(pid, key)]


def write_perfetto(a: Analysis, path: str) -> int:
    ids = _Ids()
    events: list[dict[str, Any]] = []
    host = a.host
    op_slot: dict[int, tuple[int, int, float]] = {}  # op row -> (pid, tid, ts) of its slice
    if host is not None:
        # Python frames (Kineto's python_function events) and the CUDA/HIP runtime calls are
        # kept: they are the host side of the host-bound gaps the report blames.
        ranges = host.ranges
        domain = ranges["domain"].astype(str).to_numpy() if "domain" in ranges else np.full(len(ranges), "", dtype=object)
        launches = host.launches
        for table, cats in ((host.ops, np.full(len(host.ops), "cpu_op", dtype=object)),
                            (ranges, np.where(domain == "python", "python_function", np.where(domain == "gpu", "gpu_range", "range"))),
                            (launches, np.full(len(launches), "cuda_runtime", dtype=object))):
            if not len(table):
                continue
            for row, (cat, r) in enumerate(zip(cats, table[["name", "pid", "tid", "start", "end"]].itertuples(index=False))):
                if cat == "gpu_range":
                    cat = "range"
                    pid = ids.pid(("gpu", int(r.tid)), f"GPU {int(r.tid)}", 1000 + int(r.tid))
                    tid = ids.tid(pid, ("annotations",), "annotations")
                else:
                    pid = ids.pid(("host", int(r.pid)), f"process {int(r.pid)}", int(r.pid) if r.pid >= 0 else 0)
                    tid = ids.tid(pid, ("thread", int(r.tid)), f"thread {int(r.tid)}")
                ts = float(r.start) * _US
                events.append({"ph": "X", "cat": str(cat), "name": str(r.name), "pid": pid, "tid": tid, "ts": ts, "dur": float(r.end - r.start) * _US})
                if cat == "cpu_op":
                    op_slot[int(row)] = (pid, tid, ts)
    k = a.kernels
    cols = ["name", "kind", "device", "stream", "start", "end", "phase", "block", "flops", "bytes_read", "bytes_written",
            "efficiency", "efficiency_sustained", "bound", "intensity", "cost_source", "unknown_reason", "op_name", "op", "launch"]
    flows: dict[int, int] = {}  # launch row -> flow id (one arrow per launch, from its op)
    launch_start = host.launches["start"].to_numpy() if host is not None and len(host.launches) else np.zeros(0, dtype=np.int64)
    for r in k[cols].itertuples(index=False):
        pid = ids.pid(("gpu", int(r.device)), f"GPU {int(r.device)}", 1000 + int(r.device))
        tid = ids.tid(pid, ("stream", int(r.stream)), f"stream {int(r.stream)}")
        ts = float(r.start) * _US
        events.append({
            "ph": "X", "cat": str(r.kind), "name": str(r.name), "pid": pid, "tid": tid, "ts": ts, "dur": float(r.end - r.start) * _US,
            "args": {"phase": str(r.phase), "block": str(r.block), "op": _str(r.op_name),
                     "flops": _clean(r.flops), "bytes": _clean(r.bytes_read + r.bytes_written), "efficiency": _clean(r.efficiency),
                     "efficiency_sustained": _clean(r.efficiency_sustained), "bound": _str(r.bound),
                     "intensity": _clean(r.intensity), "cost": _str(r.cost_source) or _str(r.unknown_reason)},
        })
        slot = op_slot.get(int(r.op)) if r.op >= 0 else None
        if slot is None:
            continue
        key = int(r.launch) if r.launch >= 0 else -2 - len(flows)
        if key not in flows:
            flows[key] = len(flows) + 1
            o_pid, o_tid, o_ts = slot
            # the launch call lies inside the innermost op on its thread: the arrow starts there
            if 0 <= r.launch < len(launch_start):
                o_ts = float(launch_start[r.launch]) * _US
            events.append({"ph": "s", "cat": "launch", "name": "launch", "id": flows[key], "pid": o_pid, "tid": o_tid, "ts": o_ts})
        # binds to the kernel slice that encloses ts (bp e: the enclosing slice, not the next one)
        events.append({"ph": "f", "bp": "e", "cat": "launch", "name": "launch", "id": flows[key], "pid": pid, "tid": tid, "ts": ts})
    from tracekit.common.atomic import open_atomic

    with open_atomic(path) as f:  # whole or not at all: a full disk leaves no truncated timeline
        f.write(msgspec.json.encode({"traceEvents": ids.meta + events, "displayTimeUnit": "ms",
                                     "otherData": {"tracekit": "annotated timeline", "source": a.meta.get("path")}}))
    return len(ids.meta) + len(events)
