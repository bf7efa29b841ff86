"""The hostile-user audit's classes as a seeded fuzz (issue 49; the cases: tests/fuzz_hostile.py).

    python benchmarks/fuzz_hostile.py --cases 1000 [--seed 0] [--kinds injection,links] [--log hostile.jsonl]
    runuser -u nobody -- .venv/bin/python benchmarks/fuzz_hostile.py --cases 300 --work /tmp/fuzz-nobody   # as a normal user

Each case runs the command in this process (tests/helpers.run_cli), so a thousand take
minutes. Prints the cases per kind, the failing ones with their first problem, and exits 1
when any case failed.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

import fuzz_hostile  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kinds", default=",".join(fuzz_hostile.KINDS))
    ap.add_argument("--work", help="a directory for the cases (default: a new temporary one)")
    ap.add_argument("--log", help="one JSON line per case")
    args = ap.parse_args()
    kinds = tuple(k for k in args.kinds.split(",") if k)
    work = args.work or tempfile.mkdtemp(prefix="tracekit-hostile-")
    os.makedirs(work, exist_ok=True)
    counts, failed = collections.Counter(), []
    log = open(args.log, "w", encoding="utf-8") if args.log else None
    started = time.time()
    for seed in range(args.seed, args.seed + args.cases):
        result = fuzz_hostile.case(seed, work, kinds)
        counts[result["kind"]] += 1
        if result["problems"]:
            failed.append(result)
        if log:
            log.write(json.dumps(result) + "\n")
    print(f"{args.cases} cases as uid {os.geteuid()} in {time.time() - started:.0f} s: "
          + ", ".join(f"{k} {n}" for k, n in sorted(counts.items())) + f"; failed: {len(failed)}")
    for result in failed[:20]:
        print(f"  seed {result['seed']} ({result['kind']}): {result['problems'][0][:300]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
