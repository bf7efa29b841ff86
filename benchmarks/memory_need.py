"""What a run needs in memory, per trace format and command: the figures behind the
out-of-memory line (tracekit.errors.MEMORY_NEED_MB; issue 33).

    python benchmarks/memory_need.py [--sizes 5 20 50] [--nsys-scales 1 5 20] [--json OUT.json]

Kineto traces are tiled from the shared bert fixture (benchmarks/tile_kineto.py), Nsight
exports replicated from the shared FSDP export (benchmarks/bench_nsys_scale.py), into a
scratch directory. Each command (`info`, `analyze --format json`, `analyze --out`) runs in a
fresh process under a generous address-space limit (8 GiB: the settings tracekit makes under
any limit apply, one malloc arena and no pyarrow pool), and reports at its exit:

- VmPeak: the most address space it held (what `ulimit -v` limits);
- VmHWM: its peak resident set (what a cgroup memory limit counts).

A line fits each (format, command): need = fixed + per_mb x MB of trace (uncompressed JSON;
the SQLite file), least squares over the sizes; printed with each point's error. With
--bisect, the smallest limit (25 MB steps) under which `analyze --out` of the largest Kineto
tile still ends with exit 0 is found too: VmPeak is measured where memory is plentiful, and
allocators take less when it is not.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
SHARED = REPO.parent / "shared" / "fixtures"
KINETO_SOURCE = SHARED / "torch" / "h100_bert_small_hf_inference.json.gz"
NSYS_SOURCE = SHARED / "nsys" / "h100x2_fsdp_emit_nvtx_nsys2026.2.sqlite"
COMMANDS = {"info": ["info"], "analyze": ["analyze", "--format", "json"], "analyze --out": ["analyze", "--format", "json", "--out"]}
GENEROUS = 8 << 30

# Runs tracekit's own entry point and, at its exit (cli.main.run runs the exit handlers),
# writes the process's peaks to the file named by TRACEKIT_MEMORY_REPORT.
_CHILD = """
import atexit, json, os, sys
def report():
    status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
    with open(os.environ["TRACEKIT_MEMORY_REPORT"], "w") as f:
        json.dump({k: int(status[k].split()[0]) / 1024 for k in ("VmPeak", "VmHWM")}, f)
atexit.register(report)
sys.argv = ["tracekit"] + sys.argv[1:]
from tracekit.__main__ import entry
entry()
"""


def run(args: list[str], limit: int = GENEROUS, report: bool = True) -> dict:
    scratch = tempfile.mkdtemp(prefix="tk-memory-")
    out = os.path.join(scratch, "report.json")
    argv = [a if a != "--out" else f"--out={os.path.join(scratch, 'bundle')}" for a in args]

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    proc = subprocess.run([sys.executable, "-c", _CHILD, *argv] if report else [sys.executable, "-m", "tracekit", *argv],
                          capture_output=True, text=True, preexec_fn=limited, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO), "TRACEKIT_MEMORY_REPORT": out})
    result = {"rc": proc.returncode, "stderr": proc.stderr[-400:]}
    if report and os.path.exists(out):
        with open(out) as f:
            result.update(json.load(f))
    import shutil

    shutil.rmtree(scratch, ignore_errors=True)
    return result


def traces(scratch: pathlib.Path, sizes: list[float], nsys_scales: list[int]) -> list[tuple[str, pathlib.Path, float]]:
    sys.path.insert(0, str(HERE))
    from bench_nsys_scale import replicate
    from tile_kineto import tile

    from tracekit.errors import trace_kind_and_mb

    found = [("kineto", KINETO_SOURCE, trace_kind_and_mb(str(KINETO_SOURCE))[1])]
    for mb in sizes:
        path = scratch / f"kineto_{mb:g}mb.json"
        if not path.exists():
            tile(str(KINETO_SOURCE), str(path), mb * 1e6, False)
        found.append(("kineto", path, path.stat().st_size / 1e6))
    for scale in nsys_scales:
        path = scratch / f"nsys_{scale}x.sqlite"
        if scale == 1:
            path = NSYS_SOURCE
        elif not path.exists():
            replicate(NSYS_SOURCE, path, scale, scale)
        found.append(("nsys", path, path.stat().st_size / 1e6))
    return found


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0
    return my - slope * mx, slope


def bisect(trace: pathlib.Path, low_mb: int = 300, high_mb: int = 1500) -> int:
    """The smallest limit (25 MB steps) under which `analyze --out` ends with exit 0."""
    while high_mb - low_mb > 25:
        mid = (low_mb + high_mb) // 2 // 25 * 25
        if run(["analyze", str(trace), "--format", "json", "--out"], limit=mid << 20, report=False)["rc"] == 0:
            high_mb = mid
        else:
            low_mb = mid
    return high_mb


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[5, 20, 50], help="Kineto tiles, MB of JSON")
    parser.add_argument("--nsys-scales", type=int, nargs="+", default=[1, 5, 20], help="copies of the Nsight export's rows")
    parser.add_argument("--scratch", default=os.path.join(tempfile.gettempdir(), "tracekit-memory-need"))
    parser.add_argument("--bisect", action="store_true")
    parser.add_argument("--json", help="also write every measurement here")
    args = parser.parse_args()
    scratch = pathlib.Path(args.scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    rows = []
    for kind, path, mb in traces(scratch, args.sizes, args.nsys_scales):
        for command, argv in COMMANDS.items():
            r = run([argv[0], str(path), *argv[1:]])
            rows.append({"kind": kind, "command": command, "trace": path.name, "trace_mb": round(mb, 2), **r})
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "stderr" or r["rc"]}), file=sys.stderr, flush=True)
    table = {}
    for kind in ("kineto", "nsys"):
        for command in COMMANDS:
            mine = [r for r in rows if r["kind"] == kind and r["command"] == command and r["rc"] == 0]
            if len(mine) < 2:
                continue
            entry = {}
            for measure in ("VmPeak", "VmHWM"):
                fixed, per_mb = fit([(r["trace_mb"], r[measure]) for r in mine])
                worst = max(abs(fixed + per_mb * r["trace_mb"] - r[measure]) / r[measure] for r in mine)
                entry[measure] = {"fixed_mb": round(fixed, 1), "per_mb": round(per_mb, 2), "worst_point_error": round(worst, 3),
                                  "points": [(r["trace_mb"], round(r[measure])) for r in mine]}
            table[f"{kind} {command}"] = entry
    summary = {"fits": table}
    if args.bisect:
        largest = max((r for r in rows if r["kind"] == "kineto"), key=lambda r: r["trace_mb"])
        path = scratch / largest["trace"]
        summary["analyze --out smallest passing limit"] = {"trace": largest["trace"], "trace_mb": largest["trace_mb"],
                                                           "limit_mb": bisect(path)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
