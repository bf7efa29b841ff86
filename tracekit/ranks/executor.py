"""Several traces of one job, one per rank: per-rank analysis in parallel, then the
cross-rank view: step time and blocks per rank, stragglers (the ranks that reach the
collectives last; see arrivals.py), collective skew and bus bandwidth over ranks, load
imbalance of compute work.

Ranks are analysed in worker processes (concurrent.futures), or on a Dask cluster
(`scheduler="tcp://host:port"`, or "local" for a local one) reading paths the workers can
see. The per-rank work is the same function either way, so the results are identical.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis import Analysis
from tracekit.ranks.arrivals import arrival_table, busbw_spread, collective_skew, matched_collectives, unequal_counts
from tracekit.trace.timeline import union
from tracekit.errors import TraceError
from tracekit.strict_json import plain, records

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
    busbw: pd.DataFrame = field(default_factory=pd.DataFrame)  # per collective type and size: busbw over ranks
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (path, why) of each input no rank came from

    def to_dict(self) -> dict[str, Any]:
        summary = plain(self.summary)  # unknown is null
        return {"ranks": len(self.ranks), "unreadable": [{"path": p, "reason": why} for p, why in self.unreadable],
                "summary": summary, "per_rank": records(self.per_rank),
                "stragglers": records(self.stragglers), "collective_skew": records(self.skew.head(50)),
                "collective_busbw": records(self.busbw), "blocks": records(self.blocks)}


def trace_paths(inputs: list[str], unreadable: list[tuple[str, str]] | None = None) -> list[str]:
    """Files as given; directories expand to the traces directly inside them. An entry of a
    directory that is no file (a `*.json` folder, a link that names nothing or loops) is
    added to `unreadable` with why, where it is given, and left out."""
    out = []
    for item in inputs:
        if os.path.isdir(item):
            from tracekit.parsers.source import list_directory

            from tracekit.common.ownership import MANIFEST, owned_entries

            ours = OUTPUT_NAMES | owned_entries(item) | {MANIFEST}  # a bundle written into the directory is not a trace
            found = [os.path.join(item, f) for f in list_directory(item) if f.endswith(TRACE_SUFFIXES) and f not in ours]
            if unreadable is not None:
                for f in [f for f in found if not os.path.isfile(f)]:
                    unreadable.append((f, "is a directory, not a trace" if os.path.isdir(f) else
                                       "is a link that names nothing (or loops)"))
                    found.remove(f)
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


def analyze_or_unreadable(path: str, device: str | None = None, device_file: str | None = None, rules: str | None = None,
                          sustained: float = 0.8, parse_workers: int | None = 1) -> "RankResult | tuple[str, str]":
    """analyze_one, or (path, why) for a trace that cannot be read: one bad rank (cut short,
    not a trace) leaves the sound ranks their report."""
    try:
        return analyze_one(path, device, device_file, rules, sustained, parse_workers)
    except TraceError as exc:
        return (exc.path, exc.reason)


def analyze_one(path: str, device: str | None = None, device_file: str | None = None, rules: str | None = None,
                sustained: float = 0.8, parse_workers: int | None = 1) -> RankResult:
    """One rank's analysis; a top-level function so worker processes and Dask can run it.
    `parse_workers`: 1 when the ranks already run side by side (one process per core)."""
    from tracekit.analysis.load import analyze

    # the linked trace and its host tables stay in the worker
    a = replace(analyze(path, device=device, device_file=device_file, sustained=sustained, rules=rules, workers=parse_workers),
                trace=None, host=None)
    rank = rank_of(path, a)
    return RankResult(rank if rank is not None else -1, path, a, a.meta.get("origin_abs_ns"))


def analyze_ranks(inputs: list[str], *, device: str | None = None, device_file: str | None = None, rules: str | None = None,
                  sustained: float = 0.8, workers: int | None = None, scheduler: str | None = None,
                  straggler_threshold: float = 0.05) -> MultiRank:
    unreadable: list[tuple[str, str]] = []
    paths = trace_paths(inputs, unreadable)
    args = (device, device_file, rules, sustained)
    if scheduler:
        results = _on_dask(paths, args, scheduler)
    else:
        asked = workers
        workers = workers or min(len(paths), os.cpu_count() or 1)
        if workers <= 1:  # one rank at a time: each may read its trace with the cores (unless told 1)
            results = [analyze_or_unreadable(p, *args, parse_workers=asked) for p in paths]
        else:
            from tracekit.common.pools import PoolUnavailable, process_pool
            from tracekit.common.pools import results as pool_results

            try:
                with process_pool(workers) as pool:  # (stopped, no worker left, whatever ends it)
                    results = pool_results(pool, analyze_or_unreadable, paths, *([a] * len(paths) for a in args))
            except PoolUnavailable:  # no processes to be had (`ulimit -u`, `ulimit -n`): one rank at a time, here
                results = [analyze_or_unreadable(p, *args, parse_workers=1) for p in paths]
    unreadable += [r for r in results if isinstance(r, tuple)]
    results = [r for r in results if not isinstance(r, tuple)]
    if not results:
        path, why = unreadable[0]
        more = f" (and {len(unreadable) - 1} other input(s) could not be read either)" if len(unreadable) > 1 else ""
        raise TraceError(path, why + more)
    for i, r in enumerate(results):
        if r.rank < 0:
            r.rank = i  # neither distributedInfo nor the file name says: the order given
    claimed: dict[int, RankResult] = {}
    for r in results:
        if r.rank in claimed:
            raise TraceError(r.path, f"claims rank {r.rank}, as {claimed[r.rank].path} does; pass one trace per rank")
        claimed[r.rank] = r
    job_warnings(results)
    return replace(cross_rank(sorted(results, key=lambda r: r.rank), straggler_threshold), unreadable=unreadable)


def job_warnings(results: list[RankResult]) -> None:
    """A trace that looks like another job's gets a warning (on its rank): a world size other
    than the rest's, a format other than the rest's (an nsys export among Kineto ranks), or
    more traces than the job's world size. The analysis goes on: the user decides."""
    from collections import Counter

    def most(values):
        counted = Counter(v for v in values if v is not None)
        return counted.most_common(1)[0][0] if counted else None

    world = most(r.analysis.meta.get("world_size") for r in results)
    fmt = most(r.analysis.meta.get("format") for r in results)
    for r in results:
        size, kind = r.analysis.meta.get("world_size"), r.analysis.meta.get("format")
        if size is not None and world is not None and size != world:
            r.analysis.warnings.append(f"world size {size}, the other ranks' is {world}: this trace looks like another job's")
        elif kind is not None and fmt is not None and kind != fmt:
            r.analysis.warnings.append(f"a {kind} trace among {fmt} traces: is it a rank of this job?")
    if world is not None and len(results) > world:
        results[-1].analysis.warnings.append(f"{len(results)} traces for a job of world size {world}: some are not its ranks")


def _on_dask(paths: list[str], args: tuple, scheduler: str) -> list:
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise TraceError(scheduler, "running on a Dask cluster needs dask[distributed]: pip install 'tracekit[dask]'") from None
    if scheduler == "local":
        try:  # a cluster that cannot start (no file descriptors, processes or temporary directory left)
            # its own log lines stay unprinted: a failure is told in tracekit's one line
            cluster = LocalCluster(n_workers=min(len(paths), os.cpu_count() or 1), threads_per_worker=1, processes=True,
                                   dashboard_address=":0", silence_logs=logging.CRITICAL)
        except (RuntimeError, OSError) as exc:
            raise TraceError(scheduler, f"a local Dask cluster could not start ({exc}): raise the process's limits "
                                        "(ulimit -n / -u) or leave out --scheduler") from None
        with cluster, Client(cluster) as client:
            return client.gather(client.map(analyze_or_unreadable, paths, *([a] * len(paths) for a in args), pure=False))
    try:
        with Client(scheduler, timeout="20s") as client:
            return client.gather(client.map(analyze_or_unreadable, paths, *([a] * len(paths) for a in args), pure=False))
    except OSError as exc:
        raise TraceError(scheduler, f"cannot reach the Dask scheduler ({exc})") from None


def cross_rank(results: list[RankResult], threshold: float = 0.05) -> MultiRank:
    per_rank = pd.DataFrame([_rank_row(r) for r in results])
    blocks = pd.concat([r.analysis.blocks.assign(rank=r.rank) for r in results], ignore_index=True) if results else pd.DataFrame()
    median = float(per_rank["step_time_ns"].median()) if len(per_rank) else float("nan")
    per_rank["vs_median"] = per_rank["step_time_ns"] / median - 1 if median else float("nan")
    compute = per_rank["compute_ns"].astype(float)
    mean_compute = float(compute.mean()) if len(compute) else float("nan")
    per_rank["compute_vs_mean"] = compute / mean_compute - 1 if mean_compute > 0 else float("nan")

    rows = matched_collectives(results)
    skew = collective_skew(rows)
    per_rank = per_rank.merge(arrival_table(rows, per_rank["rank"].tolist()), on="rank", how="left")
    stragglers = straggler_table(per_rank, median, threshold)
    busiest = int(per_rank.loc[compute.idxmax(), "rank"]) if len(compute) and compute.notna().any() else None
    summary = {
        "median_step_time_ns": median,
        "straggler_threshold": threshold,
        "stragglers": stragglers["rank"].tolist(),
        "straggler": _verdict(stragglers, per_rank, busiest) if len(stragglers) else None,
        "collective_instances": int(len(skew)),
        "unequal_collective_counts": unequal_counts(matched_collectives(results, shared_only=False)),
        "most_compute_rank": busiest,
        "load_imbalance": float(compute.max() / mean_compute - 1) if mean_compute > 0 else float("nan"),
        "long_step_ranks": per_rank.loc[per_rank["vs_median"] > threshold, "rank"].tolist(),
        "max_collective_skew_ns": float(skew["skew_ns"].max()) if len(skew) else float("nan"),
        "median_collective_skew_ns": float(skew["skew_ns"].median()) if len(skew) else float("nan"),
        "clock": "absolute (per-rank trace base time)" if all(r.origin_abs_ns is not None for r in results) else "unknown: skew not computed",
    }
    return MultiRank(results, per_rank, blocks, stragglers, skew, summary, busbw=busbw_spread(rows))


def straggler_table(per_rank: pd.DataFrame, median_step_ns: float, threshold: float) -> pd.DataFrame:
    """The ranks the others wait for. At each matched collective instance the ranks wait for
    the one that arrives last; a rank is a straggler when the waiting it so causes, per other
    rank, exceeds `threshold` x the median step time. Most waiting caused first, with how
    late it arrives (vs the median rank) and its compute work beside it."""
    cols = ["rank", "last_count", "instances", "caused_wait_ns", "others_wait_share", "late_ns", "mean_late_ns",
            "compute_ns", "compute_vs_mean", "exposed_comm_ns"]
    caused = per_rank["caused_wait_ns"].astype(float)
    others = max(len(per_rank) - 1, 1)
    if not caused.notna().any() or not median_step_ns > 0:
        return pd.DataFrame(columns=cols)
    per_rank = per_rank.assign(others_wait_share=caused / others / median_step_ns)
    chosen = per_rank[per_rank["others_wait_share"] > threshold]
    return chosen.sort_values(["caused_wait_ns", "rank"], ascending=[False, True])[cols].reset_index(drop=True)


def _verdict(stragglers: pd.DataFrame, per_rank: pd.DataFrame, busiest: int | None) -> dict[str, Any]:
    """The top straggler, what it cost the others, and whether its compute explains it."""
    top = stragglers.iloc[0]
    others = per_rank[per_rank["rank"] != top["rank"]]
    return {
        "rank": int(top["rank"]), "last_count": int(top["last_count"]), "instances": int(top["instances"]),
        "late_ns": float(top["late_ns"]), "caused_wait_ns": float(top["caused_wait_ns"]),
        "others_wait_share": float(top["others_wait_share"]),
        "others_exposed_comm_ns": float(others["exposed_comm_ns"].sum()),
        "compute_ns": float(top["compute_ns"]), "compute_vs_mean": float(top["compute_vs_mean"]),
        "computes_most": busiest is not None and int(top["rank"]) == busiest,
    }


def _rank_row(r: RankResult) -> dict[str, Any]:
    a = r.analysis
    k = a.kernels
    steps = a.steps
    # A rank's iteration time is its host step range (the training loop's period); the
    # step's GPU window (duration_ns) is what shares and idle-in-step figures use.
    wall = steps["host_duration_ns"] if "host_duration_ns" in steps else steps.get("duration_ns")
    step_time = float(wall.sum()) if len(steps) else float(a.meta.get("span_ns") or 0)
    return {
        "rank": r.rank, "path": r.path, "steps": len(steps), "step_time_ns": step_time,
        "mean_step_ns": float(wall.mean()) if len(steps) else float("nan"),
        "busy_ns": int(k["exclusive_ns"].sum()), "compute_ns": compute_work_ns(k),
        "comm_ns": int(a.overlap["comm_ns"].sum()) if len(a.overlap) else 0,
        "exposed_comm_ns": int(a.overlap["exposed_ns"].sum()) if len(a.overlap) else 0,
        "modeled_share": a.coverage["modeled_share"], "efficiency": a.coverage["efficiency"],
    }


def compute_work_ns(kernels: pd.DataFrame) -> int:
    """GPU time with compute running: the union of the intervals of the kernels that are
    not communication, per device, summed over devices. Overlapping kernels count once,
    and time a compute kernel shares with a collective still counts (exclusive time would
    give it to one of them)."""
    if kernels.empty:
        return 0
    compute = (kernels["kind"] == "kernel").to_numpy() & (kernels["block"] != "collective").to_numpy()
    k = kernels[compute]
    total = 0
    for _, part in k.groupby("device"):
        merged = union(part[["start", "end"]].to_numpy(dtype=np.int64))
        total += int((merged[:, 1] - merged[:, 0]).sum())
    return total
