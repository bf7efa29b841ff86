"""The summary dict both diff and check read: from an Analysis, a trace, or a stored
summary.json; and the run-level figures taken from it (step time, exposed communication).

Unknown stays unknown: a figure that cannot be read from the summary is None, never 0."""

from __future__ import annotations

import json
import os
import statistics
from typing import Any

from tracekit.errors import TraceError

# A summary.json is small (tens of kB); a .json bigger than this is a trace, not read twice.
_SUMMARY_MAX_BYTES = 64 << 20
# Keys a Kineto trace opens with (a summary has none of them).
_TRACE_KEYS = (b'"traceEvents"', b'"schemaVersion"', b'"deviceProperties"')


def as_summary(source: Any, device: str | None = None, rules: str | None = None, top: int | None = None,
               **options: Any) -> dict[str, Any]:
    """A summary dict from an Analysis, a summary dict, a summary.json path or a trace path.
    Analyses give every op and kernel (not just the `top` ones, unless `top` is given), so
    nothing is cut off. `options` go to tracekit.api.analyze (device_file, model, sustained)."""
    from tracekit.analysis import Analysis

    if isinstance(source, Analysis):
        return source.to_dict(top or _everything(source))
    if isinstance(source, dict):
        _validate(source, "<summary>")
        return source
    path = os.fspath(source)
    stored = read_summary_file(path)
    if stored is not None:
        return stored
    from tracekit.api import analyze

    analysis = analyze(path, device=device, rules=rules, **{k: v for k, v in options.items() if v is not None})
    return analysis.to_dict(top or _everything(analysis))


def _everything(analysis) -> int:
    return max(len(analysis.ops), analysis.kernels["name"].nunique() if len(analysis.kernels) else 0, 1)


def read_summary_file(path: str) -> dict[str, Any] | None:
    """The summary stored at `path`, or None when the file is not a summary (a trace)."""
    if not os.path.isfile(path) or not path.endswith(".json"):
        return None
    if os.path.getsize(path) > _SUMMARY_MAX_BYTES:
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
            if any(key in head for key in _TRACE_KEYS):
                return None  # a Kineto trace: not worth decoding twice
            data = json.loads(head + f.read())
    except (OSError, ValueError):
        return None  # not JSON we can read: the trace parser gives the precise reason
    if not isinstance(data, dict) or "traceEvents" in data or "schema_version" not in data:
        return None
    _validate(data, path)
    return data


def _validate(data: dict[str, Any], path: str) -> None:
    from tracekit.analysis import SCHEMA_VERSION

    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise TraceError(path, "not a tracekit summary: schema_version is missing or not an integer")
    if version > SCHEMA_VERSION:
        raise TraceError(path, f"summary schema {version} is newer than this tracekit reads ({SCHEMA_VERSION}); upgrade tracekit")
    for key, kind in (("blocks", list), ("coverage", dict)):
        if not isinstance(data.get(key), kind):
            raise TraceError(path, f"not a tracekit summary: `{key}` is missing or not a {kind.__name__}")


def records(summary: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """A list of records from the summary, keeping only dict rows (a hand-edited file may hold others)."""
    rows = summary.get(key)
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def number(value: Any) -> float | None:
    """A finite number, else None (unknown)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value == value and abs(value) != float("inf") else None


def step_time_ns(summary: dict[str, Any]) -> float | None:
    """The median step duration: robust to the warm-up step a capture often includes.
    None when the trace marks no steps."""
    durations = [d for d in (number(r.get("duration_ns")) for r in records(summary, "steps")) if d is not None]
    return float(statistics.median(durations)) if durations else None


def exposed_comm_share(summary: dict[str, Any]) -> float | None:
    """Communication time no compute kernel hides, over the devices' capture span.
    0 when there is no communication at all (that is measured, not unknown)."""
    exposed = [number(r.get("exposed_ns")) for r in records(summary, "overlap")]
    spans = [number(r.get("span_ns")) for r in records(summary, "devices")]
    if not spans or None in spans or None in exposed or not sum(spans):
        return None
    return sum(exposed) / sum(spans)


def coverage_share(summary: dict[str, Any]) -> float | None:
    return number((summary.get("coverage") or {}).get("modeled_share"))


def listed_of(summary: dict[str, Any], key: str) -> int | None:
    """How many items the full list behind `key` (top_kernels / top_ops) holds; None when the
    summary does not say (written before tracekit recorded it)."""
    return (summary.get("listed_of") or {}).get(key)


def label(summary: dict[str, Any]) -> dict[str, Any]:
    trace = summary.get("trace") or {}
    device = summary.get("device") or {}
    return {"path": trace.get("path"), "format": trace.get("format"), "rank": trace.get("rank"),
            "device": device.get("name"), "device_key": device.get("key")}
