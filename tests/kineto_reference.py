"""An independent, deliberately plain reading of a Kineto trace with the stdlib.

Tests compare tracekit against this: it shares no code with tracekit, does everything the
obvious slow way (dicts, per-launch scans), and is small enough to check by eye.
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
from collections import defaultdict

GPU = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset", "memset": "memset"}
RUNTIME = {"cuda_runtime", "cuda_driver", "runtime", "driver"}
OPS = {"cpu_op", "operator"}
LEGACY_RANGE = re.compile(r"^ProfilerStep#\d+$|#|^## .* ##$")


def read(path) -> dict:
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    legacy = any(e.get("cat") == "Operator" for e in events)
    gpu = [e for e in events if e.get("cat", "").lower() in GPU]
    runtime = [e for e in events if e.get("cat", "").lower() in RUNTIME]
    ops = [e for e in events if e.get("cat", "").lower() in OPS and not (legacy and LEGACY_RANGE.search(e["name"]))]
    return {"doc": doc, "gpu": gpu, "runtime": runtime, "ops": ops}


def launch_of(ref: dict) -> list[dict | None]:
    """Each GPU activity's launch: the first runtime event with its correlation id."""
    by_corr = {}
    for e in ref["runtime"]:
        by_corr.setdefault(e["args"].get("correlation"), e)
    return [by_corr.get(g.get("args", {}).get("correlation")) for g in ref["gpu"]]


def innermost_ops(ref: dict, launch: dict) -> list[dict]:
    """The shortest ops on the launch's thread whose span holds the launch's start.

    A list, because a parent and child op can share start and duration to the microsecond
    (the 2021 schema has integer microseconds): either is a correct "innermost". The ops a
    launch can sit in start at most the thread's longest op before it: only those are
    looked at (ops sorted by start, a bisect), the same answer as scanning them all.
    """
    by_thread = ref.setdefault("_by_thread", {})
    if not by_thread:
        grouped = defaultdict(list)
        for op in ref["ops"]:
            grouped[(op["pid"], str(op["tid"]))].append(op)
        for key, ops in grouped.items():
            ops.sort(key=lambda op: op["ts"])
            by_thread[key] = ([op["ts"] for op in ops], ops, max(op["dur"] for op in ops))
    starts, ops, longest = by_thread.get((launch["pid"], str(launch["tid"])), ([], [], 0))
    t = launch["ts"]
    candidates = ops[bisect.bisect_left(starts, t - longest):bisect.bisect_right(starts, t)]
    enclosing = [op for op in candidates if op["ts"] <= t <= op["ts"] + op["dur"]]
    if not enclosing:
        return []
    shortest = min(op["dur"] for op in enclosing)
    return [op for op in enclosing if op["dur"] == shortest]


def has_shapes(op: dict | None) -> bool:
    dims = (op or {}).get("args", {}).get("Input Dims")
    return isinstance(dims, list) and any(isinstance(d, list) and d for d in dims)
