"""A Kineto trace with N distinct kernel names (issue 39, item 5): one op, one launch and one
kernel per name, back to back on one stream, each name called `calls` times. Every pass of
an analysis must stay linear (or n log n) in events and in distinct names; this trace makes
a pass that is quadratic in names show at once.

    python benchmarks/distinct_names.py 100000 /tmp/names100k.json
    /usr/bin/time -v python -m tracekit analyze /tmp/names100k.json >/dev/null
"""

from __future__ import annotations

import argparse
import json


def distinct_names_trace(n: int, calls: int = 1) -> dict:
    """The trace as a dict: `n` kernel names, each launched `calls` times by an aten::add op
    (so every kernel has a launch, an op and a shape-derived cost)."""
    events: list[dict] = []
    corr, ts = 0, 0.0
    for c in range(calls):
        for i in range(n):
            corr += 1
            events.append({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": ts, "dur": 4.0,
                           "args": {"Input Dims": [[1024], [1024], []], "Input type": ["float", "float", "Scalar"]}})
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts + 1.0,
                           "dur": 2.0, "args": {"correlation": corr}})
            events.append({"ph": "X", "cat": "kernel", "name": f"void elementwise_kernel_{i}<float, {i % 7}>(float*, int)",
                           "pid": 0, "tid": 7, "ts": ts + 3.0, "dur": 2.0,
                           "args": {"correlation": corr, "device": 0, "stream": 7, "grid": [8, 1, 1], "block": [128, 1, 1]}})
            ts += 5.0
    return {"traceEvents": events,
            "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85899345920}]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("n", type=int, help="distinct kernel names")
    p.add_argument("out", help="the JSON file to write")
    p.add_argument("--calls", type=int, default=1, help="calls of each name")
    a = p.parse_args()
    with open(a.out, "w") as f:
        json.dump(distinct_names_trace(a.n, a.calls), f)


if __name__ == "__main__":
    main()
