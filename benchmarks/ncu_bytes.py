"""Modeled bytes per kernel against the DRAM bytes Nsight Compute measured on the same work.

    python benchmarks/ncu_bytes.py NCU.csv TWIN.json.gz [--tolerance 0.15] [--min-bytes 1e6]

Recording (needs a GPU; fixtures/gpu/device_checks.sh runs both, with the recorder copied
from ../shared/tools/record_gpu.py, part ncu_step: one 512-token prefill and one batch-16
decode step of a 4-layer Llama-3.1-8B shape, between cudaProfilerStart/Stop):

    ncu --profile-from-start off --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \\
        --csv --page raw --print-units base python record_gpu.py ncu_step OUT > NCU.csv
    PROFILE=1 python record_gpu.py ncu_step OUT       # the torch.profiler twin of the same work

The recording of 2026-11-26 on an H100 (ncu 2025.3.1, torch 2.11) is in fixtures/gpu/h100/;
tests/test_ncu_bytes.py holds tracekit to it.

The pairing and the rules below live in the package (tracekit/costs/ncu_read.py,
tracekit/costs/ncu_compare.py), where `tracekit analyze TRACE --ncu NCU.csv` uses them; this
script prints the strict figure and the worst offenders. The twin's kernels and ncu's are the
same launches in the same order; they are paired by order after aligning their base function
names (difflib), so a kernel one side lacks (a profiler-only kernel) does not shift the rest.

Rule for reads: modeled bytes_read against dram__bytes_read.sum.
Rule for writes (DRAM; L2's lts__t_sectors_op_write.sum, recorded by device_checks_writes.sh
as "stored", is not used: on kernels whose stores are known to the byte, such as the
embedding gather writing exactly 4,194,304 B, it counted 1.5x them, 6,291,712 B): ncu flushes the caches between kernels (--cache-control all, its default),
and outputs still in L2 when a kernel ends are written back by that flush, charged to no
kernel: dram__bytes_write.sum undercounts a kernel's writes. So writes never fail a kernel
for being lower than modeled; they fail it only when the DRAM wrote more than modeled by over
tolerance x the kernel's modeled traffic (the model missed traffic that matters: a GEMM that
reads 117 MB of weights and writes 2 MB where 0.5 MB were modeled agrees).
A kernel agrees when its reads are within ±tolerance and its writes pass that rule; an Inductor
kernel, whose model does not tell reads from writes, when its total lies between DRAM's reads
and reads + writes (± tolerance). Kernels
whose modeled and measured bytes are both under --min-bytes are listed apart: DRAM counters
on a few kilobytes measure L2 misses of neighbours as much as the kernel itself.

Prints: kernels compared, the share of their time that agrees, and the worst offenders.
Bar (issue 28): >= 85% of the compared kernels' time within ±15%.
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

import tracekit
from tracekit.costs.ncu_compare import base_name, judge as _judge, pair, trace_kernels  # noqa: F401  (base_name: the tests' API)
from tracekit.costs.ncu_read import read_ncu  # noqa: F401


def twin_kernels(path: str) -> pd.DataFrame:
    return trace_kernels(tracekit.analyze(path).kernels)


def judge(paired: pd.DataFrame, tolerance: float, min_bytes: float) -> pd.DataFrame:
    return _judge(paired, tolerance, min_bytes)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("ncu_csv")
    parser.add_argument("twin_trace")
    parser.add_argument("--tolerance", type=float, default=0.15)
    parser.add_argument("--min-bytes", type=float, default=1e6)
    args = parser.parse_args(argv)
    p = judge(pair(read_ncu(args.ncu_csv), twin_kernels(args.twin_trace)), args.tolerance, args.min_bytes)
    if not len(p):
        print("no kernel could be paired between the ncu report and the twin trace")
        return 1
    big = p[~p["small"]]
    time = big["time_ns"].fillna(0)
    share = float(time[big["agrees"]].sum() / time.sum()) if time.sum() else float("nan")
    print(f"paired {len(p)} kernels ({int(p['costed'].sum())} costed); compared {len(big)} above {args.min_bytes:.0f} B")
    print(f"within ±{args.tolerance:.0%} (reads; writes by the flush rule): {int(big['agrees'].sum())} kernels, "
          f"{share:.1%} of their time  [bar: >= 85% of time]")
    worst = big[~big["agrees"]].assign(time=time).sort_values("time", ascending=False).head(15)
    for _, r in worst.iterrows():
        print(f"  {r['time_ns'] / 1e3:9.1f} us  model {r['model_read'] / 1e6:10.2f} / {r['model_written'] / 1e6:8.2f} MB  "
              f"dram {r['read'] / 1e6:10.2f} / {r['written'] / 1e6:8.2f} MB  {r['source']:<12} {r['name'][:80]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
