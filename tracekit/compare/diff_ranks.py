"""Diff two multi-rank runs: a diff per rank (matched by rank number, or by order when the
numbers differ) and the cross-rank summary side by side."""

from __future__ import annotations

from typing import Any

from tracekit.common.format import UNKNOWN
from tracekit.compare.diff import diff_summaries
from tracekit.compare.diff_rows import metric_pair
from tracekit.compare.noise import DEFAULT_MIN_CHANGE, Samples, compare as noise
from tracekit.compare.summary import as_summary, number, records

def diff_ranks(base: list[str], new: list[str], device: str | None = None, rules: str | None = None,
               min_change: float = DEFAULT_MIN_CHANGE, **options: Any) -> dict[str, Any]:
    """Two multi-rank runs (directories, or lists of traces, one per rank): a diff per rank
    (ranks matched by number) and the cross-rank summary side by side: the median step over
    every rank's steps (with its interval), load imbalance, collective skew, stragglers."""
    from tracekit.ranks.executor import analyze_ranks

    kept = {k: v for k, v in options.items() if k in ("device_file", "sustained", "workers") and v is not None}
    runs = [analyze_ranks(paths, device=device, rules=rules, **kept) for paths in (base, new)]
    by_rank = [{r.rank: r for r in run.ranks} for run in runs]
    summaries = [{r.rank: as_summary(r.analysis) for r in run.ranks} for run in runs]
    per_rank = []
    matching = "rank number"
    if not set(by_rank[0]) & set(by_rank[1]):  # no rank number in common: the i-th rank of each, in rank order
        matching = "order (no rank number in common)"
        order = [sorted(m, key=lambda r: (r is None, r)) for m in by_rank]
        pairs = [(i, order[0][i] if i < len(order[0]) else None, order[1][i] if i < len(order[1]) else None)
                 for i in range(max(map(len, order)))]
        by_rank = [{i: by_rank[0].get(b) for i, b, _ in pairs if b is not None or b in by_rank[0]},
                   {i: by_rank[1].get(n) for i, _, n in pairs if n is not None or n in by_rank[1]}]
        summaries = [{i: summaries[0][r] for i, r, _ in pairs if r in summaries[0]}, {i: summaries[1][r] for i, _, r in pairs if r in summaries[1]}]
    for rank in sorted(set(by_rank[0]) | set(by_rank[1]), key=lambda r: (r is None, r)):
        b, n = by_rank[0].get(rank), by_rank[1].get(rank)
        entry: dict[str, Any] = {"rank": rank if matching == "rank number" else f"{b.rank if b else UNKNOWN} → {n.rank if n else UNKNOWN}", "base_path": b.path if b else None, "new_path": n.path if n else None,
                                 "only": None if b and n else ("base" if b else "new"), "diff": None}
        if b and n:
            entry["diff"] = diff_summaries(summaries[0][rank], summaries[1][rank], min_change)
        per_rank.append(entry)
    sb, sn = runs[0].summary, runs[1].summary

    def all_steps(side):
        return Samples.exact([number(r.get("duration_ns")) for s in summaries[side].values() for r in records(s, "steps")])

    # Two step times, two definitions, both named: the GPU windows of the steps (what every
    # per-step figure uses), and each rank's iteration as its host step ranges (the loop's
    # period, host work included), as the cross-rank report gives it.
    median = metric_pair("median_rank_iteration_ns", number(sb.get("median_step_time_ns")), number(sn.get("median_step_time_ns")),
                   "median over ranks of each rank's host step ranges, summed (the loop's period, host work included)")
    # each rank's step time is the sum of its steps: compare per step where the ranks cover different steps
    step = metric_pair("step_time_ns", _median_step(runs[0]), _median_step(runs[1]), "median step GPU window over every rank's steps")
    step.update(noise(all_steps(0), all_steps(1), step["ratio"], "median", min_change))
    cross = [step, median,
             metric_pair("load_imbalance", number(sb.get("load_imbalance")), number(sn.get("load_imbalance")), "share"),
             metric_pair("max_collective_skew_ns", number(sb.get("max_collective_skew_ns")), number(sn.get("max_collective_skew_ns")), "per instance"),
             metric_pair("median_collective_skew_ns", number(sb.get("median_collective_skew_ns")), number(sn.get("median_collective_skew_ns")), "per instance")]
    return {"base": {"ranks": len(runs[0].ranks), "paths": base}, "new": {"ranks": len(runs[1].ranks), "paths": new},
            "cross_rank": cross, "stragglers": {"base": sb.get("stragglers"), "new": sn.get("stragglers")},
            "min_change": min_change, "ranks_matched_by": matching, "ranks": per_rank,
            "warnings": [f"{side} rank {r.rank}: {w}" for side, run in (("base", runs[0]), ("new", runs[1]))
                         for r in run.ranks for w in r.analysis.warnings]}


def _median_step(run) -> float | None:
    import statistics

    values = [number(d) for r in run.ranks for d in (r.analysis.steps["duration_ns"] if len(r.analysis.steps) else [])]
    values = [v for v in values if v is not None]
    return float(statistics.median(values)) if values else None
