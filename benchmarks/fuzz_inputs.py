"""Seeded mutation fuzzing of tracekit's inputs (the cases: tests/fuzz_cases.py).

    python benchmarks/fuzz_inputs.py --seed 1 --cases 2000 [--log fuzz.jsonl] [--kinds traces|files|all]

Each case is a mutated Kineto trace or Nsight Systems export (from small real fixtures)
run through `info --format json`, `analyze --format json` and `analyze`. Cases run one at
a time in one worker process (restarted when a case exceeds its time: a hang counts as a
failure, it does not stop the run). Prints the counts of each kind of failure:
exit-1 results, exit 2 without exactly one stderr line, invalid JSON, raw control
characters on stdout, cases over the time bound, inputs modified; and the slowest case.

`--kinds files` (issue 22) mutates the other files a user hands tracekit (tests/fuzz_files.py):
--device-file, --rules and check --expect TOML, stored summary.json files, a rank of
another job, and HF config.json files for --model (sizes huge, zero, negative, fractional,
strings, booleans; deep nesting; quantization_config variants; text_config nesting;
layer_types of the wrong length), through `devices`, `analyze`, `export`, `check`, `diff`,
multi-rank `analyze`, `calibrate` and `project`; `--kinds model` runs only the model-config
cases; `--kinds all` alternates traces and files.

`--kinds pathologies` (issue 29) gives real traces the ways profilers fail
(tests/fuzz_pathologies.py): lost (zero) kernel times, kernels before their launch, a GPU
clock offset, duplicated correlation ids, orphan activities, missing ProfilerStep or
deviceProperties, stream overlaps, negative durations, an event cap, a file cut short;
run through `analyze --format json` and `analyze`.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

import fuzz_cases  # noqa: E402
import fuzz_files  # noqa: E402
import fuzz_pathologies  # noqa: E402

_PROBLEM_KEYS = {"exit": "exit", "traceback": "exit", "exit 2 without one error line": "stderr", "invalid JSON": "json",
                 "python warning": "warning"}


def files_case(seed: int, work: str, time_bound: float, kinds: tuple[str, ...] = fuzz_files.KINDS) -> dict:
    """One tests/fuzz_files.py case in the shape of a fuzz_cases result."""
    started = time.time()
    result = fuzz_files.run_case(seed, work, kinds)
    problems: dict[str, str] = {}
    for run in result["results"]:
        for problem in run["problems"]:
            key = _PROBLEM_KEYS.get(problem.split(" ")[0] if problem.startswith("exit ") and problem != "exit 2 without one error line" else problem, "exit")
            problems.setdefault(key, f"{' '.join(map(str, run['argv']))}: {problem}: {run['error']}")
    seconds = time.time() - started
    if seconds > time_bound * max(1, len(result["results"])):
        problems["time"] = f"{seconds:.1f} s"
    return {"seed": seed, "kind": "files:" + result["kind"], "mutations": result["mutations"],
            "runs": [{"command": " ".join(map(str, r["argv"])), "seconds": seconds / max(1, len(result["results"]))} for r in result["results"]],
            "problems": problems}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=1, help="first case's seed; case i uses seed + i")
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--time-bound", type=float, default=10.0, help="seconds one command may take")
    parser.add_argument("--log", help="write one JSON line per case here")
    parser.add_argument("--kinds", choices=("traces", "files", "model", "pathologies", "all"), default="traces",
                        help="model: only the model-config cases of `files`; pathologies: the ways profilers fail "
                             "(tests/fuzz_pathologies.py)")
    args = parser.parse_args()

    counts: collections.Counter[str] = collections.Counter()
    kinds: collections.Counter[str] = collections.Counter()
    examples: dict[str, list[str]] = collections.defaultdict(list)
    slowest = (0.0, None)
    log = open(args.log, "w") if args.log else None
    ctx = multiprocessing.get_context("fork")
    pool = ctx.Pool(1, maxtasksperchild=100)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="tracekit-fuzz-") as work:
        for i in range(args.cases):
            seed = args.seed + i
            files = args.kinds in ("files", "model") or (args.kinds == "all" and i % 2)
            case_kinds = ("model",) if args.kinds == "model" else fuzz_files.KINDS
            if args.kinds == "pathologies":
                job = pool.apply_async(fuzz_pathologies.run_case, (seed, work, args.time_bound))
            elif files:
                job = pool.apply_async(files_case, (seed, work, args.time_bound, case_kinds))
            else:
                job = pool.apply_async(fuzz_cases.run_case, (seed, work, args.time_bound))
            try:
                result = job.get(timeout=args.time_bound * len(fuzz_cases.COMMANDS) + 30)
            except multiprocessing.TimeoutError:
                pool.terminate()
                pool = ctx.Pool(1, maxtasksperchild=100)
                result = {"seed": seed, "kind": "?", "mutations": [], "runs": [], "problems": {"time": "hung: killed"}}
            except Exception as exc:  # the harness failed to build the case: say so, go on
                result = {"seed": seed, "kind": "?", "mutations": [], "runs": [], "problems": {"harness": f"{type(exc).__name__}: {exc}"}}
            kinds[result["kind"]] += 1
            for run in result["runs"]:
                if run["seconds"] > slowest[0]:
                    slowest = (run["seconds"], f"seed {seed} {run['command']}")
            for check, detail in result["problems"].items():
                counts[check] += 1
                if len(examples[check]) < 5:
                    examples[check].append(f"seed {seed} [{'; '.join(result['mutations'])[:160]}]: {detail[:240]}")
            if log:
                log.write(json.dumps(result) + "\n")
            if (i + 1) % 100 == 0:
                print(f"{i + 1} cases, {time.time() - started:.0f} s, failures so far: {dict(counts)}", file=sys.stderr, flush=True)
    pool.terminate()
    print(f"cases: {args.cases} ({dict(kinds)}), seeds {args.seed}..{args.seed + args.cases - 1}, {time.time() - started:.0f} s")
    for check, label in (("exit", "exit-1 (or other non-0/2) results"), ("exit-markup", "exit-1 from rich markup in trace strings (terminal escaping, issue 12)"), ("stderr", "exit 2 without exactly one stderr line"),
                         ("json", "invalid JSON outputs"), ("control", "cases with raw control characters on stdout"),
                         ("warning", "cases with a raw Python warning on stderr (files kinds)"),
                         ("time", f"cases over {args.time_bound:.0f} s"), ("input", "inputs modified / files beside them"),
                         ("harness", "cases the harness failed to build")):
        print(f"{label}: {counts.get(check, 0)}")
        for example in examples.get(check, []):
            print(f"    {example}")
    print(f"slowest command: {slowest[0]:.2f} s ({slowest[1]})")
    return 0 if not counts else 1


if __name__ == "__main__":
    sys.exit(main())
