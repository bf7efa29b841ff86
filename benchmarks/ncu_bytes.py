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

The twin's kernels and ncu's are the same launches in the same order; they are paired by
order after aligning their base function names (difflib), so a kernel one side lacks (a
profiler-only kernel) does not shift the rest.

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
import csv
import difflib
import re
import sys

import numpy as np
import pandas as pd

import tracekit


def base_name(name: str) -> str:
    """`void at::native::foo<float, 4>(float*, ...)` -> `foo`: ncu prints the function's base
    name by default, Kineto the full demangled signature."""
    text = re.sub(r"\(anonymous namespace\)::|<unnamed>::", "", str(name)).removeprefix("void ").strip()
    depth, cut = 0, len(text)
    for i, ch in enumerate(text):
        if ch in "<(" and depth == 0:
            cut = i
            break
    return text[:cut].split("::")[-1].strip()


def read_ncu(path: str) -> pd.DataFrame:
    with open(path, newline="", errors="replace") as fh:
        lines = [line for line in fh if line.startswith('"')]  # ncu's own log lines are not CSV
    rows = list(csv.DictReader(lines))
    table = pd.DataFrame(rows)
    table = table[pd.to_numeric(table.get("ID"), errors="coerce").notna()]  # drop the units row
    def number(column: str) -> pd.Series:  # ncu prints thousands separators: "4,210,176"
        return pd.to_numeric(table[column].astype(str).str.replace(",", "", regex=False), errors="coerce")

    out = pd.DataFrame({
        "name": table["Kernel Name"].astype(str),
        "read": number("dram__bytes_read.sum"),
        "written": number("dram__bytes_write.sum"),
        "time_ns": number("gpu__time_duration.sum"),
    })
    if "lts__t_sectors_op_write.sum" in table:  # what the kernel stored, in 32-byte L2 sectors
        out["stored"] = number("lts__t_sectors_op_write.sum") * 32
    return out.reset_index(drop=True)


def twin_kernels(path: str) -> pd.DataFrame:
    k = tracekit.analyze(path).kernels
    k = k[k["kind"].astype(str) == "kernel"].sort_values("start")
    return pd.DataFrame({"name": k["name"].astype(str).to_numpy(), "model_read": k["bytes_read"].to_numpy(float),
                         "model_written": k["bytes_written"].to_numpy(float), "source": k["cost_source"].astype(str).to_numpy()})


def pair(ncu: pd.DataFrame, twin: pd.DataFrame) -> pd.DataFrame:
    a, b = [base_name(n) for n in twin["name"]], [base_name(n) for n in ncu["name"]]
    rows = []
    for block in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_matching_blocks():
        for i in range(block.size):
            rows.append((block.a + i, block.b + i))
    if not rows:
        return pd.DataFrame()
    ti, ni = map(list, zip(*rows))
    return pd.concat([twin.iloc[ti].reset_index(drop=True), ncu.iloc[ni].drop(columns="name").reset_index(drop=True)], axis=1)


def judge(paired: pd.DataFrame, tolerance: float, min_bytes: float) -> pd.DataFrame:
    p = paired.copy()
    p["read_ratio"] = p["model_read"] / p["read"].where(p["read"] > 0)
    reads_ok = (p["read_ratio"] - 1).abs() <= tolerance
    modeled = p["model_read"].fillna(0) + p["model_written"].fillna(0)
    writes_ok = p["written"] - p["model_written"].fillna(0) <= tolerance * modeled + min_bytes * 0.01
    # An Inductor kernel's record does not say which arguments it writes: its model counts every
    # byte as read. Its total must cover DRAM's reads and may add at most as much written as
    # read (a fused pointwise kernel stores no more than it loads; DRAM's writes are a floor,
    # see the flush rule), each within the tolerance.
    lumped = (p["source"] == "Inductor kernel arguments") & (p["model_written"].fillna(0) == 0)
    total = p["model_read"]
    ceiling = p["read"] + np.maximum(p["written"], p["read"])
    lumped_ok = (total >= (1 - tolerance) * p["read"]) & (total <= (1 + tolerance) * ceiling)
    reads_ok = reads_ok.where(~lumped, lumped_ok)
    writes_ok = writes_ok | lumped
    p["small"] = (p["model_read"].fillna(0) + p["model_written"].fillna(0) < min_bytes) & (p["read"] + p["written"] < min_bytes)
    p["agrees"] = reads_ok & writes_ok
    p["costed"] = p["model_read"].notna()
    return p


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
