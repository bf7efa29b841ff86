"""torch.profiler / Kineto JSON -> Trace.

Handles the current schema (`kernel`, `cpu_op`, `cuda_runtime`, ...) and the 2021 one
(`Kernel`, `Operator`, `Runtime`, ...), NVIDIA and AMD. Parsing only: linking kernels to
launches and ops is link.py's job.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import msgspec
import numpy as np
import pandas as pd

from tracekit.errors import TraceError
from tracekit.parsers.kineto_decode import Decoded, Event, decode
from tracekit.parsers.source import read_source
from tracekit.trace import KERNEL_COLUMNS, LAUNCH_COLUMNS, OP_COLUMNS, RANGE_COLUMNS, Trace, make_table

# Event category -> what it becomes. Both schemas; matched case-insensitively.
_CATEGORY_KIND = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
    "cuda_runtime": "launch",
    "cuda_driver": "launch",
    "runtime": "launch",
    "driver": "launch",
    "cpu_op": "op",
    "operator": "op",
    "user_annotation": "range:user",
    "gpu_user_annotation": "range:gpu",
    "python_function": "range:python",
    "trace": "window",
}
_GPU_KINDS = ("kernel", "memcpy", "memset")

# Runtime/driver calls that put work on a GPU (the rest are queries and syncs).
LAUNCH_API = re.compile(
    r"LaunchKernel|LaunchCooperativeKernel|GraphLaunch|Memcpy|Memset|ModuleLaunch|ExtLaunch|cuLaunch",
)
# In the 2021 schema record_function ranges are `Operator` events too.
_LEGACY_USER_RANGE = re.compile(r"^ProfilerStep#\d+$|#|^## .* ##$")
_COPY_KIND = re.compile(r"Memcpy (\w+)")
_TRAILING_INT = re.compile(r"(-?\d+)\s*$")


class _KernelArgs(msgspec.Struct):
    correlation: int = -1
    device: int = -1
    stream: int = -1
    grid: list[int] = []
    block: list[int] = []
    registers: int = msgspec.field(name="registers per thread", default=-1)
    shared_memory: int = msgspec.field(name="shared memory", default=-1)
    bytes: int = -1
    kind: str = ""  # AMD: "Dispatch Kernel", "DtoH", ...
    collective: str | None = msgspec.field(name="Collective name", default=None)
    in_elems: int = msgspec.field(name="In msg nelems", default=-1)
    out_elems: int = msgspec.field(name="Out msg nelems", default=-1)
    group_size: int = msgspec.field(name="Group size", default=-1)
    dtype: str | None = None
    group: str | None = msgspec.field(name="Process Group Name", default=None)


class _LaunchArgs(msgspec.Struct):
    correlation: int = -1


class _OpArgs(msgspec.Struct):
    input_dims: list[Any] | None = msgspec.field(name="Input Dims", default=None)
    input_types: list[Any] | None = msgspec.field(name="Input type", default=None)
    concrete_inputs: list[Any] | None = msgspec.field(name="Concrete Inputs", default=None)
    external_id: int = msgspec.field(name="External id", default=-1)
    sequence: int = msgspec.field(name="Sequence number", default=-1)


def parse_kineto(path: str) -> Trace:
    source = read_source(path)
    decoded = decode(path, source.data)
    warnings = source.warnings + decoded.warnings
    buckets = _bucket(decoded.events)
    del decoded.events
    if not any(buckets[k] for k in _GPU_KINDS + ("launch", "op", "range:user", "range:python")):
        raise TraceError(path, "no profiler events: `traceEvents` holds no kernels, ops, runtime calls or ranges")
    clock = _Clock.from_buckets(buckets)
    bad_args = _BadArgs()
    kernels = _kernel_table(buckets, clock, bad_args)
    launches = _launch_table(buckets["launch"], clock, set(kernels["correlation"].tolist()), bad_args)
    legacy_ranges = [e for e in buckets["op"] if _LEGACY_USER_RANGE.search(e.name)] if _is_legacy(buckets) else []
    if legacy_ranges:
        names = {id(e) for e in legacy_ranges}
        buckets["op"] = [e for e in buckets["op"] if id(e) not in names]
        buckets["range:user"].extend(legacy_ranges)
    ops = _op_table(buckets["op"], clock, bad_args)
    ranges = _range_table(buckets, clock)
    meta = _meta(path, source, decoded, buckets, clock)
    if meta.get("rank") is not None:
        kernels["rank"] = np.int32(meta["rank"])
    warnings += bad_args.warnings()
    return Trace(kernels, launches, ops, ranges, meta, warnings)


def _bucket(events: list[Event]) -> dict[str, list[Event]]:
    buckets: dict[str, list[Event]] = {k: [] for k in set(_CATEGORY_KIND.values())}
    kind_of: dict[str, str | None] = {}
    for event in events:
        cat = event.cat
        kind = kind_of.get(cat, "")
        if kind == "":
            kind = kind_of[cat] = _CATEGORY_KIND.get(cat.lower())
        if kind is not None and event.ph == "X":
            buckets[kind].append(event)
    return buckets


def _is_legacy(buckets: dict[str, list[Event]]) -> bool:
    return any(e.cat == "Operator" for e in buckets["op"][:1])


class _Clock:
    """Kineto microseconds (floats) -> int64 ns from the earliest event."""

    def __init__(self, origin_us: float, last_us: float, window: tuple[float, float] | None):
        self.origin_us = origin_us
        self.span_ns = round((last_us - origin_us) * 1000)
        self.window = window

    @classmethod
    def from_buckets(cls, buckets: dict[str, list[Event]]) -> "_Clock":
        filled = [evs for evs in buckets.values() if evs]
        first = min(min(e.ts for e in evs) for evs in filled)
        last = max(max(e.ts + max(e.dur, 0.0) for e in evs) for evs in filled)
        window = None
        if buckets["window"]:
            w = min(buckets["window"], key=lambda e: e.ts)
            window = (w.ts, w.ts + w.dur)
        return cls(first, last, window)

    def ns(self, us: np.ndarray) -> np.ndarray:
        return np.rint((us - self.origin_us) * 1000.0).astype(np.int64)

    def start_end(self, events: list[Event]) -> tuple[np.ndarray, np.ndarray]:
        ts = np.fromiter((e.ts for e in events), dtype=np.float64, count=len(events))
        dur = np.fromiter((e.dur for e in events), dtype=np.float64, count=len(events))
        start = self.ns(ts)
        return start, start + np.rint(np.maximum(dur, 0.0) * 1000.0).astype(np.int64)


class _BadArgs:
    """Counts events whose `args` could not be read; they keep their defaults."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def decode_all(self, what: str, events: list[Event], typ: type) -> list[Any]:
        decoder = msgspec.json.Decoder(typ)
        try:
            return [decoder.decode(e.args) for e in events]
        except (msgspec.ValidationError, msgspec.DecodeError):
            pass
        out = []
        for e in events:
            try:
                out.append(decoder.decode(e.args))
            except (msgspec.ValidationError, msgspec.DecodeError):
                self.counts[what] = self.counts.get(what, 0) + 1
                out.append(typ())
        return out

    def warnings(self) -> list[str]:
        return [f"{n:,} {what} events have unreadable `args` (wrong types); their details are unknown" for what, n in self.counts.items()]


def _ints(values, count: int) -> np.ndarray:
    return np.fromiter(values, dtype=np.int64, count=count)


def _thread_ids(values: list[int | str]) -> np.ndarray:
    """Kineto tids are ints, or strings such as "25738" or "stream 7" in older traces."""
    out = np.empty(len(values), dtype=np.int64)
    cache: dict[Any, int] = {}
    for i, v in enumerate(values):
        if isinstance(v, int):
            out[i] = v
            continue
        tid = cache.get(v)
        if tid is None:
            m = _TRAILING_INT.search(v)
            tid = cache[v] = int(m.group(1)) if m else -(len(cache) + 2)
        out[i] = tid
    return out


def _names(events: list[Event]) -> pd.Categorical:
    return pd.Categorical([e.name for e in events])


def _kernel_table(buckets: dict[str, list[Event]], clock: _Clock, bad: _BadArgs) -> pd.DataFrame:
    events = [e for kind in _GPU_KINDS for e in buckets[kind]]
    kinds = [kind for kind in _GPU_KINDS for _ in buckets[kind]]
    n = len(events)
    args: list[_KernelArgs] = bad.decode_all("GPU activity", events, _KernelArgs)
    start, end = clock.start_end(events)

    def dim(attr: str, i: int) -> np.ndarray:
        return _ints((getattr(a, attr)[i] if len(getattr(a, attr)) > i else -1 for a in args), n)

    def copy_kind(event: Event, a: _KernelArgs, kind: str) -> str | None:
        if kind != "memcpy":
            return None
        m = _COPY_KIND.match(event.name)
        return m.group(1) if m else (a.kind or None)

    # Without args.device / args.stream, Kineto's GPU pid is the device and tid the stream.
    device = _ints((a.device for a in args), n)
    device = np.where(device >= 0, device, _thread_ids([e.pid for e in events]))
    stream = _ints((a.stream for a in args), n)
    stream = np.where(stream >= 0, stream, _thread_ids([e.tid for e in events]))
    data = {
        "kind": pd.Categorical(kinds, categories=list(_GPU_KINDS)),
        "name": _names(events),
        "device": device,
        "stream": stream,
        "start": start,
        "end": end,
        "correlation": _ints((a.correlation for a in args), n),
        "grid_x": dim("grid", 0), "grid_y": dim("grid", 1), "grid_z": dim("grid", 2),
        "block_x": dim("block", 0), "block_y": dim("block", 1), "block_z": dim("block", 2),
        "registers": _ints((a.registers for a in args), n),
        "shared_memory": _ints((a.shared_memory for a in args), n),
        "bytes": _ints((a.bytes if k != "kernel" else -1 for a, k in zip(args, kinds)), n),
        "copy_kind": pd.Categorical([copy_kind(e, a, k) for e, a, k in zip(events, args, kinds)]),
        "collective": pd.Categorical([a.collective for a in args]),
        "coll_in_elems": _ints((a.in_elems for a in args), n),
        "coll_out_elems": _ints((a.out_elems for a in args), n),
        "coll_group_size": _ints((a.group_size for a in args), n),
        "coll_dtype": pd.Categorical([a.dtype if a.collective is not None else None for a in args]),
        "coll_group": pd.Categorical([a.group for a in args]),
    }
    table = make_table(KERNEL_COLUMNS, data) if n else make_table(KERNEL_COLUMNS)
    return table.sort_values("start", kind="stable").reset_index(drop=True)


def _launch_table(events: list[Event], clock: _Clock, gpu_correlations: set[int], bad: _BadArgs) -> pd.DataFrame:
    args: list[_LaunchArgs] = bad.decode_all("runtime", events, _LaunchArgs)
    keep = [i for i, (e, a) in enumerate(zip(events, args)) if a.correlation in gpu_correlations or LAUNCH_API.search(e.name)]
    events = [events[i] for i in keep]
    args = [args[i] for i in keep]
    n = len(events)
    if not n:
        return make_table(LAUNCH_COLUMNS)
    start, end = clock.start_end(events)
    data = {
        "name": _names(events),
        "pid": _thread_ids([e.pid for e in events]),
        "tid": _thread_ids([e.tid for e in events]),
        "start": start,
        "end": end,
        "correlation": _ints((a.correlation for a in args), n),
    }
    return make_table(LAUNCH_COLUMNS, data).sort_values("start", kind="stable").reset_index(drop=True)


def _op_table(events: list[Event], clock: _Clock, bad: _BadArgs) -> pd.DataFrame:
    n = len(events)
    if not n:
        return make_table(OP_COLUMNS)
    args: list[_OpArgs] = bad.decode_all("CPU op", events, _OpArgs)
    start, end = clock.start_end(events)
    data = {
        "name": _names(events),
        "pid": _thread_ids([e.pid for e in events]),
        "tid": _thread_ids([e.tid for e in events]),
        "start": start,
        "end": end,
        "external_id": _ints((a.external_id for a in args), n),
        "sequence": _ints((a.sequence for a in args), n),
        "input_dims": [a.input_dims for a in args],
        "input_types": [a.input_types for a in args],
        "concrete_inputs": [a.concrete_inputs for a in args],
    }
    return make_table(OP_COLUMNS, data)


def _range_table(buckets: dict[str, list[Event]], clock: _Clock) -> pd.DataFrame:
    domains = ("user", "gpu", "python")
    events = [e for d in domains for e in buckets[f"range:{d}"]]
    if not events:
        return make_table(RANGE_COLUMNS)
    labels = [d for d in domains for _ in buckets[f"range:{d}"]]
    start, end = clock.start_end(events)
    pids = _thread_ids([e.pid for e in events])
    tids = _thread_ids([e.tid for e in events])
    is_gpu = np.array([d == "gpu" for d in labels])
    data = {
        "name": _names(events),
        "domain": pd.Categorical(labels, categories=list(domains)),
        "pid": pids,
        # A GPU annotation lives on a device (Kineto puts the device in its pid).
        "tid": np.where(is_gpu, pids, tids),
        "start": start,
        "end": end,
    }
    return make_table(RANGE_COLUMNS, data)


def _meta(path: str, source, decoded: Decoded, buckets: dict[str, list[Event]], clock: _Clock) -> dict[str, Any]:
    header = decoded.header
    dist = header.get("distributedInfo") if isinstance(header.get("distributedInfo"), dict) else {}
    devices = []
    for prop in header.get("deviceProperties") or []:
        if not isinstance(prop, dict):
            continue
        devices.append({
            "id": prop.get("id"),
            "name": prop.get("name"),
            "memory_bytes": prop.get("totalGlobalMem"),
            "sm_count": prop.get("numSms"),
            "compute_capability": f"{prop.get('computeMajor')}.{prop.get('computeMinor')}" if prop.get("computeMajor") is not None else None,
        })
    base_ns = header.get("baseTimeNanoseconds")
    origin_abs_ns = int(base_ns) + round(clock.origin_us * 1000) if isinstance(base_ns, int) else None
    versions = {k: header[k] for k in ("cupti_version", "cuda_runtime_version", "cuda_driver_version", "hip_runtime_version", "roctracer_version") if header.get(k) is not None}
    window = None
    if clock.window:
        window = [round((clock.window[0] - clock.origin_us) * 1000), round((clock.window[1] - clock.origin_us) * 1000)]
    return {
        "format": "kineto",
        "schema": "kineto-2021" if _is_legacy(buckets) else "kineto",
        "schema_version": header.get("schemaVersion"),
        "path": path,
        "compressed": source.compressed,
        "size_bytes": len(source.data),
        "devices": devices,
        "rank": dist.get("rank"),
        "world_size": dist.get("world_size"),
        "process_groups": dist.get("pg_config"),
        "span_ns": clock.span_ns,
        "capture_window_ns": window,
        "origin_abs_ns": origin_abs_ns,
        "record_shapes": header.get("record_shapes"),
        "tool_versions": versions,
    }
