"""Several traces of one job, one per rank: per-rank analysis in parallel, then the
cross-rank view: step time and blocks per rank, stragglers, collective skew, load imbalance.

Ranks are analysed in worker processes (concurrent.futures), or on a Dask cluster
(`scheduler="tcp://host:port"`, or "local" for a local one) reading paths the workers can
see. The per-rank work is the same function either way, so the results are identical.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis import Analysis
from tracekit.errors import TraceError

_RANK_IN_NAME = re.compile(r"rank[_\-.]?(\d+)", re.I)
TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite")
# JSON files tracekit writes itself (reports/bundle.py): `analyze DIR --out DIR` run twice
# must not read its own report as a rank.
OUTPUT_NAMES = frozenset({"summary.json", "ranks.json"})


@dataclass
class RankResult:
    rank: int
    path: str
    analysis: Analysis  # without its Trace: results travel between processes
    origin_abs_ns: int | None


@dataclass
class MultiRank:
    ranks: list[RankResult]
    per_rank: pd.DataFrame  # one row per rank: step time, busy, compute, comm, exposed comm
    blocks: pd.DataFrame  # phase x block x rank
    stragglers: pd.DataFrame
    skew: pd.DataFrame  # one row per collective instance matched across ranks
    summary: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from tracekit.analysis import _records

        return {"ranks": len(self.ranks), "summary": self.summary, "per_rank": _records(self.per_rank),
                "stragglers": _records(self.stragglers), "collective_skew": _records(self.skew.head(50)),
                "blocks": _records(self.blocks)}


def trace_paths(inputs: list[str]) -> list[str]:
    """Files as given; directories expand to the traces directly inside them."""
    out = []
    for item in inputs:
        if os.path.isdir(item):
            found = sorted(os.path.join(item, f) for f in os.listdir(item) if f.endswith(TRACE_SUFFIXES) and f not in OUTPUT_NAMES)
            if not found:
                raise TraceError(item, "directory holds no .json, .json.gz or .sqlite traces")
            out += found
        else:
            out.append(item)
    return out


def rank_of(path: str, analysis: Analysis) -> int | None:
    if analysis.meta.get("rank") is not None:
        return int(analysis.meta["rank"])
    match = _RANK_IN_NAME.search(os.path.basename(path))
    return int(match.group(1)) if match else None


def analyze_one(path: str, device: str | None = None, device_file: str | None = None, rules: str | None = None,
                sustained: float = 0.8) -> RankResult:
    """One rank's analysis; a top-level function so worker processes and Dask can run it."""
    from tracekit.api import analyze

    a = analyze(path, device=device, device_file=device_file, sustained=sustained, rules=rules)
    a.trace = None  # the linked trace stays in the worker
    rank = rank_of(path, a)
    return RankResult(rank if rank is not None else -1, path, a, a.meta.get("origin_abs_ns"))


def analyze_ranks(inputs: list[str], *, device: str | None = None, device_file: str | None = None, rules: str | None = None,
                  sustained: float = 0.8, workers: int | None = None, scheduler: str | None = None,
                  straggler_threshold: float = 0.05) -> MultiRank:
    paths = trace_paths(inputs)
    args = (device, device_file, rules, sustained)
    if scheduler:
        results = _on_dask(paths, args, scheduler)
    else:
        workers = workers or min(len(paths), os.cpu_count() or 1)
        if workers <= 1:
            results = [analyze_one(p, *args) for p in paths]
        else:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                results = list(pool.map(analyze_one, paths, *([a] * len(paths) for a in args)))
    for i, r in enumerate(results):
        if r.rank < 0:
            r.rank = i  # neither distributedInfo nor the file name says: the order given
    ranks = sorted({r.rank for r in results})
    if len(ranks) != len(results):
        raise TraceError(inputs[0], "two traces claim the same rank; pass one trace per rank")
    return cross_rank(sorted(results, key=lambda r: r.rank), straggler_threshold)


def _on_dask(paths: list[str], args: tuple, scheduler: str) -> list[RankResult]:
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise TraceError(scheduler, "running on a Dask cluster needs dask[distributed]: pip install 'tracekit[dask]'") from None
    if scheduler == "local":
        with LocalCluster(n_workers=min(len(paths), os.cpu_count() or 1), threads_per_worker=1, processes=True,
                          dashboard_address=":0") as cluster, Client(cluster) as client:
            return client.gather(client.map(analyze_one, paths, *([a] * len(paths) for a in args), pure=False))
    try:
        with Client(scheduler, timeout="20s") as client:
            return client.gather(client.map(analyze_one, paths, *([a] * len(paths) for a in args), pure=False))
    except OSError as exc:
        raise TraceError(scheduler, f"cannot reach the Dask scheduler ({exc})") from None


def cross_rank(results: list[RankResult], threshold: float = 0.05) -> MultiRank:
    per_rank = pd.DataFrame([_rank_row(r) for r in results])
    blocks = pd.concat([r.analysis.blocks.assign(rank=r.rank) for r in results], ignore_index=True) if results else pd.DataFrame()
    median = float(per_rank["step_time_ns"].median()) if len(per_rank) else float("nan")
    per_rank["vs_median"] = per_rank["step_time_ns"] / median - 1 if median else float("nan")
    stragglers = per_rank[per_rank["vs_median"] > threshold][["rank", "step_time_ns", "vs_median", "busy_ns", "exposed_comm_ns"]]
    skew = collective_skew(results)
    compute = per_rank["compute_ns"].astype(float)
    summary = {
        "median_step_time_ns": median,
        "straggler_threshold": threshold,
        "stragglers": stragglers["rank"].tolist(),
        "load_imbalance": float(compute.max() / compute.mean() - 1) if len(compute) and compute.mean() > 0 else float("nan"),
        "max_collective_skew_ns": float(skew["skew_ns"].max()) if len(skew) else float("nan"),
        "median_collective_skew_ns": float(skew["skew_ns"].median()) if len(skew) else float("nan"),
        "clock": "absolute (per-rank trace base time)" if all(r.origin_abs_ns is not None for r in results) else "unknown: skew not computed",
    }
    return MultiRank(results, per_rank, blocks, stragglers.reset_index(drop=True), skew, summary)


def _rank_row(r: RankResult) -> dict[str, Any]:
    a = r.analysis
    k = a.kernels
    steps = a.steps
    comm = (k["block"] == "collective").to_numpy()
    step_time = float(steps["duration_ns"].sum()) if len(steps) else float(a.meta.get("span_ns") or 0)
    return {
        "rank": r.rank, "path": r.path, "steps": len(steps), "step_time_ns": step_time,
        "mean_step_ns": float(steps["duration_ns"].mean()) if len(steps) else float("nan"),
        "busy_ns": int(k["exclusive_ns"].sum()), "compute_ns": int(k.loc[~comm, "exclusive_ns"].sum()),
        "comm_ns": int(a.overlap["comm_ns"].sum()) if len(a.overlap) else 0,
        "exposed_comm_ns": int(a.overlap["exposed_ns"].sum()) if len(a.overlap) else 0,
        "modeled_share": a.coverage["modeled_share"], "efficiency": a.coverage["efficiency"],
    }


def collective_skew(results: list[RankResult]) -> pd.DataFrame:
    """The same collective instance on every rank: matched by its order among the collectives
    of the same type and process group on each rank; skew = spread of their start times on
    the absolute clock."""
    cols = ["collective", "group", "instance", "ranks", "skew_ns", "first_rank", "last_rank", "message_bytes"]
    frames = []
    for r in results:
        c = r.analysis.collectives
        if c.empty or r.origin_abs_ns is None:
            continue
        c = c[c["collective"].notna()].sort_values("start")
        frames.append(pd.DataFrame({
            "rank": r.rank, "collective": c["collective"].to_numpy(), "group": c["group"].fillna("").to_numpy(),
            "instance": c.groupby(["collective", c["group"].fillna("")]).cumcount().to_numpy(),
            "abs_start": c["start"].to_numpy() + r.origin_abs_ns, "message_bytes": c["message_bytes"].to_numpy(),
        }))
    if len(frames) < 2:
        return pd.DataFrame(columns=cols)
    all_ranks = pd.concat(frames, ignore_index=True)
    g = all_ranks.groupby(["collective", "group", "instance"])
    out = g.agg(ranks=("rank", "nunique"), first=("abs_start", "min"), last=("abs_start", "max"), message_bytes=("message_bytes", "max")).reset_index()
    first_rank = all_ranks.loc[g["abs_start"].idxmin(), ["collective", "group", "instance", "rank"]].rename(columns={"rank": "first_rank"})
    last_rank = all_ranks.loc[g["abs_start"].idxmax(), ["collective", "group", "instance", "rank"]].rename(columns={"rank": "last_rank"})
    out = out.merge(first_rank, on=["collective", "group", "instance"]).merge(last_rank, on=["collective", "group", "instance"])
    out["skew_ns"] = out["last"] - out["first"]
    out = out[out["ranks"] > 1]
    return out[cols].sort_values("skew_ns", ascending=False).reset_index(drop=True)
