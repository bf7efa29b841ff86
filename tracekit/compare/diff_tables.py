"""What each diff table matches its rows by and compares: blocks by (phase, block), ops by
(name, input shapes), kernels by readable label (template noise and launch-bounds variants
of one kernel meet across runs), collectives by (type, message size) over process groups."""

from __future__ import annotations

import json
from typing import Any

from tracekit.compare.noise import Samples
from tracekit.compare.summary import number
from tracekit.common.format import MIN_COVERAGE  # an efficiency over less than half its time is unknown
from tracekit.trace.kernel_names import kernel_label

def _known(value: Any, coverage: float | None) -> float | None:
    """A figure over modeled kernels, None when they are less than half the time."""
    return number(value) if coverage is not None and coverage >= MIN_COVERAGE else None


def block_key(r: dict) -> tuple:
    return (("phase", r.get("phase")), ("block", r.get("block")))


def block_fields(r: dict) -> dict[str, Any]:
    coverage = number(r.get("coverage"))
    return {"time_ns": number(r.get("gpu_time_ns")), "share": number(r.get("share")), "count": r.get("count"),
            "flops": number(r.get("flops")), "bytes": number(r.get("bytes")),
            "efficiency": _known(r.get("efficiency"), coverage), "bound": r.get("bound"), "coverage": coverage}


def op_key(r: dict) -> tuple:
    shapes = r.get("shapes")
    if not isinstance(shapes, (str, type(None))):  # a list (a summary written by hand or by another tool): as its JSON text
        shapes = json.dumps(shapes, sort_keys=True, default=str)
    return (("op", r.get("op")), ("shapes", shapes))


def op_fields(r: dict) -> dict[str, Any]:
    # An op's efficiency is over its own kernels; t_min is known only for the costed ones.
    return {"time_ns": number(r.get("time_ns")), "calls": r.get("calls"), "flops": number(r.get("flops")),
            "bytes": number(r.get("bytes")), "efficiency": number(r.get("efficiency")), "bound": r.get("bound"),
            "samples": Samples.sketched(r.get("call_sketch_ns"), r.get("calls"))}


def kernels_by_label(rows: list[dict]) -> list[dict]:
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


def kernel_key(r: dict) -> tuple:
    return (("kernel", r["label"]),)


def kernel_fields(r: dict) -> dict[str, Any]:
    return {"time_ns": r["time_ns"], "count": r["count"], "calls": r["count"], "class": r["kernel_class"], "flops": r["flops"],
            "bytes": r["bytes"], "efficiency": r["efficiency"], "names": len(r["names"]), "samples": r["samples"]}


def collectives_by_size(rows: list[dict]) -> list[dict]:
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


def collective_key(r: dict) -> tuple:
    return (("collective", r["collective"]), ("message_bytes", r["message_bytes"]))


def collective_fields(r: dict) -> dict[str, Any]:
    return {"time_ns": r["time_ns"], "count": r["count"], "calls": r["count"],
            "busbw_gbps": r["busbw_sum"] / r["busbw_n"] if r["busbw_n"] else None}
