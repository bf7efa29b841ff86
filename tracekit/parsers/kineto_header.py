"""The Kineto trace header -> the Trace's meta: devices, rank and world size, process groups,
the wall-clock origin and tool versions, each checked to be of the type tracekit needs."""

from __future__ import annotations

from typing import Any

from tracekit.parsers.columns import MAX_ABS_TIME_NS, Checks
from tracekit.parsers.kineto_columns import Clock
from tracekit.parsers.source import Source

_EPOCH_US = 1e15  # 2001-09-09 in microseconds since 1970: larger timestamps are wall-clock time


def _absolute_origin_ns(origin_us: float, base_ns: Any) -> int | None:
    """The capture's first event on the wall clock, so the ranks of one job share a clock:
    baseTimeNanoseconds + ts when the trace has a base; older traces write wall-clock
    microseconds directly. Integer arithmetic: ns since 1970 do not fit a float's 53 bits."""
    whole = int(origin_us)
    ns = whole * 1000 + round((origin_us - whole) * 1000)
    if isinstance(base_ns, int):
        return int(base_ns) + ns
    return ns if origin_us >= _EPOCH_US else None


_MAX_HEADER_TEXT = 256  # device names, versions: short by nature; a long one is not trusted whole
_VERSION_KEYS = ("cupti_version", "cuda_runtime_version", "cuda_driver_version", "hip_runtime_version", "roctracer_version")


def checked_header(header: dict[str, Any], checks: Checks) -> dict[str, Any]:
    """The header fields tracekit uses, each of the type it needs; a field of the wrong
    type (`"deviceProperties": 5`, a device name of 123, a rank of 2^70) is left out and
    named in a warning, never carried on to break a later stage."""
    bad: list[str] = []

    def integer(value: Any, field: str, lo: int = -(2**31), hi: int = 2**31 - 1) -> int | None:
        if value is None:
            return None
        if isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi:
            return value
        bad.append(field)
        return None

    def scalar(value: Any, field: str, kinds: tuple[type, ...] = (str, int, float)) -> Any:
        """A short string or a finite number, as it was written."""
        if value is None:
            return None
        if isinstance(value, kinds) and not isinstance(value, bool) and len(str(value)) <= _MAX_HEADER_TEXT and str(value) not in ("nan", "inf", "-inf"):
            return value
        bad.append(field)
        return None

    devices = []
    props = header.get("deviceProperties")
    if props is not None and not isinstance(props, list):
        bad.append("deviceProperties")
        props = None
    for prop in props or []:
        if not isinstance(prop, dict):
            bad.append("deviceProperties[]")
            continue
        devices.append({
            "id": integer(prop.get("id"), "deviceProperties.id"),
            "name": scalar(prop.get("name"), "deviceProperties.name", (str,)),
            "memory_bytes": integer(prop.get("totalGlobalMem"), "deviceProperties.totalGlobalMem", 0, 2**62),
            "sm_count": integer(prop.get("numSms"), "deviceProperties.numSms", 0),
            "major": integer(prop.get("computeMajor"), "deviceProperties.computeMajor"),
            "minor": integer(prop.get("computeMinor"), "deviceProperties.computeMinor"),
        })
    dist = header.get("distributedInfo")
    if dist is not None and not isinstance(dist, dict):
        bad.append("distributedInfo")
    dist = dist if isinstance(dist, dict) else {}
    groups = dist.get("pg_config")
    if groups is not None and not isinstance(groups, list):
        bad.append("distributedInfo.pg_config")
        groups = None
    groups = [g for g in groups or [] if isinstance(g, dict) and isinstance(g.get("pg_name"), (str, int))
              and integer(g.get("pg_size"), "distributedInfo.pg_config.pg_size", 1)]
    base = header.get("baseTimeNanoseconds")
    base = integer(base, "baseTimeNanoseconds", -MAX_ABS_TIME_NS, MAX_ABS_TIME_NS)
    schema_version = header.get("schemaVersion")
    checked = {
        "devices": devices,
        "rank": integer(dist.get("rank"), "distributedInfo.rank", 0),
        "world_size": integer(dist.get("world_size"), "distributedInfo.world_size", 1),
        "process_groups": groups or None,
        "base_ns": base,
        "schema_version": scalar(schema_version, "schemaVersion"),
        "record_shapes": header.get("record_shapes") if isinstance(header.get("record_shapes"), bool) else None,
        "versions": {k: v for k in _VERSION_KEYS if (v := scalar(header.get(k), k)) is not None},
    }
    if bad:
        fields = sorted(set(bad))
        checks.count(f"{{n}} trace header fields have the wrong type or an impossible value and were ignored ({', '.join(fields)})", len(bad))
    return checked


def kineto_meta(path: str, source: Source, header: dict[str, Any], legacy: bool, clock: Clock) -> dict[str, Any]:
    devices = [{
        "id": d["id"], "name": d["name"], "memory_bytes": d["memory_bytes"], "sm_count": d["sm_count"],
        "compute_capability": f"{d['major']}.{d['minor']}" if d["major"] is not None else None,
    } for d in header["devices"]]
    return {
        "format": "kineto",
        "schema": "kineto-2021" if legacy else "kineto",
        "schema_version": header["schema_version"],
        "path": path,
        "compressed": source.compressed,
        "size_bytes": len(source.data),
        "devices": devices,
        "rank": header["rank"],
        "world_size": header["world_size"],
        "process_groups": header["process_groups"],
        "span_ns": clock.span_ns,
        "capture_window_ns": clock.window,
        "origin_abs_ns": _absolute_origin_ns(clock.origin_us, header["base_ns"]),
        "record_shapes": header["record_shapes"],
        "tool_versions": header["versions"],
    }
