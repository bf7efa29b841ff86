"""tracekit parse + link versus HolisticTraceAnalysis load, on one large tiled trace.

    python benchmarks/bench_kineto_load.py [--source FIXTURE] [--min-bytes 1.1e9]
        [--hta-python PATH/TO/python-with-HolisticTraceAnalysis-0.5.0]

Builds (once, under benchmarks/out/) a >= 1 GB trace by tiling a real fixture, and its
.json.gz twin; then, each in a fresh process, times tracekit.load (parse + link) on both,
and HTA's TraceAnalysis(trace_dir=...) on the plain JSON, recording peak RSS. HTA runs
from its own interpreter (--hta-python) because it pins its own dependencies.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
DEFAULT_SOURCE = HERE.parent.parent / "shared" / "fixtures" / "torch" / "h100_qwen1.5-0.5b_hf_inference.json.gz"

# Runs in a child process: the parent reads its peak RSS from the child's rusage.
_TRACEKIT = """
import json, sys, time
t = time.perf_counter()
import tracekit
trace = tracekit.load(sys.argv[1])
elapsed = time.perf_counter() - t
print(json.dumps({"seconds": elapsed, "kernels": len(trace.kernels), "ops": len(trace.ops),
                  "linked_to_op": int((trace.kernels["op"] >= 0).sum())}))
"""

_HTA = """
import json, logging, sys, time
logging.disable(logging.WARNING)
t = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
analysis = TraceAnalysis(trace_dir=sys.argv[1])
elapsed = time.perf_counter() - t
df = analysis.t.get_trace(0)
print(json.dumps({"seconds": elapsed, "events": len(df)}))
"""


def measure(python: str, code: str, arg: str) -> dict:
    wrapper = (
        "import resource, subprocess, sys, json\n"
        "p = subprocess.run([sys.argv[1], '-c', sys.argv[2], sys.argv[3]], capture_output=True, text=True)\n"
        "if p.returncode: sys.exit(p.stderr[-2000:])\n"
        "out = json.loads(p.stdout.strip().splitlines()[-1])\n"
        "out['peak_rss_mb'] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run([sys.executable, "-c", wrapper, python, code, arg], capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"measurement failed: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", default=str(DEFAULT_SOURCE))
    parser.add_argument("--min-bytes", type=float, default=1.1e9)
    parser.add_argument("--hta-python", default=None, help="interpreter with HolisticTraceAnalysis==0.5.0")
    parser.add_argument("--out-dir", default=str(HERE / "out"))
    args = parser.parse_args()

    out = pathlib.Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plain = out / f"tiled_{int(args.min_bytes / 1e6)}MB.json"
    packed = out / (plain.name + ".gz")
    sys.path.insert(0, str(HERE))
    from tile_kineto import tile

    if not plain.exists():
        tile(args.source, str(plain), args.min_bytes, compress=False)
    if not packed.exists():
        subprocess.run(["gzip", "-k", "-6", str(plain)], check=True)
    size_mb = plain.stat().st_size / 1e6
    print(f"trace: {plain} ({size_mb:,.0f} MB; .gz {packed.stat().st_size / 1e6:,.0f} MB)")

    results = {"size_mb": size_mb}
    results["tracekit_json"] = measure(sys.executable, _TRACEKIT, str(plain))
    results["tracekit_gz"] = measure(sys.executable, _TRACEKIT, str(packed))
    if args.hta_python:
        with tempfile.TemporaryDirectory() as trace_dir:
            os.symlink(plain, os.path.join(trace_dir, plain.name))
            results["hta_json"] = measure(args.hta_python, _HTA, trace_dir)

    tk = results["tracekit_json"]
    print(f"tracekit .json    : {tk['seconds']:7.2f} s  {size_mb / tk['seconds']:7.0f} MB/s  peak RSS {tk['peak_rss_mb']:,.0f} MB "
          f"({tk['peak_rss_mb'] / size_mb:.2f}x the file)  kernels {tk['kernels']:,}  ops {tk['ops']:,}")
    gz = results["tracekit_gz"]
    print(f"tracekit .json.gz : {gz['seconds']:7.2f} s  {size_mb / gz['seconds']:7.0f} MB/s  peak RSS {gz['peak_rss_mb']:,.0f} MB")
    if "hta_json" in results:
        hta = results["hta_json"]
        print(f"HTA 0.5.0 .json   : {hta['seconds']:7.2f} s  {size_mb / hta['seconds']:7.0f} MB/s  peak RSS {hta['peak_rss_mb']:,.0f} MB  events {hta['events']:,}")
        print(f"tracekit is {hta['seconds'] / tk['seconds']:.1f}x faster than HTA, with {hta['peak_rss_mb'] / tk['peak_rss_mb']:.1f}x less peak memory")
    (out / "bench_kineto_load.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
