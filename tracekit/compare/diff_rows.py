"""Two lists of rows (ops, kernels, blocks, collectives, steps) matched by a key, and the
change of each matched row: delta and ratio of its time, in total or per call
(time / calls, with the interval and verdict of tracekit.compare.noise), and what is known
when an item stands on one side only (`only`) or was cut from a side's top list
(`unlisted`: its change is unknown, not the whole of its time)."""

from __future__ import annotations

from typing import Any, Callable

from tracekit.compare.noise import compare as noise
from tracekit.compare.summary import number

PER_CALL = "per call"


def ratio(base: float | None, new: float | None) -> float | None:
    return new / base if base and new is not None else None


def delta(base: float | None, new: float | None) -> float | None:
    return new - base if base is not None and new is not None else None


def metric_pair(metric: str, base: float | None, new: float | None, normalisation: str, compared: bool = True) -> dict[str, Any]:
    return {"metric": metric, "base": base, "new": new, "normalisation": normalisation, "compared": compared,
            "delta": delta(base, new) if compared else None, "ratio": ratio(base, new) if compared else None,
            "interval": None, "verdict": None}


def match_rows(base: list[dict], new: list[dict], key: Callable[[dict], tuple], fields: Callable[[dict], dict],
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
        row = matched_row(dict(k), fb, fn, base_complete, new_complete, floor)
        if min_change is not None:
            _per_call(row, min_change)
        rows.append(row)
    return sorted(rows, key=by_impact)


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
        row["delta_ns"], row["ratio"] = delta(bp, np_), ratio(bp, np_)
        row["impact_ns"] = row["delta_ns"] * n["calls"] if row["delta_ns"] is not None and n.get("calls") else None
        samples = noise(b.pop("samples", None), n.pop("samples", None), row["ratio"], "mean", min_change)
    else:
        for f in (b, n):
            if f is not None:
                f.pop("samples", None)
        row["impact_ns"] = row["delta_ns"]  # only one side: the whole of its time (None when unlisted)
        row["ratio"] = None
    row.update(samples)


def matched_row(key: dict, b: dict | None, n: dict | None, base_complete: bool, new_complete: bool, floor: dict | None) -> dict[str, Any]:
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
    row["delta_ns"] = delta(bt, nt)
    row["ratio"] = ratio(bt, nt)
    row["impact_ns"] = row["delta_ns"]
    if b and n and "efficiency" in b and "efficiency" in n:
        row["delta_efficiency"] = delta(b.get("efficiency"), n.get("efficiency"))
    if b and n and "share" in b and "share" in n:
        row["delta_share"] = delta(b.get("share"), n.get("share"))
    return row


def by_impact(row: dict[str, Any]) -> float:
    if row.get("impact_ns") is not None:
        return -abs(row["impact_ns"])
    side = row["new"] or row["base"] or {}
    return -(number(side.get("time_ns")) or 0.0)


def _min_time(rows: list[dict]) -> float | None:
    times = [t for t in (number(r.get("time_ns")) for r in rows) if t is not None]
    return min(times) if times else None
