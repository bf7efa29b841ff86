"""Several ranks of one job, analysed with one worker and with several: the parallel speedup.

    python benchmarks/bench_multirank.py [--source FIXTURE] [--ranks 8] [--mb-per-rank 100] [--workers 1 2]

Builds --ranks traces (tiling a real one to --mb-per-rank, each with its own rank in
distributedInfo) under benchmarks/out/ranks/, then times `tracekit.ranks.analyze_ranks`
with each worker count in a fresh process.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
DEFAULT_SOURCE = HERE.parent.parent / "shared" / "fixtures" / "torch" / "mi300x_resnet_act_checkpoint_rank0.json.gz"

_CHILD = """
import json, sys, time
t = time.perf_counter()
from tracekit.ranks.executor import analyze_ranks
m = analyze_ranks([sys.argv[1]], workers=int(sys.argv[2]))
print(json.dumps({"seconds": time.perf_counter() - t, "ranks": len(m.ranks), "stragglers": m.summary["stragglers"]}))
"""


def build(source: str, out: pathlib.Path, ranks: int, mb: float) -> None:
    sys.path.insert(0, str(HERE))
    from tile_kineto import tile
    import gzip

    import msgspec

    out.mkdir(parents=True, exist_ok=True)
    base = out.parent / f"ranks_base_{int(mb)}MB.json"  # outside the directory of rank traces
    if not base.exists():
        tile(source, str(base), mb * 1e6, compress=False)
    data = base.read_bytes()
    doc_start = data.index(b'"traceEvents"')
    header = msgspec.json.decode(data[:doc_start].rstrip().rstrip(b",") + b"}")
    for rank in range(ranks):
        path = out / f"rank{rank}.json"
        if path.exists():
            continue
        info = dict(header.get("distributedInfo") or {}, rank=rank, world_size=ranks)
        new_header = msgspec.json.encode(dict(header, distributedInfo=info))[:-1] + b", "
        path.write_bytes(new_header + data[doc_start:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", default=str(DEFAULT_SOURCE))
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--mb-per-rank", type=float, default=100)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    out = HERE / "out" / "ranks"
    build(args.source, out, args.ranks, args.mb_per_rank)
    traces = sorted(out.glob("rank*.json"))[: args.ranks]
    size = sum(p.stat().st_size for p in traces) / 1e6
    results = {}
    for w in args.workers:
        proc = subprocess.run([sys.executable, "-c", _CHILD, str(out), str(w)], capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(proc.stderr[-3000:])
        results[w] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"{w} worker(s): {results[w]['seconds']:.2f} s for {results[w]['ranks']} ranks ({size:,.0f} MB)")
    base = results[args.workers[0]]["seconds"]
    for w in args.workers[1:]:
        print(f"speedup with {w} workers over {args.workers[0]}: {base / results[w]['seconds']:.2f}x")


if __name__ == "__main__":
    main()
