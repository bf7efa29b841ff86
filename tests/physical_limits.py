"""Physical limits read off a summary.json alone, written apart from tracekit's own
plausibility pass (tracekit/analysis/plausibility.py) so that one checks the other.

`violations(summary)` lists every figure that breaks a limit: a share of more than the
whole, a rate above the device's peak (5% slack, as for kernels above the roofline), a
link efficiency above 100%, a negative time. `unflagged(summary)` is the subset that the
summary's `flags` do not list. Used by tests/test_verdicts.py and benchmarks/verdicts.py.
"""

from __future__ import annotations

import math
from typing import Any, Iterator

RATE = 1.05
SHARE = 1.0 + 1e-6


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _rows(summary: dict, key: str) -> list[tuple[int, dict]]:
    rows = summary.get(key) or []
    return [(i, r) for i, r in enumerate(rows) if isinstance(r, dict)]


def violations(summary: dict[str, Any]) -> Iterator[tuple[str, int, str, float, float]]:
    """(table, row, figure, value, limit) for every figure past its limit. Row -1: the table's total."""
    device = summary.get("device") or {}
    bandwidth_tbps = (_num(device.get("memory_gbps")) or 0.0) / 1e3
    # shares of a whole
    blocks = _rows(summary, "blocks")
    for i, r in blocks:
        if (_num(r.get("share")) or 0) > SHARE:
            yield "blocks", i, "share", r["share"], 1.0
    total = sum(_num(r.get("share")) or 0 for _, r in blocks)
    if total > SHARE:
        yield "blocks", -1, "sum of share", total, 1.0
    fix = summary.get("what_to_fix_first") or {}
    for name in ("ops", "kernels", "blocks"):
        for i, r in enumerate(fix.get(name) or []):
            if (_num(r.get("cumulative_share")) or 0) > SHARE:
                yield f"what_to_fix_first.{name}", i, "cumulative_share", r["cumulative_share"], 1.0
    for i, c in enumerate(fix.get("causes") or []):
        if (_num(c.get("share")) or 0) > SHARE:
            yield "what_to_fix_first.causes", i, "share", c["share"], 1.0
    idle = (fix.get("idle") or {}).get("categories") or []
    if sum(_num(r.get("share_of_window")) or 0 for r in idle) > SHARE:
        yield "what_to_fix_first.idle", -1, "share_of_window", sum(_num(r.get("share_of_window")) or 0 for r in idle), 1.0
    over = _num((summary.get("coverage") or {}).get("over_peak_kernels"))
    if over:  # single kernels above their roofline (each one's figure is in kernels.parquet)
        yield "activities", -1, "efficiency", over, 0.0
    coverage = _num((summary.get("coverage") or {}).get("modeled_share"))
    if coverage is not None and coverage > SHARE:
        yield "coverage", 0, "modeled_share", coverage, 1.0
    for i, r in _rows(summary, "overlap"):
        if (_num(r.get("overlap_share")) or 0) > SHARE:
            yield "overlap", i, "overlap_share", r["overlap_share"], 1.0
    for i, r in _rows(summary, "devices"):
        busy, span = _num(r.get("busy_ns")), _num(r.get("span_ns"))
        if busy is not None and span is not None and busy > span * SHARE:
            yield "devices", i, "busy_ns", busy, span
    # rates against the device
    for i, r in _rows(summary, "steps"):
        share = _num(r.get("bandwidth_share_peak"))
        if share is not None and share > RATE:
            yield "steps", i, "bandwidth_share_peak", share, 1.0
    for table, key in (("blocks", "blocks"), ("ops", "top_ops"), ("kernels", "top_kernels"), ("copies", "top_copies")):
        for i, r in _rows(summary, key):
            eff = _num(r.get("efficiency"))
            if eff is not None and eff > RATE:
                yield table, i, "efficiency", eff, 1.0
            tbps = _num(r.get("achieved_tbps"))
            if tbps is not None and bandwidth_tbps and r.get("bound") != "comm" and tbps > bandwidth_tbps * RATE:
                yield table, i, "achieved_tbps", tbps, bandwidth_tbps
    for i, r in _rows(summary, "collectives"):
        eff = _num(r.get("link_efficiency"))
        if eff is not None and eff > SHARE:
            yield "collectives", i, "link_efficiency", eff, 1.0
    # negative times (gpu_lag_ns is a signed difference by definition)
    for table, key in (("steps", "steps"), ("blocks", "blocks"), ("ops", "top_ops"), ("kernels", "top_kernels"), ("devices", "devices")):
        for i, r in _rows(summary, key):
            for field, value in r.items():
                if field.endswith("_ns") and field != "gpu_lag_ns" and (_num(value) or 0) < 0:
                    yield table, i, field, value, 0.0


def unflagged(summary: dict[str, Any]) -> list[tuple[str, int, str, float, float]]:
    """The violations the summary's `flags` do not list (matched by table, row and figure)."""
    flagged = {(f.get("table"), f.get("row"), f.get("figure")) for f in summary.get("flags") or []}
    return [v for v in violations(summary) if (v[0], v[1], v[2]) not in flagged]
