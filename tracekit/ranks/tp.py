"""The ranks of one job at another TP degree: each rank projected (tracekit.projection.tp),
then compared: which ops ran with the same shapes on every rank (replicated, or sharded
evenly) and which differ (model-parallel tables, uneven shards). The job's step is its
slowest rank's."""

from __future__ import annotations

import os

from tracekit.errors import TraceError
from tracekit.projection.rank_shapes import compare_ranks, rank_blocks
from tracekit.ranks.executor import rank_of, trace_paths


def project_tp_job(inputs: list[str] | str, tp: int, **options):
    """`inputs`: rank traces or a directory of them; `options` as for tracekit.api.project_tp.
    Returns the first rank's TPProjection with the cross-rank tables and per-rank totals."""
    from tracekit.projection.run import project_tp

    paths = trace_paths([os.fspath(p) for p in inputs] if isinstance(inputs, (list, tuple)) else [os.fspath(inputs)])
    projections, per_rank = [], []
    for i, path in enumerate(paths):
        p = project_tp(path, tp, **options)
        rank = rank_of(path, p.analysis)
        per_rank.append((rank if rank is not None else i, p.analysis))
        projections.append(p)
    if len({r for r, _ in per_rank}) != len(per_rank):
        raise TraceError(paths[0], "two traces claim the same rank; pass one trace per rank")
    first = projections[0]
    if len(projections) == 1:
        return first
    first.ranks = compare_ranks(per_rank)
    first.rank_blocks = rank_blocks(first.ranks)
    rows = [{"rank": r, "path": q.path, "step_measured_ns": q.totals["step_measured_ns"], "step_projected_ns": q.totals["step_projected_ns"],
             "busy_ns": q.totals["busy_ns"], "sharded_ns": q.totals["sharded_ns"], "replicated_share_busy": q.totals["replicated_share_busy"]}
            for (r, _), q in zip(per_rank, projections)]
    t = first.totals
    t["per_rank"] = rows
    measured = [x["step_measured_ns"] for x in rows if x["step_measured_ns"] is not None]
    projected = [x["step_projected_ns"] for x in rows if x["step_projected_ns"] is not None]
    t["job_step_measured_ns"] = max(measured) if measured else None  # the slowest rank sets the job's step
    t["job_step_projected_ns"] = max(projected) if projected else None
    first.path = os.fspath(inputs if not isinstance(inputs, (list, tuple)) else inputs[0])
    return first
