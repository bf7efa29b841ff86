"""The analysis stage of `tracekit analyze`, apart from parsing: build() and the table rendering.

    python benchmarks/bench_analysis.py [PATH] [--repeat 5] [--stages] [--process 3]

PATH defaults to a ~55 MB plain-JSON trace tiled from the shared Qwen fixture (built once
under benchmarks/out/). The trace is loaded once; then, in the same process:

  build    tracekit.analysis.pipeline.build (costs, attribution, steps, roofline, tables, findings),
           the first call and the median of --repeat more
  render   the terminal tables (120 columns, plain, to memory), first call and median
  stages   (--stages) median milliseconds of each stage build() calls

and, with --process N, the median wall time of N fresh `python -m tracekit analyze PATH`
processes (tables to /dev/null): what a user waits for, parsing and imports included.
Targets (issue 14): build <= 0.15 s, render <= 0.04 s, whole process <= 0.75 s on ~55 MB.
The load average is printed: on a shared 2-core machine it says how far to trust a figure.
"""

from __future__ import annotations

import argparse
import functools
import io
import os
import pathlib
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
SOURCE = HERE.parent.parent / "shared" / "fixtures" / "torch" / "h100_qwen1.5-0.5b_hf_inference.json.gz"
STAGES = {  # module -> functions build() calls, timed one by one with --stages
    "tracekit.analysis.pipeline": ["kernel_costs", "attribute", "kernel_steps", "exclusive_time", "roofline", "ops_table", "device_time",
                                "step_table", "coverage", "block_table", "kernel_summary", "collective_table", "collective_summary",
                                "overlap_table", "compute_findings"],
}


def default_trace() -> pathlib.Path:
    out = HERE / "out" / "tiled_55MB.json"
    if not out.exists():
        sys.path.insert(0, str(HERE))
        from tile_kineto import tile

        out.parent.mkdir(exist_ok=True)
        tile(str(SOURCE), str(out), 55e6, compress=False)
    return out


def _timed(fn, repeat: int) -> tuple[float, float, object]:
    """(first call, median of `repeat` more, last result)."""
    t = time.perf_counter()
    result = fn()
    first = time.perf_counter() - t
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return first, statistics.median(times) if times else first, result


def _wrap_stages(acc: dict[str, list[float]]) -> None:
    import importlib

    for module_name, names in STAGES.items():
        module = importlib.import_module(module_name)
        for name in names:
            fn = getattr(module, name)

            @functools.wraps(fn)
            def timed(*args, _fn=fn, _name=name, **kwargs):
                t = time.perf_counter()
                try:
                    return _fn(*args, **kwargs)
                finally:
                    acc.setdefault(_name, []).append(time.perf_counter() - t)

            setattr(module, name, timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--stages", action="store_true")
    parser.add_argument("--process", type=int, default=0, metavar="N")
    args = parser.parse_args()
    path = pathlib.Path(args.path) if args.path else default_trace()

    import tracekit.api as api
    from tracekit.analysis.load import gc_paused
    from rich.console import Console

    from tracekit.analysis import build
    from tracekit.attribution import load_rules
    from tracekit.hardware import DEFAULT_SUSTAINED, resolve
    from tracekit.reports.analyze import render_console

    print(f"{path} ({path.stat().st_size / 1e6:.1f} MB), load average {os.getloadavg()[0]:.2f}")
    t = time.perf_counter()
    trace = api.load(path)
    print(f"load (parse + link, not this benchmark's subject): {time.perf_counter() - t:.3f} s, {len(trace.kernels):,} GPU activities")
    device, _ = resolve(api.device_name(trace), None, None, source=str(path))
    rules = load_rules(None)
    acc: dict[str, list[float]] = {}
    if args.stages:
        _wrap_stages(acc)

    def run_build():
        with gc_paused():  # as api.analyze runs it
            return build(trace, device, DEFAULT_SUSTAINED, rules, None)

    first, median, analysis = _timed(run_build, args.repeat)
    print(f"build   first {first:.3f} s   median {median:.3f} s")
    if args.stages:
        for name, times in sorted(acc.items(), key=lambda kv: -statistics.median(kv[1])):
            print(f"    {name:18s} {1e3 * statistics.median(times):7.1f} ms")

    def run_render():
        console = Console(file=io.StringIO(), width=120, markup=False, emoji=False, highlight=False, soft_wrap=False)
        render_console(analysis, console, 15)

    first, median, _ = _timed(run_render, args.repeat)
    print(f"render  first {first:.3f} s   median {median:.3f} s")
    if args.process:
        walls = []
        for _ in range(args.process):
            t = time.perf_counter()
            # run from the checkout this process imported tracekit from (`-m` puts the cwd first on sys.path)
            subprocess.run([sys.executable, "-m", "tracekit", "analyze", str(path.resolve())], stdout=subprocess.DEVNULL, check=True,
                           cwd=pathlib.Path(api.__file__).resolve().parents[1])
            walls.append(time.perf_counter() - t)
        print(f"process `python -m tracekit analyze` median of {args.process}: {statistics.median(walls):.2f} s "
              f"({', '.join(f'{w:.2f}' for w in walls)}), load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
