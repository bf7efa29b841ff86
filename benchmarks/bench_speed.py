"""tracekit `info` / `analyze` versus HolisticTraceAnalysis 0.5.0's load, same files, same run.

    python benchmarks/bench_speed.py [--mid PATH] [--big PATH] [--skip-big] [--repeat 1] [--hta-big]
        [--hta-python /work/hta-venv/bin/python] [--hta-path /work/hta-pandas2] [--crossover]

Traces (built once under benchmarks/out/ by tiling a shared fixture when not given):
  mid  ~55 MB of plain JSON, the size of an everyday inference trace
  big  ~1.1 GB of plain JSON

Every measurement is a fresh process, timed from the outside (interpreter start, imports,
parse, analysis, rendering: what a user waits for), with its peak memory sampled over the
whole process tree (every 0.1 s; every 0.3 s when it has several processes): `pss`
is the tree's memory (proportional set sizes: pages of the mmap-ed trace shared by worker
processes counted once), `rss` the largest single process's resident set. Tables are rendered to /dev/null. The load average is printed beside
every figure: on a shared 2-core machine it says how much the figure can be trusted.

Figures:
  HTA load           TraceAnalysis(trace_dir=...) alone, timed inside HTA's own process
                     (its imports excluded), and the whole process; then, in the same
                     process, its analyses that answer what `analyze` reports (temporal,
                     kernel-type and idle breakdowns, compute/communication overlap).
  tracekit info      `python -m tracekit info PATH` (table), whole process.
  tracekit analyze   `python -m tracekit analyze PATH` (full, table), whole process.
  workers 1 vs 2     `python -m tracekit info --workers N PATH` on the big trace, and the
                     parse + link alone (tracekit.load inside the process) in MB/s.
  import time        `python -X importtime -m tracekit CMD PATH`: the sum of the top-level
                     imports' cumulative times (what the command pays before it reads a byte).
HTA runs from its own interpreter (HTA 0.5.0 pins its own dependencies); --hta-path is put
first on its PYTHONPATH (a pandas 2.2 that HTA 0.5.0 runs under; see compare_peers.py).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
SOURCE = REPO.parent / "shared" / "fixtures" / "torch" / "h100_qwen1.5-0.5b_hf_inference.json.gz"
HTA_PYTHON = "/work/hta-venv/bin/python"
HTA_PATH = "/work/hta-pandas2"

_HTA = """
import json, logging, sys, time
logging.disable(logging.WARNING)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
analysis = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
# The analyses that answer what `tracekit analyze` reports: busy/idle, kernel types and
# top kernels, the idle split, compute/communication overlap.
# One that fails (HTA asserts on some traces) is timed up to its failure and named.
failed = []
for name in ("get_temporal_breakdown", "get_gpu_kernel_breakdown", "get_idle_time_breakdown", "get_comm_comp_overlap"):
    try:
        getattr(analysis, name)(visualize=False)
    except Exception as exc:  # noqa: BLE001
        failed.append(f"{name}: {type(exc).__name__}")
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "analyses_s": t3 - t2, "analyses_failed": failed,
                  "events": len(analysis.t.get_trace(0))}))
"""

# Parse + link alone. Besides the wall time: this process's CPU time and its workers', so
# that the critical path (main + workers / n) can be read on a machine busy with other work,
# where the wall time of 2 workers says more about the neighbours than about tracekit.
_LOAD = """
import json, resource, sys, time
import pandas  # noqa: F401  (the DataFrames are built at the end of load: their import is not parsing)
import tracekit
import tracekit.parsers.kineto_parallel as parallel
if len(sys.argv) > 3:
    parallel.MIN_PARALLEL_BYTES = int(sys.argv[3])
workers = int(sys.argv[2])
t, cpu = time.perf_counter(), time.process_time()
trace = tracekit.load(sys.argv[1], workers=workers)
wall, cpu = time.perf_counter() - t, time.process_time() - cpu
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
kids = kids.ru_utime + kids.ru_stime
print(json.dumps({"load_s": wall, "main_cpu_s": cpu, "workers_cpu_s": kids, "critical_cpu_s": cpu + kids / workers,
                  "kernels": len(trace.kernels), "ops": len(trace.ops)}))
"""


PYCACHE = "/tmp/tracekit_pycache"


def tracekit_env(repo: pathlib.Path = REPO) -> dict:
    """The environment tracekit is timed in: this checkout first on the path, with its
    bytecode compiled once beforehand, as an installed package has it (pip compiles at
    install). Under PYTHONDONTWRITEBYTECODE every run would compile tracekit's ~90 modules
    from source (~0.4 s of CPU a run), which no installed tracekit does; the bytecode goes
    to PYCACHE, not into the checkout. `repo`: another checkout (a baseline timed beside this one)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(repo), PYTHONPYCACHEPREFIX=PYCACHE)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(repo / "tracekit")], env=env, check=True)
    return env


def _tree_memory(pid: int, with_pss: bool) -> tuple[int, int]:
    """(the tree's memory, its largest single RSS), bytes. A single process: its RSS (cheap
    to read). Several (workers forked from it share its pages): the sum of their
    proportional set sizes, read only when `with_pss` (smaps walks every page table entry
    and takes the process's memory lock), else 0 (not measured this time)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root] + root.children(recursive=True)
    except psutil.Error:
        return 0, 0
    total = largest = 0
    page = os.sysconf("SC_PAGE_SIZE")
    for p in procs:
        try:
            with open(f"/proc/{p.pid}/statm") as f:
                rss = int(f.read().split()[1]) * page
            if len(procs) == 1:
                pss = rss
            elif with_pss:
                with open(f"/proc/{p.pid}/smaps_rollup") as f:
                    pss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("Pss:"))
            else:
                pss = 0
        except (OSError, StopIteration, ValueError):
            continue
        total += pss
        largest = max(largest, rss)
    return total, largest


def run(cmd: list[str], env: dict | None = None) -> dict:
    """Run cmd in a fresh process; wall time, peak tree PSS / single RSS, its last stdout line.
    The wall time is taken when a blocking wait returns (exact); memory is sampled by a
    thread beside it (every 0.1 s), so sampling never rounds the time."""
    import threading

    load = os.getloadavg()[0]
    out = tempfile.TemporaryFile()
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, env=env)
    peaks = {"pss": 0, "rss": 0}
    finished = threading.Event()

    def sample() -> None:
        ticks = 0
        while not finished.wait(0.1 if ticks else 0.02):
            pss, rss = _tree_memory(proc.pid, with_pss=ticks % 3 == 0)  # several processes: PSS every 0.3 s
            peaks["pss"], peaks["rss"] = max(peaks["pss"], pss), max(peaks["rss"], rss)
            ticks += 1

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    err = proc.stderr.read().decode(errors="replace")  # until the process closes it: at its end
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    finished.set()
    sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {err[-2000:]}")
    out.seek(0)
    lines = out.read().decode(errors="replace").strip().splitlines()
    result = {"wall_s": wall, "peak_pss_mb": peaks["pss"] / 1e6, "peak_rss_mb": max(peaks["rss"], usage.ru_maxrss * 1024) / 1e6,
              "load_avg": load, "cpu_s": usage.ru_utime + usage.ru_stime}
    if lines and lines[-1].startswith("{"):
        result.update(json.loads(lines[-1]))
    return result


def import_total(cmd: str, path: str, env: dict) -> dict:
    """`python -X importtime`: the top-level imports' cumulative microseconds, summed."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "tracekit", cmd, path], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True)
    total = 0
    loaded = set()
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line[len("import time:"):].split("|")
        loaded.add(name.strip())
        if not name.startswith("  "):  # top level: one space after the bar
            total += int(cumulative)
    return {"import_s": total / 1e6, "imports": sorted(m for m in ("pandas", "numpy", "pyarrow", "matplotlib", "jinja2", "rich", "scipy", "dask") if m in loaded)}


def ensure(path: pathlib.Path, min_bytes: float) -> pathlib.Path:
    if not path.exists():
        sys.path.insert(0, str(HERE))
        from tile_kineto import tile

        tile(str(SOURCE), str(path), min_bytes, compress=False)
    return path


def median_of(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def bench_trace(label: str, path: pathlib.Path, args, env: dict, hta_env: dict | None, workers: list[int]) -> dict:
    size_mb = path.stat().st_size / 1e6
    print(f"\n== {label}: {path} ({size_mb:,.1f} MB)", flush=True)
    res: dict = {"path": str(path), "size_mb": size_mb}
    tk = [sys.executable, "-m", "tracekit"]

    def show(name: str, runs: list[dict], extra: str = "") -> None:
        for r in runs:
            print(f"  {name:<34} {r['wall_s']:7.2f} s  {size_mb / r['wall_s']:6.0f} MB/s  peak PSS {r['peak_pss_mb']:7,.0f} MB "
                  f"({r['peak_pss_mb'] / size_mb:.2f}x file)  max RSS {r['peak_rss_mb']:7,.0f} MB  load {r['load_avg']:.2f}{extra}",
                  flush=True)

    if hta_env is not None and (label == "mid" or args.hta_big) and not args.workers_only:
        with tempfile.TemporaryDirectory(prefix="bench_speed_hta_") as trace_dir:
            os.symlink(path, os.path.join(trace_dir, path.name))
            runs = [run([args.hta_python, "-c", _HTA, trace_dir], hta_env) for _ in range(args.repeat)]
        res["hta"] = runs
        show("HTA 0.5.0 process (import+load+analyses)", runs)
        for r in runs:
            print(f"  {'HTA 0.5.0 load alone':<34} {r['load_s']:7.2f} s  {size_mb / r['load_s']:6.0f} MB/s  (import {r['import_s']:.2f} s; "
                  f"then its analyses matching ours {r['analyses_s']:.2f} s"
                  + (f", failed: {'; '.join(r['analyses_failed'])})" if r.get("analyses_failed") else ")"))
    for cmd in ("info", "analyze"):
        if label == "big" and (args.workers_only or (cmd == "analyze" and args.skip_big_analyze)):
            continue
        runs = [run(tk + [cmd, str(path)], env) for _ in range(args.repeat)]
        res[cmd] = runs
        show(f"tracekit {cmd}", runs)
    # 1 and 2 workers interleaved, so that both see the same neighbours on a shared machine.
    for n in workers:
        res[f"info_workers{n}"], res[f"load_workers{n}"] = [], []
    for _ in range(args.repeat if workers else 0):
        for n in workers:
            r = run(tk + ["info", "--workers", str(n), str(path)], env)
            res[f"info_workers{n}"].append(r)
            show(f"tracekit info --workers {n}", [r])
            r = run([sys.executable, "-c", _LOAD, str(path), str(n)], env)
            res[f"load_workers{n}"].append(r)
            print(f"  {'tracekit.load(workers=%d) alone' % n:<34} {r['load_s']:7.2f} s  {size_mb / r['load_s']:6.0f} MB/s  "
                  f"peak PSS {r['peak_pss_mb']:7,.0f} MB ({r['peak_pss_mb'] / size_mb:.2f}x file)  load {r['load_avg']:.2f}  "
                  f"cpu: main {r['main_cpu_s']:.2f} s + workers {r['workers_cpu_s']:.2f} s, critical path {r['critical_cpu_s']:.2f} s "
                  f"({size_mb / r['critical_cpu_s']:.0f} MB/s)", flush=True)

    if "hta" in res:
        hta_load = median_of(res["hta"], "load_s")
        hta_wall = median_of(res["hta"], "wall_s")
        for cmd, target in (("info", 8.0), ("analyze", 5.0)):
            if cmd in res:
                tk_wall = median_of(res[cmd], "wall_s")
                print(f"  => tracekit {cmd} is {hta_load / tk_wall:.1f}x faster than HTA's load alone "
                      f"({hta_wall / tk_wall:.1f}x its whole process with imports and analyses); target >= {target:g}x")
        if "analyze" in res:
            hta_full = statistics.median(r["load_s"] + r["analyses_s"] for r in res["hta"])
            print(f"  => tracekit analyze is {hta_full / median_of(res['analyze'], 'wall_s'):.1f}x faster than HTA's load + its "
                  f"analyses matching ours (temporal, kernel, idle breakdowns, overlap; imports excluded)")
    if len(workers) == 2:
        a, b = (median_of(res[f"load_workers{n}"], "load_s") for n in workers)
        ca, cb = (median_of(res[f"load_workers{n}"], "critical_cpu_s") for n in workers)
        wa, wb = (median_of(res[f"info_workers{n}"], "wall_s") for n in workers)
        print(f"  => workers {workers[0]} -> {workers[1]}: parse+link wall {a / b:.2f}x ({size_mb / b:.0f} MB/s), "
              f"CPU critical path {ca / cb:.2f}x ({size_mb / cb:.0f} MB/s), whole `info` wall {wa / wb:.2f}x "
              f"({size_mb / wb:.0f} MB/s); targets >= 1.7x, >= 150 MB/s")
    return res


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mid", help="a ~50 MB Kineto JSON trace (default: tiled, under benchmarks/out/)")
    parser.add_argument("--big", help="a ~1.1 GB Kineto JSON trace (default: tiled, under benchmarks/out/)")
    parser.add_argument("--skip-big", action="store_true")
    parser.add_argument("--skip-big-analyze", action="store_true")
    parser.add_argument("--workers-only", action="store_true", help="only the big trace's 1 vs 2 workers (interleaved)")
    parser.add_argument("--no-hta", action="store_true")
    parser.add_argument("--hta-big", action="store_true", help="HTA on the big trace too (~20 min and ~8 GB on a busy 2-core machine)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--crossover", action="store_true",
                        help="only: parse + link with 1 and 2 workers (parallel forced) on 20, 55 and 150 MB tiled traces")
    parser.add_argument("--hta-python", default=HTA_PYTHON)
    parser.add_argument("--hta-path", default=HTA_PATH)
    args = parser.parse_args()

    out = HERE / "out"
    out.mkdir(exist_ok=True)
    env = tracekit_env()
    hta_env = None
    if not args.no_hta and os.path.exists(args.hta_python):
        hta_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        if args.hta_path and os.path.isdir(args.hta_path):
            hta_env["PYTHONPATH"] = args.hta_path
    print(f"cores: {os.cpu_count()}  load average now: {os.getloadavg()}")

    if args.crossover:
        for mb in (20, 55, 150):
            path = ensure(out / f"tiled_{mb}MB.json", mb * 1e6)
            for _ in range(args.repeat):
                for n in (1, 2):
                    r = run([sys.executable, "-c", _LOAD, str(path), str(n), "0"], env)
                    print(f"{mb:4d} MB workers={n}: wall {r['load_s']:.2f} s  cpu main {r['main_cpu_s']:.2f} s + workers "
                          f"{r['workers_cpu_s']:.2f} s, critical path {r['critical_cpu_s']:.2f} s  load {r['load_avg']:.2f}", flush=True)
        return
    results = {}
    if not args.workers_only:
        mid = pathlib.Path(args.mid) if args.mid else ensure(out / "tiled_55MB.json", 55e6)
        results["mid"] = bench_trace("mid", mid, args, env, hta_env, [])
        print("  import time per command (python -X importtime, top-level cumulative):")
        for cmd in ("info", "analyze"):
            imp = import_total(cmd, str(mid), env)
            results["mid"][f"import_{cmd}"] = imp
            print(f"    tracekit {cmd:<8} {imp['import_s']:.2f} s   heavy modules loaded: {', '.join(imp['imports'])}")
    if not args.skip_big:
        big = pathlib.Path(args.big) if args.big else ensure(out / "tiled_1100MB.json", 1.1e9)
        results["big"] = bench_trace("big", big, args, env, hta_env, [1, 2])
    (out / "bench_speed.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
