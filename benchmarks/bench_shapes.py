"""tracekit `info` / `analyze` against HolisticTraceAnalysis 0.5.0's load on every trace shape.

    python benchmarks/bench_shapes.py [--repeat 3] [--min-mb 1] [--tile-dir /tmp/tracekit_tiles]
        [--mid-mb 55] [--big-mb 1000] [--skip-big] [--no-hta] [--no-hta-big] [--hta-big-max-gb 16] [--only SUBSTR]
        [--json OUT.json] [--baseline CHECKOUT]

One run covers:
  - every shared trace (../shared/fixtures) of --min-mb or more: Kineto JSON by the size of
    its JSON (a .json.gz inflated), Nsight SQLite exports by their file size (HTA reads no
    nsys export: "n/a");
  - tiled versions (tile_kineto.py, plain JSON, written to --tile-dir, never into the
    repository) at ~--mid-mb and ~--big-mb of three shapes: an LLM (Qwen1.5-0.5B inference),
    a vision model with Python frames (TimeSformer, the HF vision trace with the most
    python_function events) and a training step (A100 DDP with NCCL collectives).

Each figure is a fresh process timed from outside (bench_speed.run: exact wall time, peak
memory of the process tree as PSS); tracekit's figures are whole processes (interpreter,
imports, parse, analysis, tables to /dev/null). HTA is given two ways: its load,
`TraceAnalysis(trace_dir=...)` alone inside its own process (its imports excluded: the
conservative ratio of issue 18), and its whole process (interpreter, `import hta`, load:
whole process against whole process, issue 32's target). CPU ratios (user + system time of
each process tree) are given beside the wall-time ones: on a machine shared with other work
the wall time says as much about the neighbours as about either tool.
Runs of one trace are interleaved (HTA, info, analyze, HTA, ...) so they share the same
neighbours on a busy machine. --baseline CHECKOUT (a tree of an earlier commit, e.g. `git
archive BASE | tar -x -C DIR`, with ../shared beside it) times that checkout's analyze in the
same rounds: before and after under the same load. The table gives each figure's CPU seconds
(user + system of the process tree) beside its wall time: load inflates them less. Medians of --repeat runs; the ~1 GB traces run once, with
`--workers 2`, and HTA loads each at most once, skipped (with the reason) when its memory,
extrapolated from the ~55 MB tile of the same shape, would not fit in MemAvailable.

Targets (issue 18): analyze >= 5x HTA's load on every trace (median >= 6x), info >= 8x,
the ~1 GB traces >= 150 MB/s with two workers and peak memory <= 2x the file. Issue 32:
analyze >= 5x HTA whole process against whole process, on every trace >= 1 MB and the 55 MB
tiles. Results: benchmarks/bench_shapes_results.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import pathlib
import statistics
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
SHARED = REPO.parent / "shared" / "fixtures"
sys.path.insert(0, str(HERE))

from bench_speed import HTA_PATH, HTA_PYTHON, run, tracekit_env  # noqa: E402

SHAPES = {  # label -> shared fixture tiled
    "llm": "torch/h100_qwen1.5-0.5b_hf_inference.json.gz",
    "vision+py": "torch/h100_timesformer_hf_inference.json.gz",
    "training": "torch/a100_ddp_nccl_rank0.json.gz",
}

_HTA_LOAD = """
import json, logging, sys, time
logging.disable(logging.WARNING)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1, c1 = time.perf_counter(), time.process_time()
analysis = TraceAnalysis(trace_dir=sys.argv[1])
t2, c2 = time.perf_counter(), time.process_time()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "load_cpu_s": c2 - c1, "events": len(analysis.t.get_trace(0))}))
"""


def json_bytes(path: pathlib.Path) -> int:
    if path.suffix != ".gz":
        return path.stat().st_size
    n = 0
    with gzip.open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            n += len(chunk)
    return n


def mem_available() -> int:
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))


def shared_traces(min_bytes: float) -> list[dict]:
    cases = []
    for p in sorted((SHARED / "torch").rglob("*.json.gz")):
        size = json_bytes(p)
        if size >= min_bytes:
            cases.append({"name": str(p.relative_to(SHARED)), "path": p, "bytes": size, "kind": "shared", "hta": True})
    for p in sorted((SHARED / "nsys").glob("*.sqlite")):
        size = p.stat().st_size
        if size >= min_bytes:
            cases.append({"name": str(p.relative_to(SHARED)), "path": p, "bytes": size, "kind": "shared nsys", "hta": False})
    return cases


def tiled(shape: str, mb: float, tile_dir: pathlib.Path) -> dict:
    from tile_kineto import tile

    path = tile_dir / f"{shape.replace('+', '_')}_{mb:g}MB.json"
    if not path.exists():
        tmp = path.with_suffix(".part")
        copies = tile(str(SHARED / SHAPES[shape]), str(tmp), mb * 1e6, compress=False, nearest=True)
        tmp.rename(path)
        print(f"tiled {path} ({copies} copies of {SHAPES[shape]})", flush=True)
    return {"name": f"{shape} tiled ~{mb:g} MB", "path": path, "bytes": path.stat().st_size, "kind": f"tile {mb:g}", "shape": shape,
            "hta": True}


def hta_load(case: dict, args, hta_env: dict) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_shapes_hta_") as trace_dir:
        os.symlink(case["path"], os.path.join(trace_dir, case["path"].name))
        return run([args.hta_python, "-c", _HTA_LOAD, trace_dir], hta_env)


def bench(case: dict, repeat: int, args, env: dict, hta_env: dict | None, hta_skip: str | None, workers: list[str],
          base_env: dict | None = None) -> dict:
    mb = case["bytes"] / 1e6
    print(f"\n== {case['name']} ({mb:,.1f} MB of trace, {case['path'].stat().st_size / 1e6:,.1f} MB on disk)", flush=True)
    tk = [sys.executable, "-m", "tracekit"]
    res: dict = {"hta": [], "info": [], "analyze": [], "base_analyze": []}
    for i in range(repeat):
        if case["hta"] and hta_env is not None and not hta_skip and (i == 0 or not case["kind"].startswith("tile") or
                                                                      case["bytes"] < 5e8):
            r = hta_load(case, args, hta_env)
            res["hta"].append(r)
            print(f"  HTA load        {r['load_s']:8.2f} s  (process {r['wall_s']:.2f} s, peak RSS {r['peak_rss_mb']:,.0f} MB)  "
                  f"load avg {r['load_avg']:.2f}", flush=True)
        for cmd, cmd_env in (("info", env), ("analyze", env), ("base_analyze", base_env)):
            if cmd_env is None:
                continue
            r = run(tk + [cmd.removeprefix("base_"), *workers, str(case["path"])], cmd_env)
            res[cmd].append(r)
            print(f"  tracekit {cmd:<12}{r['wall_s']:8.2f} s  cpu {r['cpu_s']:6.2f} s  {mb / r['wall_s']:6.0f} MB/s  "
                  f"peak PSS {r['peak_pss_mb']:,.0f} MB ({r['peak_pss_mb'] / mb:.2f}x)  load avg {r['load_avg']:.2f}", flush=True)
    row = {"name": case["name"], "kind": case["kind"], "mb": mb, "disk_mb": case["path"].stat().st_size / 1e6, "runs": res,
           "hta_note": hta_skip or ("" if case["hta"] else "n/a (nsys)")}
    for cmd in ("info", "analyze"):
        row[f"{cmd}_s"] = statistics.median(r["wall_s"] for r in res[cmd])
        row[f"{cmd}_pss_mb"] = max(r["peak_pss_mb"] for r in res[cmd])
        row[f"{cmd}_cpu_s"] = statistics.median(r["cpu_s"] for r in res[cmd])
    row["hta_s"] = statistics.median(r["load_s"] for r in res["hta"]) if res["hta"] else None
    row["hta_proc_s"] = statistics.median(r["wall_s"] for r in res["hta"]) if res["hta"] else None
    row["hta_proc_cpu_s"] = statistics.median(r["cpu_s"] for r in res["hta"]) if res["hta"] else None
    row["hta_cpu_s"] = statistics.median(r["load_cpu_s"] for r in res["hta"]) if res["hta"] else None
    row["hta_rss_mb"] = max(r["peak_rss_mb"] for r in res["hta"]) if res["hta"] else None
    row["base_analyze_s"] = statistics.median(r["wall_s"] for r in res["base_analyze"]) if res["base_analyze"] else None
    row["base_analyze_cpu_s"] = statistics.median(r["cpu_s"] for r in res["base_analyze"]) if res["base_analyze"] else None
    row["load_avg"] = statistics.median(r["load_avg"] for cmd in res for r in res[cmd])
    row["load_range"] = (min(r["load_avg"] for cmd in res for r in res[cmd]), max(r["load_avg"] for cmd in res for r in res[cmd]))
    return row


def table(rows: list[dict]) -> str:
    head = ("| trace | MB (disk) | HTA load s | HTA process s | info s | info MB/s | info × | analyze s | analyze MB/s | analyze × | "
            "analyze × process | × by CPU (info, analyze; analyze process) | peak PSS MB (×file) | load avg |")
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        hta, proc = r["hta_s"], r.get("hta_proc_s")
        ratio = (lambda cmd: f"{hta / r[cmd + '_s']:.1f}") if hta else (lambda cmd: "n/a")
        whole = f"{proc / r['analyze_s']:.1f}" if proc else "n/a"
        pss = max(r["info_pss_mb"], r["analyze_pss_mb"])
        cpu = (f"{r['hta_cpu_s'] / r['info_cpu_s']:.1f}, {r['hta_cpu_s'] / r['analyze_cpu_s']:.1f}; "
               f"{r['hta_proc_cpu_s'] / r['analyze_cpu_s']:.1f}" if hta else "n/a")
        out.append(f"| {r['name']} | {r['mb']:,.1f} ({r['disk_mb']:,.1f}) | {f'{hta:.2f}' if hta else (r['hta_note'] or 'n/a')} | "
                   f"{f'{proc:.2f}' if proc else 'n/a'} | "
                   f"{r['info_s']:.2f} | {r['mb'] / r['info_s']:.0f} | {ratio('info')} | {r['analyze_s']:.2f} | "
                   f"{r['mb'] / r['analyze_s']:.0f} | {ratio('analyze')} | {whole} | "
                   f"{cpu} | {pss:,.0f} ({pss / r['disk_mb']:.2f}) | {r['load_avg']:.2f} |")
    return "\n".join(out)


def process_table(rows: list[dict]) -> str:
    """Issue 41's figures: whole process against whole process, wall and CPU seconds (user +
    system of each process tree), the baseline's analyze beside this checkout's."""
    head = ("| trace | MB | HTA process s (CPU) | info s (CPU) | info × (CPU ×) | analyze s (CPU) | analyze × (CPU ×) | "
            "before: analyze s (CPU) | before × (CPU ×) | load avg median (min-max) |")
    out = [head, "|" + "---|" * (head.count("|") - 1)]

    def ratio(hta: float | None, tool: float | None) -> str:
        return f"{hta / tool:.1f}" if hta and tool else "n/a"

    for r in rows:
        hta, hta_cpu = r.get("hta_proc_s"), r.get("hta_proc_cpu_s")
        base, base_cpu = r.get("base_analyze_s"), r.get("base_analyze_cpu_s")
        lo, hi = r.get("load_range", (r["load_avg"], r["load_avg"]))
        out.append(f"| {r['name']} | {r['mb']:,.1f} | " + (f"{hta:.2f} ({hta_cpu:.2f})" if hta else r["hta_note"] or "n/a") + " | "
                   f"{r['info_s']:.2f} ({r['info_cpu_s']:.2f}) | {ratio(hta, r['info_s'])} ({ratio(hta_cpu, r['info_cpu_s'])}) | "
                   f"{r['analyze_s']:.2f} ({r['analyze_cpu_s']:.2f}) | {ratio(hta, r['analyze_s'])} ({ratio(hta_cpu, r['analyze_cpu_s'])}) | "
                   + (f"{base:.2f} ({base_cpu:.2f}) | {ratio(hta, base)} ({ratio(hta_cpu, base_cpu)})" if base else "n/a | n/a")
                   + f" | {r['load_avg']:.2f} ({lo:.2f}-{hi:.2f}) |")
    return "\n".join(out)


def issue41_verdicts(rows: list[dict]) -> str:
    """Issue 41's checks: analyze >= 4x HTA's whole process on the ~55 MB tiles and >= 3x on
    every shared trace of 1 MB or more; info >= 8x. Wall (and CPU) medians."""
    lines = []
    for label, group, need in (("~55 MB tiles", [r for r in rows if r["kind"].startswith("tile") and r["mb"] < 500], 4.0),
                               ("shared traces", [r for r in rows if r["kind"] == "shared"], 3.0)):
        group = [r for r in group if r.get("hta_proc_s")]
        if not group:
            continue
        wall = {r["name"]: r["hta_proc_s"] / r["analyze_s"] for r in group}
        cpu = {r["name"]: r["hta_proc_cpu_s"] / r["analyze_cpu_s"] for r in group}
        info = {r["name"]: r["hta_proc_s"] / r["info_s"] for r in group}
        worst = min(wall, key=wall.get)
        lines += [f"analyze >= {need:g}x HTA's whole process on the {label}: {'yes' if min(wall.values()) >= need else 'NO'} "
                  f"(min {wall[worst]:.1f}x on {worst}; {sum(x < need for x in wall.values())} of {len(wall)} below; median "
                  f"{statistics.median(wall.values()):.1f}x; by CPU min {min(cpu.values()):.1f}x, median {statistics.median(cpu.values()):.1f}x)",
                  f"info >= 8x HTA's whole process on the {label}: {'yes' if min(info.values()) >= 8 else 'NO'} "
                  f"(min {min(info.values()):.1f}x; {sum(x < 8 for x in info.values())} of {len(info)} below; median "
                  f"{statistics.median(info.values()):.1f}x)"]
    return "\n".join("- " + x for x in lines)


def verdicts(rows: list[dict], title: str) -> str:
    with_hta = [r for r in rows if r["hta_s"]]
    a = [r["hta_s"] / r["analyze_s"] for r in with_hta]
    i = [r["hta_s"] / r["info_s"] for r in with_hta]
    lines = [f"{title}: {len(with_hta)} traces with HTA of {len(rows)}"]
    if a:
        worst_a = min(with_hta, key=lambda r: r["hta_s"] / r["analyze_s"])
        worst_i = min(with_hta, key=lambda r: r["hta_s"] / r["info_s"])
        w = [r["hta_proc_s"] / r["analyze_s"] for r in with_hta]
        wc = [r["hta_proc_cpu_s"] / r["analyze_cpu_s"] for r in with_hta]
        worst_w = min(with_hta, key=lambda r: r["hta_proc_s"] / r["analyze_s"])
        lines += [
            f"analyze >= 5x on every trace: {'yes' if min(a) >= 5 else 'NO'} (min {min(a):.1f}x on {worst_a['name']}; "
            f"{sum(x < 5 for x in a)} below 5x)",
            f"analyze median >= 6x: {'yes' if statistics.median(a) >= 6 else 'NO'} (median {statistics.median(a):.1f}x)",
            f"analyze >= 5x HTA whole process on every trace (issue 32): {'yes' if min(w) >= 5 else 'NO'} (min {min(w):.1f}x on "
            f"{worst_w['name']}; {sum(x < 5 for x in w)} below 5x; median {statistics.median(w):.1f}x; by CPU: min {min(wc):.1f}x, "
            f"median {statistics.median(wc):.1f}x)",
            f"info >= 8x on every trace: {'yes' if min(i) >= 8 else 'NO'} (min {min(i):.1f}x on {worst_i['name']}; "
            f"{sum(x < 8 for x in i)} below 8x; median {statistics.median(i):.1f}x)",
        ]
    for r in rows:
        if r["kind"].startswith("tile") and r["mb"] >= 500:
            worst = min(r["mb"] / r["info_s"], r["mb"] / r["analyze_s"])
            pss = max(r["info_pss_mb"], r["analyze_pss_mb"]) / r["disk_mb"]
            lines.append(f"{r['name']}: {r['mb'] / r['info_s']:.0f} MB/s info, {r['mb'] / r['analyze_s']:.0f} MB/s analyze "
                         f"(>= 150: {'yes' if worst >= 150 else 'NO'}); peak {pss:.2f}x file (<= 2: {'yes' if pss <= 2 else 'NO'})")
    return "\n".join(("- " if n else "") + x for n, x in enumerate(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3, help="runs per trace (median); the ~1 GB ones run once")
    parser.add_argument("--min-mb", type=float, default=1.0, help="shared traces of this size or more")
    parser.add_argument("--tile-dir", default="/tmp/tracekit_tiles")
    parser.add_argument("--mid-mb", type=float, default=55)
    parser.add_argument("--big-mb", type=float, default=1000)
    parser.add_argument("--skip-big", action="store_true")
    parser.add_argument("--skip-shared", action="store_true")
    parser.add_argument("--only", help="only the traces whose name holds this")
    parser.add_argument("--no-hta", action="store_true")
    parser.add_argument("--no-hta-big", action="store_true", help="HTA on the shared traces and ~55 MB tiles only")
    parser.add_argument("--hta-big-max-gb", type=float, default=16.0, help="skip HTA on a ~1 GB trace above this estimate")
    parser.add_argument("--hta-python", default=HTA_PYTHON)
    parser.add_argument("--hta-path", default=HTA_PATH)
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--baseline", help="another tracekit checkout whose analyze is timed in the same rounds (before / after)")
    args = parser.parse_args()

    env = tracekit_env()  # bytecode compiled once, as installed
    base_env = tracekit_env(pathlib.Path(args.baseline).resolve()) if args.baseline else None
    hta_env = None
    if not args.no_hta and os.path.exists(args.hta_python):
        hta_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        if args.hta_path and os.path.isdir(args.hta_path):
            hta_env["PYTHONPATH"] = args.hta_path
    tile_dir = pathlib.Path(args.tile_dir)
    tile_dir.mkdir(parents=True, exist_ok=True)
    print(f"cores: {os.cpu_count()}  MemAvailable {mem_available() / 2**30:.1f} GiB  load average {os.getloadavg()}", flush=True)

    cases = [] if args.skip_shared else shared_traces(args.min_mb * 1e6)
    cases += [tiled(s, args.mid_mb, tile_dir) for s in SHAPES]
    if not args.skip_big:
        cases += [tiled(s, args.big_mb, tile_dir) for s in SHAPES]
    if args.only:
        cases = [c for c in cases if args.only in c["name"]]
    rows: list[dict] = []
    for case in cases:
        big = case["kind"] == f"tile {args.big_mb:g}"
        skip = "not run (--no-hta-big)" if big and args.no_hta_big else None
        if big and hta_env is not None and not skip:
            mid = next((r for r in rows if r["kind"] == f"tile {args.mid_mb:g}" and r["name"].startswith(case["shape"] + " ")), None)
            if mid and mid["hta_rss_mb"]:
                need = mid["hta_rss_mb"] * 1e6 * case["bytes"] / (mid["mb"] * 1e6) * 1.2
                avail = mem_available()
                if need > min(avail - 2**30, args.hta_big_max_gb * 1e9):
                    skip = f"skipped: ~{need / 1e9:.0f} GB needed, {avail / 1e9:.0f} GB available"
        row = bench(case, 1 if big else args.repeat, args, env, hta_env, skip, ["--workers", "2"] if big else [], base_env)
        rows.append(row)
    on_disk = [r for r in rows if r["disk_mb"] >= args.min_mb]
    print("\n" + table(rows) + "\n\n" + verdicts(rows, f"every trace of {args.min_mb:g} MB of JSON or more") + "\n\n"
          + verdicts(on_disk, f"traces of {args.min_mb:g} MB or more on disk (tiles included)") + "\n\n"
          + "Whole process against whole process (issue 41), wall s (CPU s):\n\n" + process_table(rows) + "\n\n"
          + issue41_verdicts(rows), flush=True)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
