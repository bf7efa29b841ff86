"""Start-up budget per command (issue 41): what `python -X importtime -m tracekit CMD TRACE`
spends importing, against a budget per command (info <= 0.25 s, analyze <= 0.35 s).

    python benchmarks/import_budget.py [--repeat 5] [--trace PATH]

Each command runs `repeat` times in a fresh interpreter with this checkout first on the path
and its bytecode compiled (bench_speed.tracekit_env: an installed package has its bytecode).
The import time of a run is the sum of the cumulative times of the top-level imports (those
the interpreter starts itself and those tracekit asks for); the min over the runs is
reported (imports only get slower under load), with the packages whose modules took longest (their own
time, children apart) in the fastest run. A benchmark, not a test: timings on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_speed import tracekit_env  # noqa: E402

BUDGET_S = {"info": 0.25, "analyze": 0.35}
DEFAULT_TRACE = pathlib.Path(__file__).resolve().parents[2] / "shared/fixtures/torch/h100_bert_small_hf_inference.json.gz"
LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def imports(command: str, trace: str, env: dict) -> tuple[float, dict[str, float], int]:
    """(seconds importing, top-level package -> seconds, modules imported) of one run."""
    run = subprocess.run([sys.executable, "-X", "importtime", "-m", "tracekit", command, trace],
                         env=env, capture_output=True, text=True)
    total, packages, modules = 0.0, {}, 0
    for line in run.stderr.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        modules += 1
        if len(m.group(3)) == 1:  # a top-level import: its cumulative time holds its children's
            total += int(m.group(2)) / 1e6
        top = m.group(4).split(".")[0]  # each module's own time, to the package it belongs to
        packages[top] = packages.get(top, 0.0) + int(m.group(1)) / 1e6
    return total, packages, modules


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--trace", default=str(DEFAULT_TRACE))
    args = parser.parse_args()
    env = tracekit_env()
    over = False
    for command, budget in BUDGET_S.items():
        runs = [imports(command, args.trace, env) for _ in range(args.repeat)]
        total, packages, modules = min(runs)
        heaviest = ", ".join(f"{name} {s * 1e3:.0f} ms" for name, s in sorted(packages.items(), key=lambda p: -p[1])[:6])
        verdict = "within" if total <= budget else "OVER"
        over |= total > budget
        print(f"{command}: imports {total:.3f} s (min of {args.repeat}; budget {budget:.2f} s: {verdict}), "
              f"{modules} modules; heaviest: {heaviest}")
    sys.exit(1 if over else 0)


if __name__ == "__main__":
    main()
