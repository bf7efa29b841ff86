"""Steps across two runs: a step's kind (its name without the number), whether both captures
cover the same steps (then totals compare), and the i-th step of a kind in one run against
the i-th step of that kind in the other."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from tracekit.compare.diff_rows import matched_row
from tracekit.compare.noise import Samples
from tracekit.compare.summary import number, records

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


def step_samples(s: dict[str, Any]) -> Samples | None:
    """Each step's duration: the samples behind the median step time."""
    return Samples.exact([number(r.get("duration_ns")) for r in records(s, "steps")])


def match_steps(bs: list[dict], ns: list[dict]) -> list[dict[str, Any]]:
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
            rows.append(matched_row({"kind": kind, "index": i}, _step_fields(lr), _step_fields(rr), True, True, None))
    return rows


def _step_fields(r: dict | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {"step": r.get("step"), "time_ns": number(r.get("duration_ns")), "busy_ns": number(r.get("busy_ns")), "bytes": number(r.get("bytes"))}
