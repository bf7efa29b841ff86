"""Seeded fuzzing of a run's edges (issue 39; the cases: tests/fuzz_edges.py): output paths
(device nodes made with mknod in a private directory, FIFOs, sockets, symlinks, a deleted
working directory), closed and full streams, process limits (open files, processes, address
space, CPU time), inputs that change while read, and option values, each with a random
SIGINT / SIGTERM now and then.

    python benchmarks/fuzz_edges.py --seed 1 --cases 1500 --jobs 2 [--log edges.jsonl]

Run it as root and as a normal user (`runuser -u USER -- python benchmarks/fuzz_edges.py ...`;
as root the device nodes are private ones made with mknod, as a user /dev/null and
/dev/full are written through). Prints the runs, the exit codes, the hangs and every
problem with the first examples of each.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

import fuzz_edges  # noqa: E402


def one(seed: int, work: str) -> dict:
    case = fuzz_edges.make_case(seed, work)
    try:
        return fuzz_edges.run_case(case)
    finally:
        fuzz_edges.cleanup(case)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cases", type=int, default=1500)
    parser.add_argument("--jobs", type=int, default=2, help="cases run side by side")
    parser.add_argument("--log", help="one JSON line per case")
    args = parser.parse_args()
    started = time.time()
    codes: collections.Counter = collections.Counter()
    problems: collections.Counter = collections.Counter()
    examples: dict[str, list[str]] = collections.defaultdict(list)
    log = open(args.log, "w") if args.log else None
    with tempfile.TemporaryDirectory(prefix="tracekit-edges-") as work, ThreadPoolExecutor(args.jobs) as pool:
        os.chmod(work, 0o755)
        for i, result in enumerate(pool.map(lambda s: one(s, work), range(args.seed, args.seed + args.cases))):
            codes[result["code"]] += 1
            for problem in result["problems"]:
                key = problem.split(":")[0].split(" [")[0] if not problem.startswith("exit ") else problem
                problems[key] += 1
                if len(examples[key]) < 3:
                    examples[key].append(f"seed {result['seed']} {result['labels']}: {result.get('stderr', '')[-200:]!r}")
            if log:
                log.write(json.dumps(result) + "\n")
                log.flush()
            if (i + 1) % 100 == 0:
                print(f"{i + 1} cases, {time.time() - started:.0f} s, codes {dict(codes)}, problems {dict(problems)}", flush=True)
    user = "root" if os.geteuid() == 0 else f"uid {os.geteuid()}"
    print(f"\nas {user}: {args.cases} runs in {time.time() - started:.0f} s; exit codes {dict(sorted(codes.items(), key=str))}; "
          f"hangs {problems.get('hang', 0)}; problems {dict(problems) or 'none'}")
    for key, lines in examples.items():
        print(f"  {key}:")
        for line in lines:
            print(f"    {line}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
