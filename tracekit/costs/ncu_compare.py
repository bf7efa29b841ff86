"""Modeled bytes per kernel against the DRAM bytes Nsight Compute measured on the same work.

Pairing: the trace's kernels and ncu's rows are the same launches in the same order; they
are paired by order after aligning their base function names (difflib), so a kernel one side
lacks (a profiler-only kernel, one ncu skipped) does not shift the rest. Too few pairs means
the files are not of the same work: a TraceError (exit 2), not a comparison.

Agreement (the rule the report states):
- reads: modeled bytes_read within ±tolerance of dram__bytes_read.sum;
- writes: ncu flushes the caches between kernels, and outputs still in L2 when a kernel ends
  are written back by that flush, charged to no kernel: dram__bytes_write.sum undercounts a
  kernel's writes. Writes fail a kernel only when DRAM wrote more than modeled by over
  tolerance x the kernel's modeled traffic;
- an Inductor kernel, whose model does not tell reads from writes, agrees when its total lies
  between DRAM's reads and reads + max(reads, writes), ± tolerance;
- small kernels: where modeled and measured totals are both under SMALL_BYTES (4 MB), within
  SMALL_SLACK (1 MB) agrees: a small kernel's DRAM count is set by what the L2 holds at its
  edges as much as by the kernel.
The benchmark's strict figure (benchmarks/ncu_bytes.py) leaves out kernels whose modeled and
measured bytes are both under `min_bytes` and applies the first three rules alone.
"""

from __future__ import annotations

import difflib
import re

import numpy as np
import pandas as pd

from tracekit.errors import TraceError

TOLERANCE = 0.15
SMALL_BYTES = 4e6
SMALL_SLACK = 1e6
MIN_PAIRED = 0.5  # of the smaller side's kernels: fewer pairs and the files are not of the same work
INDUCTOR_SOURCE = "Inductor kernel arguments"


def base_name(name: str) -> str:
    """`void at::native::foo<float, 4>(float*, ...)` -> `foo`: ncu prints the function's base
    name by default, Kineto the full demangled signature."""
    text = re.sub(r"\(anonymous namespace\)::|<unnamed>::", "", str(name)[:4096]).removeprefix("void ").strip()
    depth, cut = 0, len(text)
    for i, ch in enumerate(text):
        if ch in "<(" and depth == 0:
            cut = i
            break
    return text[:cut].split("::")[-1].strip()


def trace_kernels(kernels: pd.DataFrame) -> pd.DataFrame:
    """The analysed kernels (not copies) in launch order, with their modeled bytes."""
    k = kernels[kernels["kind"].astype(str) == "kernel"].sort_values("start", kind="stable")
    return pd.DataFrame({"row": k.index.to_numpy(), "name": k["name"].astype(str).to_numpy(),
                         "model_read": k["bytes_read"].to_numpy(float), "model_written": k["bytes_written"].to_numpy(float),
                         "source": k["cost_source"].astype(str).to_numpy()})


def pair(ncu: pd.DataFrame, twin: pd.DataFrame, ncu_path: str | None = None) -> pd.DataFrame:
    """One row per paired kernel: the trace's columns and ncu's (read, written, time_ns, grid)."""
    a, b = [base_name(n) for n in twin["name"]], [base_name(n) for n in ncu["name"]]
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    rows = [(block.a + i, block.b + i) for block in matcher.get_matching_blocks() for i in range(block.size)]
    smaller = min(len(a), len(b))
    if ncu_path is not None and (not smaller or len(rows) < MIN_PAIRED * smaller):
        raise TraceError(ncu_path, f"only {len(rows)} of its {len(b)} kernels pair with the trace's {len(a)} by name and order: "
                                   "not a recording of the same work")
    if not rows:
        return pd.DataFrame()
    ti, ni = map(list, zip(*rows))
    return pd.concat([twin.iloc[ti].reset_index(drop=True), ncu.iloc[ni].drop(columns="name").reset_index(drop=True)], axis=1)


def judge(paired: pd.DataFrame, tolerance: float = TOLERANCE, min_bytes: float = 1e6) -> pd.DataFrame:
    """Adds: agrees (the strict rules), small (both under min_bytes: left out of the strict
    figure), agrees_or_small (agrees, or both under SMALL_BYTES and within SMALL_SLACK), costed."""
    p = paired.copy()
    p["read_ratio"] = p["model_read"] / p["read"].where(p["read"] > 0)
    reads_ok = (p["read_ratio"] - 1).abs() <= tolerance
    modeled = p["model_read"].fillna(0) + p["model_written"].fillna(0)
    writes_ok = p["written"] - p["model_written"].fillna(0) <= tolerance * modeled + min_bytes * 0.01
    lumped = (p["source"] == INDUCTOR_SOURCE) & (p["model_written"].fillna(0) == 0)
    total = p["model_read"]
    ceiling = p["read"] + np.maximum(p["written"], p["read"])
    lumped_ok = (total >= (1 - tolerance) * p["read"]) & (total <= (1 + tolerance) * ceiling)
    reads_ok = reads_ok.where(~lumped, lumped_ok)
    writes_ok = writes_ok | lumped
    measured = p["read"] + p["written"]
    p["small"] = (modeled < min_bytes) & (measured < min_bytes)
    p["costed"] = p["model_read"].notna()
    p["agrees"] = reads_ok & writes_ok & p["costed"]
    near = (modeled < SMALL_BYTES) & (measured < SMALL_BYTES) & ((modeled - measured).abs() <= SMALL_SLACK)
    p["agrees_or_small"] = p["agrees"] | (near & p["costed"])
    p["family"] = [base_name(n) for n in p["name"]]
    return p


def summary(p: pd.DataFrame, min_bytes: float = 1e6) -> dict:
    """The figures the report states (JSON-ready): shares of kernel time that agree, totals."""
    time = p["time_ns"].fillna(0)
    big = ~p["small"]
    costed = p["costed"]

    def share(mask) -> float | None:
        whole = float(time[mask].sum())
        return float(time[mask & p["agrees"]].sum()) / whole if whole > 0 else None

    whole = float(time[costed].sum())
    return {
        "paired": int(len(p)), "costed": int(costed.sum()), "compared_strict": int((big & costed).sum()),
        "tolerance": TOLERANCE, "small_bytes": SMALL_BYTES, "small_slack": SMALL_SLACK, "min_bytes": min_bytes,
        "share_strict": share(big & costed),
        "share": float(time[costed & p["agrees_or_small"]].sum()) / whole if whole > 0 else None,
        "modeled_bytes": float((p["model_read"] + p["model_written"])[costed].sum()),
        "measured_bytes": float((p["read"] + p["written"])[costed].sum()),
        "uncosted_time_share": float(time[~costed].sum() / time.sum()) if time.sum() > 0 else None,
    }


def families(p: pd.DataFrame) -> pd.DataFrame:
    """Per kernel family (base function name): kernels, time, modeled and measured bytes, and
    the share of its costed time that agrees (the report's rule), most time first."""
    time = p["time_ns"].fillna(0)
    frame = pd.DataFrame({"family": p["family"], "kernels": 1, "time_ns": time,
                          "modeled_bytes": (p["model_read"] + p["model_written"]).where(p["costed"]),
                          "measured_bytes": p["read"] + p["written"],
                          "costed_ns": time.where(p["costed"], 0.0), "agree_ns": time.where(p["agrees_or_small"], 0.0)})
    g = frame.groupby("family", sort=False).agg(kernels=("kernels", "sum"), time_ns=("time_ns", "sum"),
                                                modeled_bytes=("modeled_bytes", lambda s: s.sum(min_count=1)),
                                                measured_bytes=("measured_bytes", "sum"), costed_ns=("costed_ns", "sum"),
                                                agree_ns=("agree_ns", "sum"))
    g["agree_share"] = (g["agree_ns"] / g["costed_ns"]).where(g["costed_ns"] > 0)
    g = g.drop(columns=["costed_ns", "agree_ns"]).sort_values("time_ns", ascending=False).reset_index()
    return g.astype({"kernels": int, "time_ns": float, "modeled_bytes": float, "measured_bytes": float, "agree_share": float})


def measured_bytes(kernels: pd.DataFrame, p: pd.DataFrame) -> pd.DataFrame:
    """Per analysed kernel row that ncu measured: its DRAM read and written bytes (for
    `--bytes measured`), indexed like `kernels`."""
    return pd.DataFrame({"ncu_read": p["read"].to_numpy(float), "ncu_written": p["written"].to_numpy(float)},
                        index=pd.Index(p["row"].to_numpy(), name=kernels.index.name))
