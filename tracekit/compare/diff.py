"""Diff two runs: steps, phase x block, ops, kernels and collectives side by side.

Items are matched by what stays the same between runs: ops by (name, input shapes),
kernels by their readable label (so template noise and launch-bounds variants of one kernel
meet), blocks by (phase, block), steps by order, collectives by (type, message size). Each
section is sorted by the absolute change in time. An item on one side only is listed as
such; when the other side's list was cut (a stored summary keeps only its top N), the item
is marked `unlisted` and its change is unknown, not the whole of its time."""

from __future__ import annotations

from typing import Any, Callable

from tracekit.costs.unknown import MIN_COVERAGE  # an efficiency over less than half its time is unknown
from tracekit.compare.summary import (as_summary, coverage_share, exposed_comm_share, label, listed_of, number,
                                      records, step_time_ns)
from tracekit.reports.format import kernel_label



def diff(base: Any, new: Any, device: str | None = None, rules: str | None = None) -> dict[str, Any]:
    """Compare two runs. Each side is an Analysis, a summary dict, a summary.json path or
    a trace path. Returns a JSON-ready dict (see `sections`)."""
    b = as_summary(base, device=device, rules=rules)
    n = as_summary(new, device=device, rules=rules)
    return {
        "base": label(b), "new": label(n),
        "totals": _totals(b, n),
        "steps": _steps(b, n),
        "blocks": _match(records(b, "blocks"), records(n, "blocks"), _block_key, _block_fields),
        "ops": _match(records(b, "top_ops"), records(n, "top_ops"), _op_key, _op_fields,
                      _complete(b, "top_ops"), _complete(n, "top_ops")),
        "kernels": _match(_by_label(records(b, "top_kernels")), _by_label(records(n, "top_kernels")), _kernel_key, _kernel_fields,
                          _complete(b, "top_kernels"), _complete(n, "top_kernels")),
        "collectives": _match(_by_size(records(b, "collectives")), _by_size(records(n, "collectives")), _collective_key, _collective_fields),
        "warnings": [f"base: {w}" for w in b.get("warnings") or []] + [f"new: {w}" for w in n.get("warnings") or []],
    }




def _complete(summary: dict[str, Any], key: str) -> bool:
    total = listed_of(summary, key)
    return total is not None and total <= len(records(summary, key))


def _ratio(base: float | None, new: float | None) -> float | None:
    return new / base if base and new is not None else None


def _delta(base: float | None, new: float | None) -> float | None:
    return new - base if base is not None and new is not None else None


def _pair(metric: str, base: float | None, new: float | None) -> dict[str, Any]:
    return {"metric": metric, "base": base, "new": new, "delta": _delta(base, new), "ratio": _ratio(base, new)}


def _totals(b: dict[str, Any], n: dict[str, Any]) -> list[dict[str, Any]]:
    def busy(s):
        values = [number(r.get("busy_ns")) for r in records(s, "devices")]
        return sum(values) if values and None not in values else None

    def efficiency(s):
        return number((s.get("coverage") or {}).get("efficiency")) if (coverage_share(s) or 0) >= MIN_COVERAGE else None

    return [
        _pair("step_time_ns", step_time_ns(b), step_time_ns(n)),
        _pair("gpu_busy_ns", busy(b), busy(n)),
        _pair("span_ns", number((b.get("trace") or {}).get("span_ns")), number((n.get("trace") or {}).get("span_ns"))),
        _pair("coverage", coverage_share(b), coverage_share(n)),
        _pair("efficiency", efficiency(b), efficiency(n)),
        _pair("exposed_comm_share", exposed_comm_share(b), exposed_comm_share(n)),
    ]


def _steps(b: dict[str, Any], n: dict[str, Any]) -> list[dict[str, Any]]:
    """Steps in capture order: the i-th step of one run against the i-th of the other."""
    bs, ns = records(b, "steps"), records(n, "steps")
    rows = []
    for i in range(max(len(bs), len(ns))):
        left = bs[i] if i < len(bs) else None
        right = ns[i] if i < len(ns) else None
        rows.append(_row({"index": i}, _step_fields(left), _step_fields(right), True, True, None))
    return rows


def _step_fields(r: dict | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {"step": r.get("step"), "time_ns": number(r.get("duration_ns")), "busy_ns": number(r.get("busy_ns")), "bytes": number(r.get("bytes"))}


def _match(base: list[dict], new: list[dict], key: Callable[[dict], tuple], fields: Callable[[dict], dict],
           base_complete: bool = True, new_complete: bool = True) -> list[dict[str, Any]]:
    left = {key(r): r for r in base}
    right = {key(r): r for r in new}
    floor = {"base": _min_time(base), "new": _min_time(new)}
    rows = []
    for k in list(left) + [k for k in right if k not in left]:
        b, n = left.get(k), right.get(k)
        rows.append(_row(dict(k), fields(b) if b else None, fields(n) if n else None, base_complete, new_complete, floor))
    return sorted(rows, key=_sort_key)


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
    if b and n and "efficiency" in b and "efficiency" in n:
        row["delta_efficiency"] = _delta(b.get("efficiency"), n.get("efficiency"))
    if b and n and "share" in b and "share" in n:
        row["delta_share"] = _delta(b.get("share"), n.get("share"))
    return row


def _sort_key(row: dict[str, Any]) -> float:
    if row["delta_ns"] is not None:
        return -abs(row["delta_ns"])
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
    return (("op", r.get("op")), ("shapes", r.get("shapes")))


def _op_fields(r: dict) -> dict[str, Any]:
    # An op's efficiency is over its own kernels; t_min is known only for the costed ones.
    return {"time_ns": number(r.get("time_ns")), "calls": r.get("calls"), "flops": number(r.get("flops")),
            "bytes": number(r.get("bytes")), "efficiency": number(r.get("efficiency")), "bound": r.get("bound")}


def _by_label(rows: list[dict]) -> list[dict]:
    """Kernel rows merged by readable label: variants of one kernel meet across runs."""
    merged: dict[str, dict] = {}
    for r in rows:
        name = str(r.get("name"))
        key = kernel_label(name, 200)
        m = merged.setdefault(key, {"label": key, "names": [], "time_ns": 0.0, "count": 0, "t_min_ns": 0.0, "modeled_ns": 0.0,
                                    "flops": None, "bytes": None, "kernel_class": r.get("kernel_class")})
        time = number(r.get("time_ns")) or 0.0
        m["names"].append(name)
        m["time_ns"] += time
        m["count"] += int(r.get("count") or 0)
        if number(r.get("t_min_ns")) is not None:
            m["t_min_ns"] += number(r.get("t_min_ns"))
            m["modeled_ns"] += time
        for field in ("flops", "bytes"):
            if number(r.get(field)) is not None:
                m[field] = (m[field] or 0.0) + number(r.get(field))
    for m in merged.values():
        m["efficiency"] = m["t_min_ns"] / m["modeled_ns"] if m["modeled_ns"] and m["modeled_ns"] >= MIN_COVERAGE * m["time_ns"] else None
    return list(merged.values())


def _kernel_key(r: dict) -> tuple:
    return (("kernel", r["label"]),)


def _kernel_fields(r: dict) -> dict[str, Any]:
    return {"time_ns": r["time_ns"], "count": r["count"], "class": r["kernel_class"], "flops": r["flops"], "bytes": r["bytes"],
            "efficiency": r["efficiency"], "names": len(r["names"])}


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
    return {"time_ns": r["time_ns"], "count": r["count"], "busbw_gbps": r["busbw_sum"] / r["busbw_n"] if r["busbw_n"] else None}
