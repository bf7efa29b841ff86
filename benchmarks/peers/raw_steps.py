"""A third opinion on step ownership, from the raw Kineto JSON with no tracekit or HTA code: a
GPU event belongs to the ProfilerStep#N (host annotation) whose window holds the start of its
launch (the runtime event with the same correlation id, on any thread)."""

from __future__ import annotations

import bisect
import gzip
import json
from collections import Counter

GPU = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
RUNTIME = {"cuda_runtime", "cuda_driver", "Runtime"}


def step_counts(path: str) -> Counter:
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
        events = json.load(f)["traceEvents"]
    launch_ts = {}
    steps = []
    for e in events:
        cat, args = e.get("cat"), e.get("args") or {}
        if cat in RUNTIME and "correlation" in args:
            launch_ts[args["correlation"]] = float(e["ts"])
        elif cat != "gpu_user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#") and "dur" in e:
            steps.append((float(e["ts"]), float(e["ts"]) + float(e["dur"]), e["name"]))
    steps.sort()
    starts = [s[0] for s in steps]
    counts: Counter = Counter()
    for e in events:
        if e.get("cat") not in GPU:
            continue
        ts = launch_ts.get((e.get("args") or {}).get("correlation"))
        if ts is None:
            counts["(no launch)"] += 1
            continue
        i = bisect.bisect_right(starts, ts) - 1
        counts[steps[i][2] if i >= 0 and ts < steps[i][1] else "(outside every step)"] += 1
    return counts
