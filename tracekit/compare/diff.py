"""Diff two runs, like with like: steps, phase x block, ops, kernels and collectives side by side.

Two captures of one job rarely hold the same work: a fixed-length window holds 68 calls of a
kernel in one run and 60 in the other. So each table compares what does not depend on the
window (its `normalisation`, named in the output):

- steps: matched by kind (the name without its number: `ProfilerStep`) and order within
  the kind; the run's step time is the median step, with a bootstrap interval over steps;
- ops, kernels, collectives: per call (time / calls), with the call counts of both sides,
  and for ops and kernels an interval over the calls (tracekit.compare.noise) and a
  verdict: faster, slower or within noise;
- totals (GPU busy time, capture span, phase x block time): only when both captures cover
  the same steps (the same number of each kind); otherwise blocks compare per step (both
  have steps) or by share of GPU time (neither does), and totals are shown but not compared.

Items are matched by what stays the same between runs: ops by (name, input shapes),
kernels by their readable label (so template noise and launch-bounds variants of one kernel
meet), blocks by (phase, block), collectives by (type, message size). Each section is sorted
by the size of its change. An item on one side only is listed as such; when the other
side's list was cut (a stored summary keeps only its top N), the item is marked `unlisted`
and its change is unknown, not the whole of its time.

This module assembles the diff and its totals; rows are matched and compared in diff_rows,
each table's keys and fields are in diff_tables, steps in diff_steps, multi-rank runs in
diff_ranks."""

from __future__ import annotations

from typing import Any

from tracekit.compare.diff_rows import PER_CALL, delta, match_rows, metric_pair, ratio, by_impact
from tracekit.compare.diff_steps import match_steps, same_steps, step_samples
from tracekit.compare.diff_tables import (block_fields, block_key, collective_fields, collective_key, collectives_by_size,
                                         kernel_fields, kernel_key, kernels_by_label, op_fields, op_key)
from tracekit.compare.noise import DEFAULT_MIN_CHANGE, compare as noise
from tracekit.compare.summary import as_summary, coverage_share, exposed_comm_share, label, listed_of, number, records, step_time_ns
from tracekit.common.format import MIN_COVERAGE  # an efficiency over less than half its time is unknown


def diff(base: Any, new: Any, device: str | None = None, rules: str | None = None, min_change: float = DEFAULT_MIN_CHANGE,
         **options: Any) -> dict[str, Any]:
    """Compare two runs. Each side is an Analysis, a summary dict, a summary.json path or
    a trace path (analysed with `device`, `rules` and `options`: device_file, model,
    sustained, as tracekit.api.analyze takes them). Returns a JSON-ready dict."""
    b = as_summary(base, device=device, rules=rules, **options)
    n = as_summary(new, device=device, rules=rules, **options)
    return diff_summaries(b, n, min_change)


def diff_summaries(b: dict[str, Any], n: dict[str, Any], min_change: float = DEFAULT_MIN_CHANGE) -> dict[str, Any]:
    same, why = same_steps(b, n)
    bs, ns = records(b, "steps"), records(n, "steps")
    block_mode = "total" if same else ("per step" if bs and ns else "share of GPU time")
    return {
        "base": label(b), "new": label(n),
        "same_steps": same, "same_steps_reason": why, "min_change": min_change,
        "normalisation": {
            "totals": "total" if same else f"not compared: {why}",
            "step_time": "median step, interval over steps",
            "steps": "per step, matched by kind and order",
            "blocks": block_mode if block_mode != "per step" else f"per step (time / steps: {len(bs)} vs {len(ns)})",
            "ops": PER_CALL, "kernels": PER_CALL, "collectives": PER_CALL,
        },
        "totals": _totals(b, n, same, min_change),
        "steps": match_steps(bs, ns),
        "blocks": _blocks(b, n, block_mode, len(bs), len(ns)),
        "ops": match_rows(records(b, "top_ops"), records(n, "top_ops"), op_key, op_fields,
                      _complete(b, "top_ops"), _complete(n, "top_ops"), min_change=min_change),
        "kernels": match_rows(kernels_by_label(records(b, "top_kernels")), kernels_by_label(records(n, "top_kernels")), kernel_key, kernel_fields,
                          _complete(b, "top_kernels"), _complete(n, "top_kernels"), min_change=min_change),
        "collectives": match_rows(collectives_by_size(records(b, "collectives")), collectives_by_size(records(n, "collectives")), collective_key,
                              collective_fields, min_change=min_change),
        "warnings": [f"base: {w}" for w in b.get("warnings") or []] + [f"new: {w}" for w in n.get("warnings") or []]
                    + _step_sources(b, n),
    }


def _step_sources(b: dict[str, Any], n: dict[str, Any]) -> list[str]:
    """A warning where the two runs' steps came from different sources (tracekit.structure.steps):
    then a step of one is not a step of the other, and per-step figures compare unlike things."""
    sb, sn = ((s.get("trace") or {}).get("step_source") for s in (b, n))
    if sb == sn or sb is None and sn is None:
        return []
    return [f"the runs' steps come from different sources (base: {sb or 'none'}, new: {sn or 'none'}): per-step figures "
            "compare different units; name one with --step to compare like with like"]


def _complete(summary: dict[str, Any], key: str) -> bool:
    total = listed_of(summary, key)
    return total is not None and total <= len(records(summary, key))



def _totals(b: dict[str, Any], n: dict[str, Any], same: bool, min_change: float) -> list[dict[str, Any]]:
    def busy(s):
        values = [number(r.get("busy_ns")) for r in records(s, "devices")]
        return sum(values) if values and None not in values else None

    def efficiency(s):
        return number((s.get("coverage") or {}).get("efficiency")) if (coverage_share(s) or 0) >= MIN_COVERAGE else None

    step = metric_pair("step_time_ns", step_time_ns(b), step_time_ns(n), "median step")
    step.update(noise(step_samples(b), step_samples(n), step["ratio"], "median", min_change))
    return [
        step,
        metric_pair("gpu_busy_ns", busy(b), busy(n), "total", same),
        metric_pair("span_ns", number((b.get("trace") or {}).get("span_ns")), number((n.get("trace") or {}).get("span_ns")), "total", same),
        metric_pair("coverage", coverage_share(b), coverage_share(n), "share"),
        metric_pair("efficiency", efficiency(b), efficiency(n), "share"),
        metric_pair("exposed_comm_share", exposed_comm_share(b), exposed_comm_share(n), "share"),
        # GPU idle, in the ranked list's one denominator (step time, or first to last GPU
        # activity): its share always compares, its time only over the same steps
        metric_pair("gpu_idle_share", idle_share(b), idle_share(n), "share of " + _denominator(b, n)),
        metric_pair("gpu_idle_ns", idle_ns(b), idle_ns(n), "total", same),
        metric_pair("throughput", throughput(b), throughput(n), f"{_unit(b, n)} per second of step wall time"),
        metric_pair("iterations", float(len(records(b, "steps"))) if records(b, "steps") else None,
              float(len(records(n, "steps"))) if records(n, "steps") else None, "steps in the capture"),
    ]


def _causes(s: dict[str, Any]) -> list[dict]:
    return list((s.get("what_to_fix_first") or {}).get("causes") or [])


def idle_ns(s: dict[str, Any]) -> float | None:
    """GPU idle time of a run: the idle rows of its ranked list (inside and outside the steps'
    GPU windows); None for a summary without the ranked list."""
    fix = s.get("what_to_fix_first") or {}
    if "denominator_ns" not in fix:
        return None
    return float(sum(number(c.get("time_ns")) or 0.0 for c in _causes(s) if str(c.get("cause", "")).startswith("idle_")))


def idle_share(s: dict[str, Any]) -> float | None:
    total, of = idle_ns(s), number((s.get("what_to_fix_first") or {}).get("denominator_ns"))
    return total / of if total is not None and of else None


def _denominator(b: dict[str, Any], n: dict[str, Any]) -> str:
    names = {(s.get("what_to_fix_first") or {}).get("denominator") for s in (b, n)} - {None, ""}
    return " / ".join(sorted(names)) or "the run"


def throughput(s: dict[str, Any]) -> float | None:
    """Items (steps, samples, frames) per second over the steps' wall time (analysis.throughput)."""
    return number(((s.get("throughput") or {}).get("total") or {}).get("throughput"))


def _unit(b: dict[str, Any], n: dict[str, Any]) -> str:
    units = {((s.get("throughput") or {}).get("total") or {}).get("unit") for s in (b, n)} - {None, ""}
    return " / ".join(sorted(units)) or "steps"


def _blocks(b: dict[str, Any], n: dict[str, Any], mode: str, steps_b: int, steps_n: int) -> list[dict[str, Any]]:
    rows = match_rows(records(b, "blocks"), records(n, "blocks"), block_key, block_fields)
    for r in rows:
        r["normalisation"] = mode
        if mode == "per step":
            for side, steps in (("base", steps_b), ("new", steps_n)):
                if r[side] is not None and r[side].get("time_ns") is not None:
                    r[side]["per_step_ns"] = r[side]["time_ns"] / steps
            bt = (r["base"] or {}).get("per_step_ns", 0.0 if r["only"] == "new" else None)
            nt = (r["new"] or {}).get("per_step_ns", 0.0 if r["only"] == "base" else None)
            r["delta_ns"], r["ratio"] = delta(bt, nt), ratio(bt, nt)
            r["impact_ns"] = r["delta_ns"]
        elif mode == "share of GPU time":
            r["delta_ns"], r["ratio"], r["impact_ns"] = None, None, None  # times over different windows: only shares compare
    key = (lambda r: -abs(r.get("delta_share") or 0.0)) if mode == "share of GPU time" else by_impact
    return sorted(rows, key=key)
