"""torch.profiler / Kineto JSON -> Trace.

Handles the current schema (`kernel`, `cpu_op`, `cuda_runtime`, ...) and the 2021 one
(`Kernel`, `Operator`, `Runtime`, ...), NVIDIA and AMD. Parsing only: linking kernels to
launches and ops is link.py's job.
"""

from __future__ import annotations

import re
from operator import attrgetter, itemgetter
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from tracekit.errors import TraceError
from tracekit.parsers.kineto_decode import Decoded, Event, decode
from tracekit.parsers.launch_api import LAUNCH_API
from tracekit.parsers.source import read_source
from tracekit.trace import KERNEL_COLUMNS, LAUNCH_COLUMNS, OP_COLUMNS, RANGE_COLUMNS, Trace, categorical, make_table

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


_NULL = msgspec.Raw(b"null")


class _OpArgs(msgspec.Struct):
    # Kept raw and decoded once per distinct value (see _Interned): a loop repeats the
    # same shapes every step, so millions of ops share a few thousand distinct lists.
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=_NULL)
    input_types: msgspec.Raw = msgspec.field(name="Input type", default=_NULL)
    concrete_inputs: msgspec.Raw = msgspec.field(name="Concrete Inputs", default=_NULL)
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
    legacy = _is_legacy(buckets)
    if legacy:
        _move_legacy_user_ranges(buckets)
    clock = _Clock(buckets)
    bad_args = _BadArgs()
    kernels = _kernel_table(buckets, clock, bad_args)
    launches = _launch_table(buckets["launch"], clock, set(kernels["correlation"].tolist()), bad_args)
    ops = _op_table(buckets["op"], clock, bad_args)
    ranges = _range_table(buckets, clock)
    meta = _meta(path, source, decoded, legacy, clock)
    if meta.get("rank") is not None:
        kernels["rank"] = np.int32(meta["rank"])
    warnings += bad_args.warnings()
    return Trace(kernels, launches, ops, ranges, meta, warnings)


def _bucket(events: list[Event]) -> dict[str, list[Event]]:
    """Events by what they become, in file order. Categories are factorised once (in C)
    rather than looked up event by event."""
    buckets: dict[str, list[Event]] = {k: [] for k in set(_CATEGORY_KIND.values())}
    if not events:
        return buckets
    codes, categories = pd.factorize(np.array(list(map(_CAT, events)), dtype=object))
    kind_of_code = np.array([_CATEGORY_KIND.get(str(c).lower(), "") for c in categories], dtype=object)
    kinds = kind_of_code[codes]
    for kind in buckets:
        rows = np.flatnonzero(kinds == kind)
        if len(rows) == 1:
            buckets[kind] = [events[rows[0]]]
        elif len(rows):
            buckets[kind] = list(itemgetter(*rows)(events))
    return buckets


def _is_legacy(buckets: dict[str, list[Event]]) -> bool:
    return any(e.cat == "Operator" for e in buckets["op"][:1])


def _move_legacy_user_ranges(buckets: dict[str, list[Event]]) -> None:
    """The 2021 schema records record_function ranges as `Operator` events too."""
    ops, ranges = [], buckets["range:user"]
    for e in buckets["op"]:
        (ranges if _LEGACY_USER_RANGE.search(e.name) else ops).append(e)
    buckets["op"] = ops


class _Clock:
    """Kineto microseconds (floats) -> int64 ns from the earliest event."""

    def __init__(self, buckets: dict[str, list[Event]]):
        self._times = {kind: _times(evs) for kind, evs in buckets.items() if evs}
        self.origin_us = min(float(ts.min()) for ts, _ in self._times.values())
        last_us = max(float((ts + np.maximum(dur, 0.0)).max()) for ts, dur in self._times.values())
        self.span_ns = round((last_us - self.origin_us) * 1000)
        self.window = None
        if "window" in self._times:  # the profiler's own "PyTorch Profiler (0)" span
            ts, dur = self._times["window"]
            first = int(ts.argmin())
            self.window = [self.ns(ts[first]), self.ns(ts[first] + dur[first])]

    def ns(self, us):
        return np.rint((np.asarray(us, dtype=np.float64) - self.origin_us) * 1000.0).astype(np.int64)

    def start_end(self, *kinds: str) -> tuple[np.ndarray, np.ndarray]:
        """Start and end of the events of `kinds`, concatenated in that order."""
        parts = [self._times[k] for k in kinds if k in self._times]
        if not parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        ts = np.concatenate([p[0] for p in parts])
        dur = np.concatenate([p[1] for p in parts])
        start = self.ns(ts)
        return start, start + np.rint(np.maximum(dur, 0.0) * 1000.0).astype(np.int64)


def _times(events: list[Event]) -> tuple[np.ndarray, np.ndarray]:
    return (np.array(list(map(_TS, events)), dtype=np.float64), np.array(list(map(_DUR, events)), dtype=np.float64))


_TS, _DUR, _NAME, _PID, _TID, _ARGS, _CAT = (attrgetter(f) for f in ("ts", "dur", "name", "pid", "tid", "args", "cat"))


class _BadArgs:
    """Counts events whose `args` could not be read; they keep their defaults."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def decode_all(self, what: str, events: list[Event], typ: type) -> list[Any]:
        # One decode of all the args as a JSON array: far cheaper than one call per event.
        try:
            return msgspec.json.decode(b"[" + b",".join(map(_ARGS, events)) + b"]", type=list[typ])
        except (msgspec.ValidationError, msgspec.DecodeError):
            pass
        decoder = msgspec.json.Decoder(typ)
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


def _column(objects: list[Any], field: str, dtype=np.int64) -> np.ndarray:
    return np.array(list(map(attrgetter(field), objects)), dtype=dtype)


def _thread_ids(values: list[int | str]) -> np.ndarray:
    """Kineto tids are ints, or strings such as "25738" or "stream 7" in older traces."""
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError):
        pass
    cache: dict[Any, int] = {}

    def as_int(v: int | str) -> int:
        if isinstance(v, int):
            return v
        if v not in cache:
            m = _TRAILING_INT.search(v)
            cache[v] = int(m.group(1)) if m else -(len(cache) + 2)
        return cache[v]

    return np.array([as_int(v) for v in values], dtype=np.int64)


def _names(events: list[Event]) -> pd.Categorical:
    return categorical(list(map(_NAME, events)))


def _triples(lists: list[list[int]]) -> np.ndarray:
    """grid / block lists -> an (n, 3) array, -1 where a trace gives fewer dimensions."""
    out = np.full((len(lists), 3), -1, dtype=np.int64)
    full = [i for i, v in enumerate(lists) if len(v) == 3]
    if full:
        out[full] = np.array([lists[i] for i in full], dtype=np.int64)
    return out


def _kernel_table(buckets: dict[str, list[Event]], clock: _Clock, bad: _BadArgs) -> pd.DataFrame:
    events = [e for kind in _GPU_KINDS for e in buckets[kind]]
    n = len(events)
    if not n:
        return make_table(KERNEL_COLUMNS)
    kinds = np.repeat(np.array(_GPU_KINDS), [len(buckets[k]) for k in _GPU_KINDS])
    args: list[_KernelArgs] = bad.decode_all("GPU activity", events, _KernelArgs)
    start, end = clock.start_end(*_GPU_KINDS)
    # Without args.device / args.stream, Kineto's GPU pid is the device and tid the stream.
    device = _column(args, "device")
    device = np.where(device >= 0, device, _thread_ids(list(map(_PID, events))))
    stream = _column(args, "stream")
    stream = np.where(stream >= 0, stream, _thread_ids(list(map(_TID, events))))
    grid, block = _triples(list(map(attrgetter("grid"), args))), _triples(list(map(attrgetter("block"), args)))
    is_copy = kinds == "memcpy"
    copy_kind = [None] * n
    for i in np.flatnonzero(is_copy):
        m = _COPY_KIND.match(events[i].name)
        copy_kind[i] = m.group(1) if m else (args[i].kind or None)
    collective = list(map(attrgetter("collective"), args))
    data = {
        "kind": pd.Categorical(kinds, categories=list(_GPU_KINDS)),
        "name": _names(events),
        "device": device,
        "stream": stream,
        "start": start,
        "end": end,
        "correlation": _column(args, "correlation"),
        "grid_x": grid[:, 0], "grid_y": grid[:, 1], "grid_z": grid[:, 2],
        "block_x": block[:, 0], "block_y": block[:, 1], "block_z": block[:, 2],
        "registers": _column(args, "registers"),
        "shared_memory": _column(args, "shared_memory"),
        "bytes": np.where(kinds == "kernel", -1, _column(args, "bytes")),
        "copy_kind": categorical(copy_kind),
        "collective": categorical(collective),
        "coll_in_elems": _column(args, "in_elems"),
        "coll_out_elems": _column(args, "out_elems"),
        "coll_group_size": _column(args, "group_size"),
        "coll_dtype": categorical([a.dtype if a.collective is not None else None for a in args]),
        "coll_group": categorical(list(map(attrgetter("group"), args))),
    }
    return make_table(KERNEL_COLUMNS, data).sort_values("start", kind="stable").reset_index(drop=True)


def _launch_table(events: list[Event], clock: _Clock, gpu_correlations: set[int], bad: _BadArgs) -> pd.DataFrame:
    if not events:
        return make_table(LAUNCH_COLUMNS)
    args: list[_LaunchArgs] = bad.decode_all("runtime", events, _LaunchArgs)
    correlation = _column(args, "correlation")
    names = _names(events)
    launches_work = pd.Series(names.categories).str.contains(LAUNCH_API).to_numpy()
    keep = np.isin(correlation, np.fromiter(gpu_correlations, dtype=np.int64)) | launches_work[names.codes]
    start, end = clock.start_end("launch")
    data = {
        "name": names,
        "pid": _thread_ids(list(map(_PID, events))),
        "tid": _thread_ids(list(map(_TID, events))),
        "start": start,
        "end": end,
        "correlation": correlation,
    }
    table = make_table(LAUNCH_COLUMNS, data)[keep]
    table["name"] = table["name"].cat.remove_unused_categories()
    return table.sort_values("start", kind="stable").reset_index(drop=True)


def _op_table(events: list[Event], clock: _Clock, bad: _BadArgs) -> pd.DataFrame:
    if not events:
        return make_table(OP_COLUMNS)
    args: list[_OpArgs] = bad.decode_all("CPU op", events, _OpArgs)
    start, end = clock.start_end("op")
    data = {
        "name": _names(events),
        "pid": _thread_ids(list(map(_PID, events))),
        "tid": _thread_ids(list(map(_TID, events))),
        "start": start,
        "end": end,
        "external_id": _column(args, "external_id"),
        "sequence": _column(args, "sequence"),
        "input_dims": _interned(map(attrgetter("input_dims"), args)),
        "input_types": _interned(map(attrgetter("input_types"), args)),
        "concrete_inputs": _interned(map(attrgetter("concrete_inputs"), args)),
    }
    return make_table(OP_COLUMNS, data)


def _interned(raws) -> list[Any]:
    """Decode each distinct raw JSON value once; equal values share one (read-only) object."""
    decoded: dict[bytes, Any] = {}
    decode = msgspec.json.Decoder().decode
    out = []
    for raw in raws:
        key = bytes(raw)
        value = decoded.get(key, decoded)
        if value is decoded:
            try:
                value = decoded[key] = decode(key)
            except msgspec.DecodeError:
                value = decoded[key] = None
        out.append(value)
    return out


def _range_table(buckets: dict[str, list[Event]], clock: _Clock) -> pd.DataFrame:
    domains = ("user", "gpu", "python")
    kinds = [f"range:{d}" for d in domains]
    events = [e for k in kinds for e in buckets[k]]
    if not events:
        return make_table(RANGE_COLUMNS)
    labels = np.repeat(np.array(domains), [len(buckets[k]) for k in kinds])
    start, end = clock.start_end(*kinds)
    pids = _thread_ids(list(map(_PID, events)))
    tids = _thread_ids(list(map(_TID, events)))
    data = {
        "name": _names(events),
        "domain": pd.Categorical(labels, categories=list(domains)),
        "pid": pids,
        # A GPU annotation lives on a device (Kineto puts the device in its pid).
        "tid": np.where(labels == "gpu", pids, tids),
        "start": start,
        "end": end,
    }
    return make_table(RANGE_COLUMNS, data)


def _meta(path: str, source, decoded: Decoded, legacy: bool, clock: _Clock) -> dict[str, Any]:
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
    window = [int(t) for t in clock.window] if clock.window else None
    return {
        "format": "kineto",
        "schema": "kineto-2021" if legacy else "kineto",
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
