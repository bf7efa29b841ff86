"""Kineto events -> the Trace's tables as numpy columns (tracekit.trace.tables).

`KinetoTables` takes decoded events a chunk at a time (the serial loop of kineto.py, or a
worker's piece in kineto_parallel.py), reduces them to compact columns (names as integer
codes) and builds the tables once at the end; `merge` joins the pieces of several workers
as if one pass had read them. Handles the current schema (`kernel`, `cpu_op`,
`cuda_runtime`, ...) and the 2021 one (`Kernel`, `Operator`, `Runtime`, ...).
"""

from __future__ import annotations

import re
from collections import defaultdict
from operator import attrgetter, itemgetter
from typing import Any

import msgspec
import numpy as np

from tracekit.parsers.columns import MAX_ABS_TIME_NS, Checks
from tracekit.parsers.kineto_decode import Document, Event, json_array
from tracekit.parsers.launch_api import CAPTURE_API, LAUNCH_API
from tracekit.parsers.source import Source
from tracekit.trace.tables import Coded, ColumnTable, ColumnTrace, Interner
from tracekit.trace.health import Problem, zero_time_problems, zero_times
from tracekit.trace import KERNEL_COLUMNS, LAUNCH_COLUMNS, OP_COLUMNS, RANGE_COLUMNS

CHUNK_EVENTS = 200_000

# Event category -> what it becomes. Both schemas; matched case-insensitively.
_CATEGORY_KIND = {
    "kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset", "memset": "memset",
    "cuda_runtime": "launch", "cuda_driver": "launch", "runtime": "launch", "driver": "launch",
    "cpu_op": "op", "operator": "op",
    "user_annotation": "range:user", "gpu_user_annotation": "range:gpu", "python_function": "range:python",
    "trace": "window",
}
_GPU_KINDS = ("kernel", "memcpy", "memset")
_RANGE_DOMAINS = ("user", "gpu", "python")
_HEALTH_KIND = {"launch": "runtime call", "op": "CPU op", "range": "range"}

# In the 2021 schema record_function ranges are `Operator` events too.
_LEGACY_USER_RANGE = re.compile(r"^ProfilerStep#\d+$|#|^## .* ##$")
_COPY_KIND = re.compile(r"Memcpy (\w+)")
_TRAILING_INT = re.compile(r"(-?\d+)\s*$")
_NULL = msgspec.Raw(b"null")
_NAN = float("nan")
_ARG_LABEL = {"correlation": "correlation", "external_id": "External id", "sequence": "Sequence number", "registers": "registers per thread",
              "shared_memory": "shared memory", "in_elems": "In msg nelems", "out_elems": "Out msg nelems", "group_size": "Group size"}


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
    # torch.compile: Inductor's own count for the kernel (also what profile_analysis.augment_trace writes)
    kernel_flop: Any = None  # any JSON value: a bad one makes this figure unknown, not the event
    kernel_num_gb: Any = None


class _LaunchArgs(msgspec.Struct):
    correlation: int = -1
    kernel: Any = None  # ROCm names the launched kernel (a graph capture's nodes); any JSON value: a non-string is None


class _OpArgs(msgspec.Struct):
    # Kept raw and decoded once per distinct value (tracekit.tables.Interner): a loop repeats the
    # same shapes every step, so millions of ops share a few thousand distinct lists.
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=_NULL)
    input_types: msgspec.Raw = msgspec.field(name="Input type", default=_NULL)
    concrete_inputs: msgspec.Raw = msgspec.field(name="Concrete Inputs", default=_NULL)
    input_strides: msgspec.Raw = msgspec.field(name="Input Strides", default=_NULL)
    external_id: int = msgspec.field(name="External id", default=-1)
    sequence: int = msgspec.field(name="Sequence number", default=-1)
    # Inductor's record_function around each Triton launch carries its FLOPs and GB
    kernel_flop: Any = None  # any JSON value: a bad one makes this figure unknown, not the event
    kernel_num_gb: Any = None


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) < 1e30 else _NAN


def _metadata_costs(args: list[Any]) -> dict[str, np.ndarray]:
    """Inductor's `kernel_flop` / `kernel_num_gb` (GB = 1e9 bytes) as FLOPs and bytes; a value
    that is not a finite, non-negative number is unknown (NaN), not zero. Most events carry
    neither: only the few that do are looked at one by one."""
    return {"meta_flops": _finite_column(list(map(attrgetter("kernel_flop"), args))),
            "meta_bytes": _finite_column(list(map(attrgetter("kernel_num_gb"), args))) * 1e9}


def _finite_column(values: list[Any]) -> np.ndarray:
    out = np.full(len(values), np.nan)
    if values.count(None) == len(values):
        return out
    for i in np.flatnonzero(np.array([v is not None for v in values], dtype=bool)):
        number = _number(values[i])
        out[i] = number if number >= 0 else np.nan  # NaN stays NaN; -x and inf (>= 1e30 is NaN already) too
    return out


def _bucket(events: list[Event]) -> dict[str, Any]:
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
    kinds = np.array([_CATEGORY_KIND.get(str(c).lower(), "") for c in categories], dtype=object)[codes]
    legacy = np.array([c == "Operator" for c in categories] + [False])[codes]
    if legacy.any():
        # The 2021 schema: record_function ranges are `Operator` events too, told by name.
        buckets["legacy"] = []  # a marker: this is the 2021 schema
        for i in np.flatnonzero(legacy):
            if _LEGACY_USER_RANGE.search(events[i].name):
                kinds[i] = "range:user"
    # Each bucket: (its events, their rows in the chunk, their kinds).
    for kind in ("launch", "op", "window"):
        rows = np.flatnonzero(kinds == kind)
        if len(rows):
            buckets[kind] = (_take(events, rows), rows, None)
    for group, members in (("gpu", _GPU_KINDS), ("range", tuple(f"range:{d}" for d in _RANGE_DOMAINS))):
        rows = np.flatnonzero(np.isin(kinds, members))
        if len(rows):
            buckets[group] = (_take(events, rows), rows, kinds[rows])
    return buckets


def _range_domains(kinds: np.ndarray) -> np.ndarray:
    """Range kinds ("range:python", ...) -> their domains ("python", ...): one comparison per
    domain, not a string slice per event."""
    domains = np.empty(len(kinds), dtype=object)
    for d in _RANGE_DOMAINS:
        domains[kinds == f"range:{d}"] = d
    return domains


def _take(events: list[Event], rows: np.ndarray) -> list[Event]:
    return [events[rows[0]]] if len(rows) == 1 else list(itemgetter(*rows.tolist())(events))


class _Columns:
    """Per-chunk column pieces of one table, joined once at the end."""

    def __init__(self) -> None:
        self.parts: dict[str, list[Any]] = defaultdict(list)
        self.rows = 0

    def add(self, **columns: Any) -> None:
        for name, values in columns.items():
            self.parts[name].append(values)
        self.rows += len(next(iter(columns.values())))

    def keep(self, rows: np.ndarray) -> None:
        """Only the rows where `rows` (a mask over all the pieces) is True, as one piece."""
        for name, parts in self.parts.items():
            self.parts[name] = [np.concatenate(parts)[rows]]
        self.rows = int(rows.sum())

    def array(self, name: str, dtype=np.int64) -> np.ndarray:
        parts = self.parts.get(name)
        return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype=dtype)


_TS, _DUR, _NAME, _PID, _TID, _ARGS, _CAT = (attrgetter(f) for f in ("ts", "dur", "name", "pid", "tid", "args", "cat"))


class KinetoTables:
    """Accumulates the chunks' columns and builds the Trace tables from them."""

    def __init__(self) -> None:
        self.gpu, self.launch, self.op, self.range = _Columns(), _Columns(), _Columns(), _Columns()
        self.names = {t: Interner() for t in ("gpu", "launch", "op", "range")}
        self.strings = {c: Interner() for c in ("copy_kind", "collective", "coll_dtype", "coll_group")}
        self.inputs = {c: Interner() for c in ("input_dims", "input_types", "concrete_inputs", "input_strides")}
        self.launch_kernels = Interner()  # the kernel names launch calls record
        self.thread_names = Interner()  # pids / tids that are names, one code each across tables
        self.windows: list[tuple[float, float]] = []
        self.legacy = False
        self.bad_args: dict[str, int] = defaultdict(int)
        self.checks = Checks()  # every column passes through it: the one place values are validated

    def with_usable_times(self, events: list[Event]) -> tuple[list[Event], np.ndarray, np.ndarray]:
        """The events whose `ts` and `dur` can be nanoseconds of one capture, with those
        times (read once here for every table)."""
        ts = np.fromiter(map(_TS, events), dtype=np.float64, count=len(events))
        dur = np.fromiter(map(_DUR, events), dtype=np.float64, count=len(events))
        keep = self.checks.times_us(ts, dur, "events")
        if keep.all():
            return events, ts, dur
        rows = np.flatnonzero(keep)
        return [events[i] for i in rows], ts[rows], dur[rows]

    def empty(self) -> bool:
        return not (self.gpu.rows or self.launch.rows or self.op.rows or self.range.rows)

    # -- one chunk ---------------------------------------------------------------------
    def add_events(self, events: list[Event]) -> None:
        """One chunk of decoded events, in file order (the serial loop, or a worker's piece)."""
        events, ts, dur = self.with_usable_times(events)
        buckets = _bucket(events)
        self.legacy |= "legacy" in buckets

        def times(kind: str) -> tuple[np.ndarray, np.ndarray]:
            rows = buckets[kind][1]
            return ts[rows], dur[rows]

        if "gpu" in buckets:
            self._add_gpu(buckets["gpu"][0], times("gpu"), buckets["gpu"][2])
        if "launch" in buckets:
            self._add_launches(buckets["launch"][0], times("launch"))
        if "op" in buckets:
            self._add_ops(buckets["op"][0], times("op"))
        if "range" in buckets:
            domains = _range_domains(buckets["range"][2])
            self._add_ranges(buckets["range"][0], times("range"), domains)
        if "window" in buckets:
            self.windows += [(float(a), float(a + b)) for a, b in zip(*times("window"))]

    def merge(self, other: "KinetoTables") -> None:
        """Append the tables of the events that follow this one's in the file (a worker's
        piece): its name codes are renumbered into this one's, in order of first sight, so
        the result is what one pass over both would have built."""
        other._renumber_thread_names(np.array([_name_code(self.thread_names.code(v)) for v in other.thread_names.values], dtype=np.int64))
        for mine, theirs, interners in (
            (self.gpu, other.gpu, {"name": (self.names["gpu"], other.names["gpu"]), **{c: (self.strings[c], other.strings[c]) for c in self.strings}}),
            (self.launch, other.launch, {"name": (self.names["launch"], other.names["launch"]),
                                         "kernel": (self.launch_kernels, other.launch_kernels)}),
            (self.op, other.op, {"name": (self.names["op"], other.names["op"]), **{c: (self.inputs[c], other.inputs[c]) for c in self.inputs}}),
            (self.range, other.range, {"name": (self.names["range"], other.names["range"])}),
        ):
            remap = {col: np.array([ours.code(v) for v in their.values] + [-1], dtype=np.int32) for col, (ours, their) in interners.items()}
            for col, parts in theirs.parts.items():
                mine.parts[col] += [remap[col][p] for p in parts] if col in remap else parts
            mine.rows += theirs.rows
        self.windows += other.windows
        self.legacy |= other.legacy
        for what, n in other.bad_args.items():
            self.bad_args[what] += n
        for message, n in other.checks.counts.items():
            self.checks.count(message, n)

    def _decode_args(self, what: str, events: list[Event], typ: type) -> list[Any]:
        # One decode of all the chunk's args as a JSON array: far cheaper than one per event.
        try:
            return msgspec.json.decode(json_array(list(map(_ARGS, events))), type=list[typ])
        except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            pass
        decoder = msgspec.json.Decoder(typ)
        out = []
        for e in events:
            try:
                out.append(decoder.decode(e.args))
            except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError, RecursionError):
                self.bad_args[what] += 1
                out.append(typ())
        return out

    def _common(self, table: str, events: list[Event], times: tuple[np.ndarray, np.ndarray]) -> dict[str, np.ndarray]:
        """The columns every table takes from its events: name code, pid, tid, ts, dur."""
        return {
            "name": self.names[table].codes(list(map(_NAME, events))),
            "pid": _thread_ids(list(map(_PID, events)), self.thread_names),
            "tid": _thread_ids(list(map(_TID, events)), self.thread_names),
            "ts": times[0],
            "dur": times[1],
        }

    def _add_gpu(self, events: list[Event], times, kinds: np.ndarray) -> None:
        args: list[_KernelArgs] = self._decode_args("GPU activity", events, _KernelArgs)
        copy_kind = [None] * len(events)
        for i in np.flatnonzero(kinds == "memcpy"):
            m = _COPY_KIND.match(events[i].name)
            copy_kind[i] = m.group(1) if m else (args[i].kind or None)
        self.gpu.add(
            kind=_codes(kinds, _GPU_KINDS),  # int8 codes: a big table's Categorical is then free
            **self._common("gpu", events, times),
            **{f: self._column(args, f) for f in ("correlation", "device", "stream", "registers", "shared_memory", "bytes", "in_elems", "out_elems", "group_size")},
            grid=self._triples(args, "grid"),
            block=self._triples(args, "block"),
            copy_kind=self.strings["copy_kind"].codes(copy_kind),
            collective=self.strings["collective"].codes(list(map(attrgetter("collective"), args))),
            coll_dtype=self.strings["coll_dtype"].codes([a.dtype if a.collective is not None else None for a in args]),
            coll_group=self.strings["coll_group"].codes(list(map(attrgetter("group"), args))),
            **_metadata_costs(args),
        )

    def _add_launches(self, events: list[Event], times) -> None:
        args: list[_LaunchArgs] = self._decode_args("runtime", events, _LaunchArgs)
        kernels = [a.kernel if isinstance(a.kernel, str) else None for a in args]
        self.launch.add(**self._common("launch", events, times), correlation=self._column(args, "correlation"),
                        kernel=self.launch_kernels.codes(kernels))

    def _add_ops(self, events: list[Event], times) -> None:
        args: list[_OpArgs] = self._decode_args("CPU op", events, _OpArgs)
        self.op.add(
            **self._common("op", events, times),
            external_id=self._column(args, "external_id"),
            sequence=self._column(args, "sequence"),
            **{f: self.inputs[f].codes([bytes(r) for r in map(attrgetter(f), args)]) for f in self.inputs},
            **_metadata_costs(args),
        )

    def _column(self, args: list[Any], field: str) -> np.ndarray:
        return self.checks.ints(list(map(attrgetter(field), args)), _ARG_LABEL.get(field, field))

    def _triples(self, args: list[Any], field: str) -> np.ndarray:
        """grid / block lists -> an (n, 3) int32 array, -1 where a trace gives fewer dimensions."""
        lists = list(map(attrgetter(field), args))
        out = np.full((len(lists), 3), -1, dtype=np.int32)
        full = [i for i, v in enumerate(lists) if len(v) == 3]
        if full:
            out[full] = self.checks.ints([x for i in full for x in lists[i]], field, np.int32).reshape(-1, 3)
        return out

    def _add_ranges(self, events: list[Event], times, domains: np.ndarray) -> None:
        columns = self._common("range", events, times)
        # A GPU annotation lives on a device (Kineto puts the device in its pid).
        columns["tid"] = np.where(domains == "gpu", columns["pid"], columns["tid"])
        self.range.add(**columns, domain=_codes(domains, _RANGE_DOMAINS))

    def _renumber_thread_names(self, new_codes: np.ndarray) -> None:
        if len(new_codes):
            for table in (self.gpu, self.launch, self.op, self.range):
                for col in ("pid", "tid"):
                    table.parts[col] = [_renumber_names(ids, new_codes) for ids in table.parts.get(col, [])]

    # -- the whole trace ---------------------------------------------------------------
    def build(self, path: str, source: Source, document: Document) -> ColumnTrace:
        # Thread names numbered in name order: the same codes however the file was chunked.
        names = self.thread_names.values
        rank = np.empty(len(names), dtype=np.int64)
        rank[sorted(range(len(names)), key=names.__getitem__)] = np.arange(len(names))
        self._renumber_thread_names(_name_code(rank))
        health = self._drop_zero_times()
        clock = _Clock([c for c in (self.gpu, self.launch, self.op, self.range) if c.rows], self.windows)
        kernels = self._kernel_table(clock)
        launches = self._launch_table(clock, kernels["correlation"])
        ops = self._op_table(clock)
        ranges = self._range_table(clock)
        meta = _meta(path, source, _checked_header(document.header, self.checks), self.legacy, clock)
        meta["health"] = [p.to_dict() for p in health]
        meta["kernel_times_unknown"] = bool(health) and not self.gpu.rows
        if meta.get("rank") is not None:
            kernels = kernels.with_columns(rank=np.full(len(kernels), meta["rank"], dtype=np.int32))
        warnings = [f"{n:,} {what} events have unreadable `args` (wrong types); their details are unknown" for what, n in self.bad_args.items()]
        return ColumnTrace(kernels, launches, ops, ranges, meta, warnings)

    def _drop_zero_times(self) -> list[Problem]:
        """Events whose ts and dur are both 0 while the rest of the capture lies far from
        zero (the profiler lost their times: every kernel, copy, memset and runtime call of
        a session that replayed a CUDA graph, seen with torch 2.11 / CUDA 13) leave the
        tables before the clock is set, or the span would reach back to the epoch;
        trace.health records them."""
        tables = {"gpu": self.gpu, "launch": self.launch, "op": self.op, "range": self.range}
        times = {name: (c.array("ts", np.float64), c.array("dur", np.float64)) for name, c in tables.items() if c.rows}
        zero = {name: (ts == 0) & (dur == 0) for name, (ts, dur) in times.items()}
        if not any(z.any() for z in zero.values()):
            return []
        rest = [float(ts[~zero[name]].min()) for name, (ts, _) in times.items() if (~zero[name]).any()]
        first = min(rest, default=None)
        problems: list[Problem] = []
        for name, (ts, dur) in times.items():
            dropped = zero_times(ts, dur, first)
            if not dropped.any():
                continue
            if name == "gpu":
                problems += zero_time_problems(self.gpu.array("kind", np.int8), dropped, _GPU_KINDS)
            else:
                problems += zero_time_problems(np.zeros(len(ts), dtype=np.int8), dropped, (_HEALTH_KIND[name],))
            tables[name].keep(~dropped)
        return problems

    def _kernel_table(self, clock: "_Clock") -> ColumnTable:
        c = self.gpu
        if not c.rows:
            return ColumnTable(KERNEL_COLUMNS, {})
        start, end = clock.start_end(c)
        kinds = c.array("kind", np.int8)
        # Without args.device / args.stream, Kineto's GPU pid is the device and tid the stream.
        device, stream = c.array("device"), c.array("stream")
        grid, block = np.concatenate(c.parts["grid"]), np.concatenate(c.parts["block"])
        data = {
            "kind": Coded(kinds, list(_GPU_KINDS), object_labels=False),
            "name": self.names["gpu"].coded(c.array("name", np.int32)),
            "device": self.checks.ints(np.where(device >= 0, device, c.array("pid")), "device", np.int32),
            "stream": np.where(stream >= 0, stream, c.array("tid")),
            "start": start,
            "end": end,
            "correlation": c.array("correlation"),
            "grid_x": grid[:, 0], "grid_y": grid[:, 1], "grid_z": grid[:, 2],
            "block_x": block[:, 0], "block_y": block[:, 1], "block_z": block[:, 2],
            "registers": self.checks.ints(c.array("registers"), "registers per thread", np.int32),
            "shared_memory": c.array("shared_memory"),
            "bytes": np.where(kinds == _GPU_KINDS.index("kernel"), -1, c.array("bytes")),
            "coll_in_elems": c.array("in_elems"),
            "coll_out_elems": c.array("out_elems"),
            "coll_group_size": self.checks.ints(c.array("group_size"), "Group size", np.int32),
            "meta_flops": c.array("meta_flops", np.float64), "meta_bytes": c.array("meta_bytes", np.float64),
        }
        for col, interner in self.strings.items():
            data[col] = interner.coded(c.array(col, np.int32))
        # Ties in start: kernels, then copies, then memsets, each in file order (lexsort is stable).
        return ColumnTable(KERNEL_COLUMNS, data).take(np.lexsort((kinds, start)))

    def _launch_table(self, clock: "_Clock", gpu_correlations: np.ndarray) -> ColumnTable:
        c = self.launch
        if not c.rows:
            return ColumnTable(LAUNCH_COLUMNS, {})
        start, end = clock.start_end(c)
        names = self.names["launch"].coded(c.array("name", np.int32))
        correlation = c.array("correlation")
        # Keep calls that launched captured work, that launch work by their name, or that begin
        # or end a graph capture.
        keep = _isin(correlation, gpu_correlations) | names.where(lambda n: bool(LAUNCH_API.search(n) or CAPTURE_API.search(n)))
        data = {"name": names, "pid": c.array("pid"), "tid": c.array("tid"), "start": start, "end": end, "correlation": correlation,
                "kernel": self.launch_kernels.coded(c.array("kernel", np.int32))}
        table = ColumnTable(LAUNCH_COLUMNS, data).take(np.flatnonzero(keep))
        for col in ("name", "kernel"):
            table.columns[col] = table.columns[col].without_unused()
        return table.take(np.argsort(table["start"], kind="stable"))

    def _op_table(self, clock: "_Clock") -> ColumnTable:
        c = self.op
        if not c.rows:
            return ColumnTable(OP_COLUMNS, {})
        start, end = clock.start_end(c)
        data = {
            "name": self.names["op"].coded(c.array("name", np.int32)),
            "pid": c.array("pid"), "tid": c.array("tid"), "start": start, "end": end,
            "external_id": c.array("external_id"), "sequence": c.array("sequence"),
            "meta_flops": c.array("meta_flops", np.float64), "meta_bytes": c.array("meta_bytes", np.float64),
        }
        for col, interner in self.inputs.items():
            decoded = np.array([_decode_json(v) for v in interner.values] + [None], dtype=object)
            data[col] = decoded[c.array(col, np.int32)]  # rows share the decoded (read-only) lists
        return ColumnTable(OP_COLUMNS, data)

    def _range_table(self, clock: "_Clock") -> ColumnTable:
        c = self.range
        if not c.rows:
            return ColumnTable(RANGE_COLUMNS, {})
        start, end = clock.start_end(c)
        domain = c.array("domain", np.int8)
        data = {
            "name": self.names["range"].coded(c.array("name", np.int32)),
            "domain": Coded(domain, list(_RANGE_DOMAINS), object_labels=False),
            "pid": c.array("pid"), "tid": c.array("tid"), "start": start, "end": end,
        }
        # User ranges, then GPU annotations, then Python frames, each in file order.
        return ColumnTable(RANGE_COLUMNS, data).take(np.argsort(domain, kind="stable"))


class _Clock:
    """Kineto microseconds (floats) -> int64 ns from the earliest event."""

    def __init__(self, tables: list[_Columns], windows: list[tuple[float, float]]):
        self.origin_us = min(float(np.min(ts)) for c in tables for ts in c.parts["ts"])
        last = max(float(np.max(ts + np.maximum(dur, 0.0))) for c in tables for ts, dur in zip(c.parts["ts"], c.parts["dur"]))
        self.span_ns = round((last - self.origin_us) * 1000)
        first = min(windows) if windows else None  # the profiler's own "PyTorch Profiler (0)" span
        self.window = [self._ns(first[0]), self._ns(first[1])] if first else None

    def _ns(self, us: float) -> int:
        return round((us - self.origin_us) * 1000)

    def start_end(self, columns: _Columns) -> tuple[np.ndarray, np.ndarray]:
        start = np.rint((columns.array("ts", np.float64) - self.origin_us) * 1000.0).astype(np.int64)
        return start, start + np.rint(np.maximum(columns.array("dur", np.float64), 0.0) * 1000.0).astype(np.int64)


def _isin(values: np.ndarray, members: np.ndarray) -> np.ndarray:
    """np.isin; by a lookup table when the ids span a range not much larger than their count
    (correlation ids count up from 1: millions of them hash slowly, index fast)."""
    if len(values) and len(members):
        lo, hi = int(min(values.min(), members.min())), int(max(values.max(), members.max()))
        if hi - lo < 8 * (len(values) + len(members)) + 1024:
            return np.isin(values, members, kind="table")
    return np.isin(values, members)


def _codes(values: np.ndarray, categories: tuple[str, ...]) -> np.ndarray:
    """Labels from a short fixed list -> their positions (int8)."""
    out = np.zeros(len(values), dtype=np.int8)
    for i, label in enumerate(categories[1:], start=1):
        out[values == label] = i
    return out


def _thread_ids(values: list[int | str], names: Interner) -> np.ndarray:
    """Kineto pids and tids are ints, or strings such as "25738" or "stream 7" in older
    traces: the number they end with. A name with no number ("worker") is -2, -3, ... by
    `names`, the same code wherever the name appears (renumbered in name order at the end,
    see KinetoTables.build, so that how the file was cut into chunks never shows)."""
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        pass
    cache: dict[Any, int] = {}

    def as_int(v: int | str) -> int:
        if isinstance(v, int):
            return v if -(1 << 63) <= v < (1 << 63) else -1
        if v not in cache:
            m = _TRAILING_INT.search(v[-32:])  # bounded: `\d+\s*$` is quadratic on a long run of digits
            cache[v] = int(m.group(1)) if m and len(m.group(1)) < 19 else _name_code(names.code(v))
        return cache[v]

    return np.array([as_int(v) for v in values], dtype=np.int64)


def _name_code(index: np.ndarray | int) -> np.ndarray | int:
    """The pid / tid code of the index-th thread name: -2, -3, ... (-1 is an unknown id)."""
    return -(index + 2)


def _renumber_names(ids: np.ndarray, new_codes: np.ndarray) -> np.ndarray:
    """pid / tid codes of thread names (-2, -3, ...) replaced by `new_codes[index]`."""
    index = _name_code(ids)  # the inverse of _name_code: -2 -> 0, -3 -> 1, ...
    named = (index >= 0) & (index < len(new_codes))
    return np.where(named, new_codes[np.where(named, index, 0)], ids) if named.any() else ids


def _decode_json(raw: bytes) -> Any:
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None


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


def _checked_header(header: dict[str, Any], checks: Checks) -> dict[str, Any]:
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


def _meta(path: str, source: Source, header: dict[str, Any], legacy: bool, clock: _Clock) -> dict[str, Any]:
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
