"""Nsight Systems parse + link time and memory as the export grows.

    python benchmarks/bench_nsys_scale.py [--source EXPORT.sqlite] [--scales 1 10 100]
        [--big-kernels 1000000 --big-ranges 1000000]

Replicates a real export's GPU activity, runtime and NVTX rows (times shifted past the
previous copy, correlation ids offset so copies never collide) into scratch files under
benchmarks/out/, then times tracekit.load on each in a fresh process and reads its peak RSS.
The last file holds at least --big-kernels kernels (with their launches) and --big-ranges
NVTX ranges.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import shutil
import sqlite3
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
DEFAULT_SOURCE = HERE.parent.parent / "shared" / "fixtures" / "nsys" / "h100x2_fsdp_emit_nvtx_nsys2026.2.sqlite"
ACTIVITY = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_RUNTIME")
NVTX = "NVTX_EVENTS"

_CHILD = """
import json, sys, time, resource
t = time.perf_counter()
import tracekit
trace = tracekit.load(sys.argv[1])
print(json.dumps({"seconds": time.perf_counter() - t, "kernels": int((trace.kernels["kind"] == "kernel").sum()),
                  "linked": int((trace.kernels["launch"] >= 0).sum()), "ranges_and_ops": len(trace.ranges) + len(trace.ops),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def replicate(source: pathlib.Path, out: pathlib.Path, activity_copies: int, nvtx_copies: int) -> None:
    shutil.copy(source, out)
    out.chmod(0o644)
    conn = sqlite3.connect(out)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    span = max(conn.execute(f"SELECT max(end) FROM {t}").fetchone()[0] or 0 for t in ACTIVITY + (NVTX,) if t in tables)
    span -= min(conn.execute(f"SELECT min(start) FROM {t}").fetchone()[0] or 0 for t in ACTIVITY + (NVTX,) if t in tables)
    ids = 1 + max(conn.execute(f"SELECT max(correlationId) FROM {t}").fetchone()[0] or 0 for t in ACTIVITY if t in tables)
    for table, copies in [(t, activity_copies) for t in ACTIVITY] + [(NVTX, nvtx_copies)]:
        if table not in tables or copies <= 1:
            continue
        cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
        shifted = []
        for c in cols:
            if c in ("start", "end"):
                shifted.append(f"{c} + n.i * {span + 1}")
            elif c == "correlationId":
                shifted.append(f"{c} + n.i * {ids}")
            else:
                shifted.append(c)
        conn.execute(f"CREATE TEMP TABLE orig AS SELECT * FROM {table}")
        conn.execute(
            f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {copies - 1}) "
            f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join(shifted)} FROM orig CROSS JOIN n"
        )
        conn.execute("DROP TABLE orig")
        conn.commit()
    conn.execute("VACUUM")
    conn.close()


def measure(path: pathlib.Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", default=str(DEFAULT_SOURCE))
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--big-kernels", type=int, default=1_000_000)
    parser.add_argument("--big-ranges", type=int, default=1_000_000)
    parser.add_argument("--out-dir", default=str(HERE / "out"))
    args = parser.parse_args()
    source = pathlib.Path(args.source)
    out = pathlib.Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    kernels = conn.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    ranges = conn.execute(f"SELECT count(*) FROM {NVTX} WHERE eventType IN (59, 60)").fetchone()[0]
    conn.close()
    runs = [(f"{s}x", s, s) for s in args.scales]
    runs.append(("1M+1M", math.ceil(args.big_kernels / kernels), math.ceil(args.big_ranges / ranges)))
    results = []
    for label, activity_copies, nvtx_copies in runs:
        path = out / f"nsys_{label}.sqlite"
        if not path.exists():
            replicate(source, path, activity_copies, nvtx_copies)
        r = measure(path)
        r.update(label=label, size_mb=path.stat().st_size / 1e6)
        results.append(r)
        print(f"{label:>6}: {r['kernels']:>9,} kernels {r['ranges_and_ops']:>9,} NVTX ranges  {r['size_mb']:7.0f} MB  "
              f"{r['seconds']:6.2f} s  peak RSS {r['peak_rss_mb']:6.0f} MB  linked {r['linked']:,}")
    base = {r["label"]: r for r in results}
    for a, b in zip(args.scales, args.scales[1:]):
        ra, rb = base[f"{a}x"], base[f"{b}x"]
        print(f"{b}x / {a}x rows: time x{rb['seconds'] / ra['seconds']:.1f} for x{b / a:.0f} the rows")
    (out / "bench_nsys_scale.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
