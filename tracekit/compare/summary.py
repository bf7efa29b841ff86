"""The summary dict both diff and check read: from an Analysis, a trace, or a stored
summary.json; and the run-level figures taken from it (step time, exposed communication).

Unknown stays unknown: a figure that cannot be read from the summary is None, never 0."""

from __future__ import annotations

import os
import statistics
import sys
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
    # An Analysis exists only once its module is loaded: a diff or check of stored summaries
    # never imports the analysis (nor pandas) just to ask.
    result = sys.modules.get("tracekit.analysis.result")
    if result is not None and isinstance(source, result.Analysis):
        # as it would be stored (to_dict gives strict JSON values), so a diff of analyses and
        # a diff of their summary.json files are the same diff
        return source.to_dict(top or _everything(source))
    if isinstance(source, dict):
        _validate(source, "<summary>")
        return source
    path = os.fspath(source)
    stored = read_summary_file(path)
    if stored is not None:
        return stored
    from tracekit.analysis.load import analyze

    analysis = analyze(path, device=device, rules=rules, **{k: v for k, v in options.items() if v is not None})
    return analysis.to_dict(top or _everything(analysis))


def _everything(analysis) -> int:
    return max(len(analysis.ops), analysis.kernels["name"].nunique() if len(analysis.kernels) else 0, 1)


def read_summary_file(path: str) -> dict[str, Any] | None:
    """The summary stored at `path`, or None when the file is not a summary (a trace).
    A file that is a summary (it has `schema_version`) but is malformed is an error naming
    the key and the reason; so is a .json nested too deep or holding NaN or huge integers."""
    from tracekit.userfile import load_json

    if not os.path.isfile(path) or not path.endswith(".json"):
        return None
    if os.path.getsize(path) > _SUMMARY_MAX_BYTES:
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
            if any(key in head for key in _TRACE_KEYS):
                return None  # a Kineto trace: not worth decoding twice
            raw = head + f.read()
    except OSError:
        return None  # the trace parser gives the precise reason
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None  # not a summary (tracekit writes UTF-8): the trace parser says what it is
    if '"schema_version"' not in text:
        return None
    data = load_json(path, "summary.json", _SUMMARY_MAX_BYTES, text=text)
    if not isinstance(data, dict) or "traceEvents" in data or "schema_version" not in data:
        return None
    _validate(data, path)
    return data


# The shape diff and check read (docs/summary-schema.md): tables, lists of rows, and the
# fields whose type they rely on. "n": a finite number or null; "s": a string or null; "c": a
# count of calls, kernels, ranks: a whole number from 0 to 2**53 (the largest a float holds
# exactly; far beyond what a trace can hold) or null.
_COUNT_BITS = 53
_TABLES = {
    "trace": {"format": "s", "path": "s", "schema": "s", "span_ns": "n", "rank": "c", "world_size": "c", "tool_versions": "t",
              "step_source": "s"},
    "device": {"key": "s", "name": "s", "source": "s", "memory_gbps": "n", "sustained_bandwidth_factor": "n"},
    "coverage": {"modeled_share": "n", "efficiency": "n", "efficiency_sustained": "n", "kernel_time_ns": "n",
                 "modeled_time_ns": "n", "copies_time_ns": "n", "kernels": "c", "kernels_modeled": "c", "min_coverage": "n",
                 "over_peak_kernels": "c", "over_peak_share": "n", "modeled_share_by_source": "t", "top_unmodeled": "l"},
    "listed_of": {"top_kernels": "c", "top_ops": "c"},
    "what_to_fix_first": {},
}
_ROWS = {
    "blocks": {"phase": "s", "block": "s", "bound": "s", "gpu_time_ns": "n", "kernel_time_ns": "n", "share": "n", "count": "c",
               "coverage": "n", "efficiency": "n", "efficiency_sustained": "n", "flops": "n", "bytes": "n",
               "achieved_tbps": "n", "achieved_tflops": "n"},
    "steps": {"duration_ns": "n", "busy_ns": "n", "bytes": "n", "start_ns": "n", "coverage": "n", "kernels": "c"},
    "top_ops": {"op": "s", "bound": "s", "time_ns": "n", "calls": "c", "flops": "n", "bytes": "n", "efficiency": "n",
                "t_min_ns": "n", "coverage": "n", "kernels": "c"},
    "top_kernels": {"name": "s", "kernel_class": "s", "bound": "s", "time_ns": "n", "count": "c", "t_min_ns": "n", "flops": "n",
                    "bytes": "n", "efficiency": "n", "share": "n", "coverage": "n"},
    "collectives": {"collective": "s", "group": "s", "message_bytes": "n", "count": "c", "time_ns": "n", "busbw_gbps": "n",
                    "algbw_gbps": "n"},
    "devices": {"busy_ns": "n", "span_ns": "n", "idle_ns": "n", "kernel_time_ns": "n"},
    "overlap": {"exposed_ns": "n", "comm_ns": "n", "overlapped_ns": "n", "overlap_share": "n"},
}
_TEXTS = ("warnings", "headline")
# Row fields that hold a list: an op's input shapes (free-form), and the duration sketches
# diff and check resample (tracekit/compare/noise.py): lists of finite numbers.
_SKETCHES = ("duration_sketch_ns", "call_sketch_ns")
_KIND = {"n": "a finite number or null", "c": f"a count (a whole number from 0 to 2**{_COUNT_BITS}) or null", "s": "a string or null",
         "t": "a table or null", "l": "a list or null"}


def _validate(data: dict[str, Any], path: str) -> None:
    from tracekit.strict_json import SCHEMA_VERSION
    from tracekit.userfile import check_depth, finite, kind_of

    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise TraceError(path, "not a tracekit summary: schema_version is missing or not an integer")
    if version > SCHEMA_VERSION:
        raise TraceError(path, f"summary schema {version} is newer than this tracekit reads ({SCHEMA_VERSION}); upgrade tracekit")
    for key, kind in (("blocks", list), ("coverage", dict)):
        if not isinstance(data.get(key), kind):
            raise TraceError(path, f"not a tracekit summary: `{key}` is missing or not a {'list' if kind is list else 'table'}")
    check_depth(data, path, "summary.json")

    def bad(where: str, reason: str) -> TraceError:
        return TraceError(path, f"{where}: {reason}")

    def fields(where: str, table: dict, shape: dict[str, str]) -> None:
        for field, want in shape.items():
            value = table.get(field)
            if value is None:
                continue
            ok = {"n": finite(value) is not None, "c": _is_count(value), "s": isinstance(value, str),
                  "t": isinstance(value, dict), "l": isinstance(value, list)}[want]
            if not ok:
                raise bad(f"{where}.{field}", f"must be {_KIND[want]}, not {kind_of(value)}")

    def top(key: str, kind: type, what: str):
        """The value at `key`: None, or of `kind` (a table, a list)."""
        value = data.get(key)
        if value is not None and not isinstance(value, kind):
            raise bad(key, f"must be {what}, not {kind_of(value)}")
        return value

    def items(key: str, kind: type, what: str) -> list[tuple[str, Any]]:
        """(where, item) of the list at `key`, each of `kind`."""
        out = []
        for i, item in enumerate(top(key, list, f"a list of {what}s") or []):
            if not isinstance(item, kind):
                raise bad(f"{key}[{i}]", f"must be a {what}, not {kind_of(item)}")
            out.append((f"{key}[{i}]", item))
        return out

    for key, shape in _TABLES.items():
        table = top(key, dict, "a table")
        if table is not None:
            fields(key, table, shape)
    for key, shape in _ROWS.items():
        for where, row in items(key, dict, "table"):
            fields(where, row, shape)
            for field, value in row.items():
                if field in _SKETCHES and value is not None:
                    if not isinstance(value, list) or any(finite(v) is None for v in value):
                        raise bad(f"{where}.{field}", f"must be a list of finite numbers or null, not {kind_of(value)}")
                elif field == "shapes":  # free-form, but text or a list: diff matches ops by it
                    if value is not None and not isinstance(value, (str, list)):
                        raise bad(f"{where}.{field}", f"must be the op's input shapes (a string or a list) or null, not {kind_of(value)}")
                elif isinstance(value, (dict, list)):
                    raise bad(f"{where}.{field}", f"must be a single value, not {kind_of(value)}")
    for key in _TEXTS:
        items(key, str, "string")
    # Anywhere else: no number a float cannot hold (a 400-digit integer), no non-finite float.
    stack = [(data, "$")]
    while stack:
        item, where = stack.pop()
        if isinstance(item, dict):
            stack.extend((v, f"{where}.{k}") for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(item))
        elif isinstance(item, (int, float)) and not isinstance(item, bool) and finite(item) is None:
            raise bad(where.removeprefix("$."), "a number beyond a float's range" if isinstance(item, int) else "not a finite number")


def _is_count(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, float) and not (value == value and abs(value) != float("inf") and value.is_integer()):
        return False
    return 0 <= value <= 2 ** _COUNT_BITS


def records(summary: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """A list of records from the summary, keeping only dict rows (a hand-edited file may hold others)."""
    rows = summary.get(key)
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def number(value: Any) -> float | None:
    """A finite number, else None (unknown)."""
    from tracekit.userfile import finite

    return finite(value)


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
