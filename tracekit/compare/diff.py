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
and its change is unknown, not the whole of its time."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any, Callable

from tracekit.compare.noise import DEFAULT_MIN_CHANGE, Samples, compare as noise
from tracekit.compare.summary import (as_summary, coverage_share, exposed_comm_share, label, listed_of, number,
                                      records, step_time_ns)
from tracekit.costs.unknown import MIN_COVERAGE  # an efficiency over less than half its time is unknown
from tracekit.trace.kernel_names import kernel_label
from tracekit.common.format import UNKNOWN

PER_CALL = "per call"


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
        "steps": _steps(bs, ns),
        "blocks": _blocks(b, n, block_mode, len(bs), len(ns)),
        "ops": _match(records(b, "top_ops"), records(n, "top_ops"), _op_key, _op_fields,
                      _complete(b, "top_ops"), _complete(n, "top_ops"), min_change=min_change),
        "kernels": _match(_by_label(records(b, "top_kernels")), _by_label(records(n, "top_kernels")), _kernel_key, _kernel_fields,
                          _complete(b, "top_kernels"), _complete(n, "top_kernels"), min_change=min_change),
        "collectives": _match(_by_size(records(b, "collectives")), _by_size(records(n, "collectives")), _collective_key,
                              _collective_fields, min_change=min_change),
        "warnings": [f"base: {w}" for w in b.get("warnings") or []] + [f"new: {w}" for w in n.get("warnings") or []],
    }


def step_kind(name: Any) -> str:
    """A step's kind: its name without the trailing number (`ProfilerStep#12` -> `ProfilerStep`)."""
    return re.sub(r"[\s#_:-]*\d+\s*$", "", str(name)) or str(name)


def same_steps(b: dict[str, Any], n: dict[str, Any]) -> tuple[bool, str]:
    """Whether both captures cover the same steps (the same number of each kind), and if not, why."""
    kb = Counter(step_kind(r.get("step")) for r in records(b, "steps"))
    kn = Counter(step_kind(r.get("step")) for r in records(n, "steps"))
    if not kb and not kn:
        return False, "neither capture marks steps, so totals depend on the capture window"
    if kb != kn:
        def count(c):
            return ", ".join(f"{v} {k}" for k, v in sorted(c.items())) or "no steps"
        return False, f"the captures cover different steps ({count(kb)} vs {count(kn)})"
    return True, ""


def _complete(summary: dict[str, Any], key: str) -> bool:
    total = listed_of(summary, key)
    return total is not None and total <= len(records(summary, key))


def _ratio(base: float | None, new: float | None) -> float | None:
    return new / base if base and new is not None else None


def _delta(base: float | None, new: float | None) -> float | None:
    return new - base if base is not None and new is not None else None


def _pair(metric: str, base: float | None, new: float | None, normalisation: str, compared: bool = True) -> dict[str, Any]:
    return {"metric": metric, "base": base, "new": new, "normalisation": normalisation, "compared": compared,
            "delta": _delta(base, new) if compared else None, "ratio": _ratio(base, new) if compared else None,
            "interval": None, "verdict": None}


def step_samples(s: dict[str, Any]) -> Samples | None:
    """Each step's duration: the samples behind the median step time."""
    return Samples.exact([number(r.get("duration_ns")) for r in records(s, "steps")])


def _totals(b: dict[str, Any], n: dict[str, Any], same: bool, min_change: float) -> list[dict[str, Any]]:
    def busy(s):
        values = [number(r.get("busy_ns")) for r in records(s, "devices")]
        return sum(values) if values and None not in values else None

    def efficiency(s):
        return number((s.get("coverage") or {}).get("efficiency")) if (coverage_share(s) or 0) >= MIN_COVERAGE else None

    step = _pair("step_time_ns", step_time_ns(b), step_time_ns(n), "median step")
    step.update(noise(step_samples(b), step_samples(n), step["ratio"], "median", min_change))
    return [
        step,
        _pair("gpu_busy_ns", busy(b), busy(n), "total", same),
        _pair("span_ns", number((b.get("trace") or {}).get("span_ns")), number((n.get("trace") or {}).get("span_ns")), "total", same),
        _pair("coverage", coverage_share(b), coverage_share(n), "share"),
        _pair("efficiency", efficiency(b), efficiency(n), "share"),
        _pair("exposed_comm_share", exposed_comm_share(b), exposed_comm_share(n), "share"),
        # GPU idle, in the ranked list's one denominator (step wall time, or first to last GPU
        # activity): its share always compares, its time only over the same steps
        _pair("gpu_idle_share", idle_share(b), idle_share(n), "share of " + _denominator(b, n)),
        _pair("gpu_idle_ns", idle_ns(b), idle_ns(n), "total", same),
        _pair("throughput", throughput(b), throughput(n), f"{_unit(b, n)} per second of step wall time"),
        _pair("iterations", float(len(records(b, "steps"))) if records(b, "steps") else None,
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


def _steps(bs: list[dict], ns: list[dict]) -> list[dict[str, Any]]:
    """The i-th step of a kind in one run against the i-th step of that kind in the other."""
    def by_kind(rows):
        out: dict[str, list[dict]] = {}
        for r in rows:
            out.setdefault(step_kind(r.get("step")), []).append(r)
        return out

    left, right = by_kind(bs), by_kind(ns)
    rows = []
    for kind in list(left) + [k for k in right if k not in left]:
        lk, rk = left.get(kind, []), right.get(kind, [])
        for i in range(max(len(lk), len(rk))):
            lr = lk[i] if i < len(lk) else None
            rr = rk[i] if i < len(rk) else None
            rows.append(_row({"kind": kind, "index": i}, _step_fields(lr), _step_fields(rr), True, True, None))
    return rows


def _step_fields(r: dict | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {"step": r.get("step"), "time_ns": number(r.get("duration_ns")), "busy_ns": number(r.get("busy_ns")), "bytes": number(r.get("bytes"))}


def _blocks(b: dict[str, Any], n: dict[str, Any], mode: str, steps_b: int, steps_n: int) -> list[dict[str, Any]]:
    rows = _match(records(b, "blocks"), records(n, "blocks"), _block_key, _block_fields)
    for r in rows:
        r["normalisation"] = mode
        if mode == "per step":
            for side, steps in (("base", steps_b), ("new", steps_n)):
                if r[side] is not None and r[side].get("time_ns") is not None:
                    r[side]["per_step_ns"] = r[side]["time_ns"] / steps
            bt = (r["base"] or {}).get("per_step_ns", 0.0 if r["only"] == "new" else None)
            nt = (r["new"] or {}).get("per_step_ns", 0.0 if r["only"] == "base" else None)
            r["delta_ns"], r["ratio"] = _delta(bt, nt), _ratio(bt, nt)
            r["impact_ns"] = r["delta_ns"]
        elif mode == "share of GPU time":
            r["delta_ns"], r["ratio"], r["impact_ns"] = None, None, None  # times over different windows: only shares compare
    key = (lambda r: -abs(r.get("delta_share") or 0.0)) if mode == "share of GPU time" else _sort_key
    return sorted(rows, key=key)


def _match(base: list[dict], new: list[dict], key: Callable[[dict], tuple], fields: Callable[[dict], dict],
           base_complete: bool = True, new_complete: bool = True, min_change: float | None = None) -> list[dict[str, Any]]:
    """Rows matched by `key`. With `min_change` the table is per call: `fields` give `calls`
    and may give `samples` (per-call durations), and delta and ratio are per call."""
    left = {key(r): r for r in base}
    right = {key(r): r for r in new}
    floor = {"base": _min_time(base), "new": _min_time(new)}
    rows = []
    for k in list(left) + [k for k in right if k not in left]:
        b, n = left.get(k), right.get(k)
        fb, fn = (fields(b) if b else None), (fields(n) if n else None)
        row = _row(dict(k), fb, fn, base_complete, new_complete, floor)
        if min_change is not None:
            _per_call(row, min_change)
        rows.append(row)
    return sorted(rows, key=_sort_key)


def _per_call(row: dict[str, Any], min_change: float) -> None:
    """Turn a matched row into a per-call comparison: delta and ratio of time per call; the
    totals' change kept as total_delta_ns / total_ratio; impact = Δ per call × new calls."""
    row["normalisation"] = PER_CALL
    row["total_delta_ns"], row["total_ratio"] = row["delta_ns"], row["ratio"]
    for side in ("base", "new"):
        f = row[side]
        if f is not None:
            calls, time = number(f.get("calls")), number(f.get("time_ns"))
            f["per_call_ns"] = time / calls if calls and time is not None else None
    b, n = row["base"], row["new"]
    samples = {"interval": None, "verdict": None, "samples": None}
    if b is not None and n is not None:
        bp, np_ = b["per_call_ns"], n["per_call_ns"]
        row["delta_ns"], row["ratio"] = _delta(bp, np_), _ratio(bp, np_)
        row["impact_ns"] = row["delta_ns"] * n["calls"] if row["delta_ns"] is not None and n.get("calls") else None
        samples = noise(b.pop("samples", None), n.pop("samples", None), row["ratio"], "mean", min_change)
    else:
        for f in (b, n):
            if f is not None:
                f.pop("samples", None)
        row["impact_ns"] = row["delta_ns"]  # only one side: the whole of its time (None when unlisted)
        row["ratio"] = None
    row.update(samples)


def _row(key: dict, b: dict | None, n: dict | None, base_complete: bool, new_complete: bool, floor: dict | None) -> dict[str, Any]:
    row: dict[str, Any] = {"key": key, "base": b, "new": n, "only": None, "unlisted": None}
    if b is None or n is None:
        missing = "base" if b is None else "new"
        complete = base_complete if missing == "base" else new_complete
        if complete:
            row["only"] = "new" if b is None else "base"
            zero = {"time_ns": 0.0}
            b, n = (b or zero), (n or zero)
        else:  # cut from that side's top list: it may be there, below the last listed time
            row["unlisted"] = missing
            row["below_ns"] = floor[missing] if floor else None
    bt = number(b.get("time_ns")) if b else None
    nt = number(n.get("time_ns")) if n else None
    row["delta_ns"] = _delta(bt, nt)
    row["ratio"] = _ratio(bt, nt)
    row["impact_ns"] = row["delta_ns"]
    if b and n and "efficiency" in b and "efficiency" in n:
        row["delta_efficiency"] = _delta(b.get("efficiency"), n.get("efficiency"))
    if b and n and "share" in b and "share" in n:
        row["delta_share"] = _delta(b.get("share"), n.get("share"))
    return row


def _sort_key(row: dict[str, Any]) -> float:
    if row.get("impact_ns") is not None:
        return -abs(row["impact_ns"])
    side = row["new"] or row["base"] or {}
    return -(number(side.get("time_ns")) or 0.0)


def _min_time(rows: list[dict]) -> float | None:
    times = [t for t in (number(r.get("time_ns")) for r in rows) if t is not None]
    return min(times) if times else None


def _known(value: Any, coverage: float | None) -> float | None:
    """A figure over modeled kernels, None when they are less than half the time."""
    return number(value) if coverage is not None and coverage >= MIN_COVERAGE else None


def _block_key(r: dict) -> tuple:
    return (("phase", r.get("phase")), ("block", r.get("block")))


def _block_fields(r: dict) -> dict[str, Any]:
    coverage = number(r.get("coverage"))
    return {"time_ns": number(r.get("gpu_time_ns")), "share": number(r.get("share")), "count": r.get("count"),
            "flops": number(r.get("flops")), "bytes": number(r.get("bytes")),
            "efficiency": _known(r.get("efficiency"), coverage), "bound": r.get("bound"), "coverage": coverage}


def _op_key(r: dict) -> tuple:
    shapes = r.get("shapes")
    if not isinstance(shapes, (str, type(None))):  # a list (a summary written by hand or by another tool): as its JSON text
        shapes = json.dumps(shapes, sort_keys=True, default=str)
    return (("op", r.get("op")), ("shapes", shapes))


def _op_fields(r: dict) -> dict[str, Any]:
    # An op's efficiency is over its own kernels; t_min is known only for the costed ones.
    return {"time_ns": number(r.get("time_ns")), "calls": r.get("calls"), "flops": number(r.get("flops")),
            "bytes": number(r.get("bytes")), "efficiency": number(r.get("efficiency")), "bound": r.get("bound"),
            "samples": Samples.sketched(r.get("call_sketch_ns"), r.get("calls"))}


def _by_label(rows: list[dict]) -> list[dict]:
    """Kernel rows merged by readable label: variants of one kernel meet across runs."""
    merged: dict[str, dict] = {}
    for r in rows:
        name = str(r.get("name"))
        key = kernel_label(name, 200)
        m = merged.setdefault(key, {"label": key, "names": [], "time_ns": 0.0, "count": 0, "t_min_ns": 0.0, "modeled_ns": 0.0,
                                    "flops": None, "bytes": None, "kernel_class": r.get("kernel_class"), "sketches": []})
        time = number(r.get("time_ns")) or 0.0
        m["names"].append(name)
        m["time_ns"] += time
        m["count"] += int(r.get("count") or 0)
        m["sketches"].append(Samples.sketched(r.get("duration_sketch_ns"), r.get("count")))
        if number(r.get("t_min_ns")) is not None:
            m["t_min_ns"] += number(r.get("t_min_ns"))
            m["modeled_ns"] += time
        for field in ("flops", "bytes"):
            if number(r.get(field)) is not None:
                m[field] = (m[field] or 0.0) + number(r.get(field))
    for m in merged.values():
        m["efficiency"] = m["t_min_ns"] / m["modeled_ns"] if m["modeled_ns"] and m["modeled_ns"] >= MIN_COVERAGE * m["time_ns"] else None
        # variants without a sketch (an older summary) leave the whole label without one
        m["samples"] = Samples.merged(m["sketches"]) if None not in m["sketches"] else None
    return list(merged.values())


def _kernel_key(r: dict) -> tuple:
    return (("kernel", r["label"]),)


def _kernel_fields(r: dict) -> dict[str, Any]:
    return {"time_ns": r["time_ns"], "count": r["count"], "calls": r["count"], "class": r["kernel_class"], "flops": r["flops"],
            "bytes": r["bytes"], "efficiency": r["efficiency"], "names": len(r["names"]), "samples": r["samples"]}


def _by_size(rows: list[dict]) -> list[dict]:
    """Collective rows merged over process groups: group names differ between runs."""
    merged: dict[tuple, dict] = {}
    for r in rows:
        key = (r.get("collective"), number(r.get("message_bytes")))
        m = merged.setdefault(key, {"collective": key[0], "message_bytes": key[1], "count": 0, "time_ns": 0.0, "busbw_sum": 0.0, "busbw_n": 0})
        count = int(r.get("count") or 0)
        m["count"] += count
        m["time_ns"] += number(r.get("time_ns")) or 0.0
        if number(r.get("busbw_gbps")) is not None:
            m["busbw_sum"] += number(r.get("busbw_gbps")) * count
            m["busbw_n"] += count
    return list(merged.values())


def _collective_key(r: dict) -> tuple:
    return (("collective", r["collective"]), ("message_bytes", r["message_bytes"]))


def _collective_fields(r: dict) -> dict[str, Any]:
    return {"time_ns": r["time_ns"], "count": r["count"], "calls": r["count"],
            "busbw_gbps": r["busbw_sum"] / r["busbw_n"] if r["busbw_n"] else None}


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
    median = _pair("median_rank_iteration_ns", number(sb.get("median_step_time_ns")), number(sn.get("median_step_time_ns")),
                   "median over ranks of each rank's host step ranges, summed (the loop's period, host work included)")
    # each rank's step time is the sum of its steps: compare per step where the ranks cover different steps
    step = _pair("step_time_ns", _median_step(runs[0]), _median_step(runs[1]), "median step GPU window over every rank's steps")
    step.update(noise(all_steps(0), all_steps(1), step["ratio"], "median", min_change))
    cross = [step, median,
             _pair("load_imbalance", number(sb.get("load_imbalance")), number(sn.get("load_imbalance")), "share"),
             _pair("max_collective_skew_ns", number(sb.get("max_collective_skew_ns")), number(sn.get("max_collective_skew_ns")), "per instance"),
             _pair("median_collective_skew_ns", number(sb.get("median_collective_skew_ns")), number(sn.get("median_collective_skew_ns")), "per instance")]
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
