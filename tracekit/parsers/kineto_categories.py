"""Kineto's event categories -> the tables they become (kernel, copy and memset activity,
runtime calls, CPU ops, ranges of three domains, the profiler's window), in both schemas:
the current one (`kernel`, `cpu_op`, `cuda_runtime`, ...) and the 2021 one (`Kernel`,
`Operator`, `Runtime`, ...), where record_function ranges are `Operator` events told by name."""

from __future__ import annotations

import re
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np

from tracekit.parsers.kineto_decode import Event
from tracekit.trace.schema import GPU_KINDS
from tracekit.trace.tables import Interner

# Event category -> what it becomes. Both schemas; matched case-insensitively.
_CATEGORY_KIND = {
    "kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset", "memset": "memset",
    "cuda_runtime": "launch", "cuda_driver": "launch", "runtime": "launch", "driver": "launch",
    "cpu_op": "op", "operator": "op",
    "user_annotation": "range:user", "gpu_user_annotation": "range:gpu", "python_function": "range:python",
    "trace": "window",
}
_KIND_LABELS = np.array(["", *dict.fromkeys(_CATEGORY_KIND.values())], dtype=object)  # "" first: not read
_KIND_CODE = {label: code for code, label in enumerate(_KIND_LABELS)}
RANGE_DOMAINS = ("user", "gpu", "python")

# In the 2021 schema record_function ranges are `Operator` events too.
_LEGACY_USER_RANGE = re.compile(r"^ProfilerStep#\d+$|#|^## .* ##$")
_CAT = attrgetter("cat")


def bucket(events: list[Event]) -> dict[str, Any]:
    """Events by what they become, in file order; 2021 user ranges moved to ranges.
    Categories are factorised in C rather than looked up event by event. GPU activities and
    ranges stay in one list each, in file order, with their kinds beside them: how a file is
    cut into chunks (or pieces for worker processes) then never changes a table's order."""
    buckets: dict[str, Any] = {}
    if not events:
        return buckets
    interner = Interner()
    codes = interner.codes(list(map(_CAT, events)))
    categories = interner.values
    # Kinds as small integer codes (comparisons in C), made object labels only for the
    # GPU and range buckets that keep them.
    kind_codes = np.array([_KIND_CODE[_CATEGORY_KIND.get(str(c).lower(), "")] for c in categories] + [0], dtype=np.int8)[codes]
    legacy = np.array([c == "Operator" for c in categories] + [False])[codes]
    if legacy.any():
        # The 2021 schema: record_function ranges are `Operator` events too, told by name.
        buckets["legacy"] = []  # a marker: this is the 2021 schema
        for i in np.flatnonzero(legacy):
            if _LEGACY_USER_RANGE.search(events[i].name):
                kind_codes[i] = _KIND_CODE["range:user"]
    # Each bucket: (its events, their rows in the chunk, their kinds).
    for kind in ("launch", "op", "window"):
        rows = np.flatnonzero(kind_codes == _KIND_CODE[kind])
        if len(rows):
            buckets[kind] = (_take(events, rows), rows, None)
    for group, members in (("gpu", GPU_KINDS), ("range", tuple(f"range:{d}" for d in RANGE_DOMAINS))):
        rows = np.flatnonzero(np.isin(kind_codes, [_KIND_CODE[m] for m in members]))
        if len(rows):
            buckets[group] = (_take(events, rows), rows, _KIND_LABELS[kind_codes[rows]])
    return buckets


def range_domains(kinds: np.ndarray) -> np.ndarray:
    """Range kinds ("range:python", ...) -> their domains ("python", ...): one comparison per
    domain, not a string slice per event."""
    domains = np.empty(len(kinds), dtype=object)
    for d in RANGE_DOMAINS:
        domains[kinds == f"range:{d}"] = d
    return domains


def _take(events: list[Event], rows: np.ndarray) -> list[Event]:
    return [events[rows[0]]] if len(rows) == 1 else list(itemgetter(*rows.tolist())(events))


def label_codes(values: np.ndarray, categories: tuple[str, ...]) -> np.ndarray:
    """Labels from a short fixed list -> their positions (int8)."""
    out = np.zeros(len(values), dtype=np.int8)
    for i, label in enumerate(categories[1:], start=1):
        out[values == label] = i
    return out
