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
from itertools import chain, compress
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np

from tracekit.parsers.columns import Checks
from tracekit.parsers.kineto_args import ARG_LABEL, KernelArgs, LaunchArgs, OpArgs, decode_json, metadata_costs
from tracekit.common.format import MAX_NAME_CHARS
from tracekit.parsers.kineto_categories import GPU_KINDS, RANGE_DOMAINS, bucket, label_codes, range_domains
from tracekit.parsers.kineto_columns import Clock, Columns, isin, renumber_thread_names, thread_ids, thread_name_code
from tracekit.parsers.kineto_decode import Document, Event, json_array, raw_bytes
from tracekit.parsers.kineto_header import checked_header, kineto_meta
from tracekit.trace.launch_api import CAPTURE_API, LAUNCH_API
from tracekit.parsers.source import Source
from tracekit.trace.tables import Coded, ColumnTable, ColumnTrace, Interner
from tracekit.trace.health import Problem, zero_time_problems, zero_times
from tracekit.trace import KERNEL_COLUMNS, LAUNCH_COLUMNS, OP_COLUMNS, RANGE_COLUMNS

CHUNK_EVENTS = 200_000

_HEALTH_KIND = {"launch": "runtime call", "op": "CPU op", "range": "range"}
_COPY_KIND = re.compile(r"Memcpy (\w+)")
_TS, _DUR, _NAME, _PID, _TID, _ARGS = (attrgetter(f) for f in ("ts", "dur", "name", "pid", "tid", "args"))


class KinetoTables:
    """Accumulates the chunks' columns and builds the Trace tables from them."""

    def __init__(self) -> None:
        self.gpu, self.launch, self.op, self.range = Columns(), Columns(), Columns(), Columns()
        # names longer than any report shows are cut as they are read: a 50 MB kernel name
        # costs 4 kB, not a 105 MB summary.json (reports.text.MAX_CHARS)
        self.names = {t: Interner(MAX_NAME_CHARS) for t in ("gpu", "launch", "op", "range")}
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
        buckets = bucket(events)
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
            domains = range_domains(buckets["range"][2])
            self._add_ranges(buckets["range"][0], times("range"), domains)
        if "window" in buckets:
            self.windows += [(float(a), float(a + b)) for a, b in zip(*times("window"))]

    def merge(self, other: "KinetoTables") -> None:
        """Append the tables of the events that follow this one's in the file (a worker's
        piece): its name codes are renumbered into this one's, in order of first sight, so
        the result is what one pass over both would have built."""
        other._renumber_thread_names(np.array([thread_name_code(self.thread_names.code(v)) for v in other.thread_names.values], dtype=np.int64))
        for mine, theirs, interners in (
            (self.gpu, other.gpu, {"name": (self.names["gpu"], other.names["gpu"]), **{c: (self.strings[c], other.strings[c]) for c in self.strings}}),
            (self.launch, other.launch, {"name": (self.names["launch"], other.names["launch"]),
                                         "kernel": (self.launch_kernels, other.launch_kernels)}),
            (self.op, other.op, {"name": (self.names["op"], other.names["op"]), **{c: (self.inputs[c], other.inputs[c]) for c in self.inputs}}),
            (self.range, other.range, {"name": (self.names["range"], other.names["range"])}),
        ):
            # (Interner.codes: new values coded in order of first sight, at C speed; -1 stays -1)
            remap = {col: np.append(ours.codes(their.values), np.int32(-1)) for col, (ours, their) in interners.items()}
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
            "pid": thread_ids(list(map(_PID, events)), self.thread_names),
            "tid": thread_ids(list(map(_TID, events)), self.thread_names),
            "ts": times[0],
            "dur": times[1],
        }

    def _add_gpu(self, events: list[Event], times, kinds: np.ndarray) -> None:
        args: list[KernelArgs] = self._decode_args("GPU activity", events, KernelArgs)
        copy_kind = [None] * len(events)
        for i in np.flatnonzero(kinds == "memcpy"):
            m = _COPY_KIND.match(events[i].name)
            copy_kind[i] = m.group(1) if m else (args[i].kind or None)
        self.gpu.add(
            kind=label_codes(kinds, GPU_KINDS),  # int8 codes: a big table's Categorical is then free
            **self._common("gpu", events, times),
            **{f: self._column(args, f) for f in ("correlation", "device", "stream", "registers", "shared_memory", "bytes", "in_elems", "out_elems", "group_size")},
            grid=self._triples(args, "grid"),
            block=self._triples(args, "block"),
            copy_kind=self.strings["copy_kind"].codes(copy_kind),
            collective=self.strings["collective"].codes(list(map(attrgetter("collective"), args))),
            coll_dtype=self.strings["coll_dtype"].codes([a.dtype if a.collective is not None else None for a in args]),
            coll_group=self.strings["coll_group"].codes(list(map(attrgetter("group"), args))),
            **metadata_costs(args),
        )

    def _add_launches(self, events: list[Event], times) -> None:
        args: list[LaunchArgs] = self._decode_args("runtime", events, LaunchArgs)
        kernels = [a.kernel if isinstance(a.kernel, str) else None for a in args]
        self.launch.add(**self._common("launch", events, times), correlation=self._column(args, "correlation"),
                        kernel=self.launch_kernels.codes(kernels))

    def _add_ops(self, events: list[Event], times) -> None:
        args: list[OpArgs] = self._decode_args("CPU op", events, OpArgs)
        self.op.add(
            **self._common("op", events, times),
            external_id=self._column(args, "external_id"),
            sequence=self._column(args, "sequence"),
            **{f: self.inputs[f].codes(raw_bytes(list(map(attrgetter(f), args)))) for f in self.inputs},
            **metadata_costs(args),
        )

    def _column(self, args: list[Any], field: str) -> np.ndarray:
        return self.checks.ints(list(map(attrgetter(field), args)), ARG_LABEL.get(field, field))

    def _triples(self, args: list[Any], field: str) -> np.ndarray:
        """grid / block lists -> an (n, 3) int32 array, -1 where a trace gives fewer dimensions."""
        lists = list(map(attrgetter(field), args))
        out = np.full((len(lists), 3), -1, dtype=np.int32)
        # The lists' lengths and their flattening in C: no Python loop per kernel.
        full = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists)) == 3
        if full.any():
            three = lists if full.all() else list(compress(lists, full))
            out[full] = self.checks.ints(list(chain.from_iterable(three)), field, np.int32).reshape(-1, 3)
        return out

    def _add_ranges(self, events: list[Event], times, domains: np.ndarray) -> None:
        columns = self._common("range", events, times)
        # A GPU annotation lives on a device (Kineto puts the device in its pid).
        columns["tid"] = np.where(domains == "gpu", columns["pid"], columns["tid"])
        self.range.add(**columns, domain=label_codes(domains, RANGE_DOMAINS))

    def _renumber_thread_names(self, new_codes: np.ndarray) -> None:
        if len(new_codes):
            for table in (self.gpu, self.launch, self.op, self.range):
                for col in ("pid", "tid"):
                    table.parts[col] = [renumber_thread_names(ids, new_codes) for ids in table.parts.get(col, [])]

    # -- the whole trace ---------------------------------------------------------------
    def build(self, path: str, source: Source, document: Document) -> ColumnTrace:
        # Thread names numbered in name order: the same codes however the file was chunked.
        names = self.thread_names.values
        rank = np.empty(len(names), dtype=np.int64)
        rank[sorted(range(len(names)), key=names.__getitem__)] = np.arange(len(names))
        self._renumber_thread_names(thread_name_code(rank))
        health = self._drop_zero_times()
        clock = Clock([c for c in (self.gpu, self.launch, self.op, self.range) if c.rows], self.windows)
        kernels = self._kernel_table(clock)
        launches = self._launch_table(clock, kernels["correlation"])
        ops = self._op_table(clock)
        ranges = self._range_table(clock)
        meta = kineto_meta(path, source, checked_header(document.header, self.checks), self.legacy, clock)
        meta["health"] = [p.to_dict() for p in health]
        meta["kernel_times_unknown"] = bool(health) and not self.gpu.rows
        if meta.get("rank") is not None:
            kernels = kernels.with_columns(rank=np.full(len(kernels), meta["rank"], dtype=np.int32))
        warnings = [f"{n:,} {what} events have unreadable `args` (wrong types); their details are unknown" for what, n in self.bad_args.items()]
        cut = sum(i.cut_labels() for i in self.names.values())
        if cut:
            warnings.append(f"{cut:,} distinct name(s) longer than {MAX_NAME_CHARS:,} characters were cut to that length as read "
                            "(no report shows more)")
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
                problems += zero_time_problems(self.gpu.array("kind", np.int8), dropped, GPU_KINDS)
            else:
                problems += zero_time_problems(np.zeros(len(ts), dtype=np.int8), dropped, (_HEALTH_KIND[name],))
            tables[name].keep(~dropped)
        return problems

    def _kernel_table(self, clock: Clock) -> ColumnTable:
        c = self.gpu
        if not c.rows:
            return ColumnTable(KERNEL_COLUMNS, {})
        start, end = clock.start_end(c)
        kinds = c.array("kind", np.int8)
        # Without args.device / args.stream, Kineto's GPU pid is the device and tid the stream.
        device, stream = c.array("device"), c.array("stream")
        grid, block = np.concatenate(c.parts["grid"]), np.concatenate(c.parts["block"])
        data = {
            "kind": Coded(kinds, list(GPU_KINDS), object_labels=False),
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
            "bytes": np.where(kinds == GPU_KINDS.index("kernel"), -1, c.array("bytes")),
            "coll_in_elems": c.array("in_elems"),
            "coll_out_elems": c.array("out_elems"),
            "coll_group_size": self.checks.ints(c.array("group_size"), "Group size", np.int32),
            "meta_flops": c.array("meta_flops", np.float64), "meta_bytes": c.array("meta_bytes", np.float64),
        }
        for col, interner in self.strings.items():
            data[col] = interner.coded(c.array(col, np.int32))
        # Ties in start: kernels, then copies, then memsets, each in file order (lexsort is stable).
        return ColumnTable(KERNEL_COLUMNS, data).take(np.lexsort((kinds, start)))

    def _launch_table(self, clock: Clock, gpu_correlations: np.ndarray) -> ColumnTable:
        c = self.launch
        if not c.rows:
            return ColumnTable(LAUNCH_COLUMNS, {})
        start, end = clock.start_end(c)
        names = self.names["launch"].coded(c.array("name", np.int32))
        correlation = c.array("correlation")
        # Keep calls that launched captured work, that launch work by their name, or that begin
        # or end a graph capture.
        keep = isin(correlation, gpu_correlations) | names.where(lambda n: bool(LAUNCH_API.search(n) or CAPTURE_API.search(n)))
        data = {"name": names, "pid": c.array("pid"), "tid": c.array("tid"), "start": start, "end": end, "correlation": correlation,
                "kernel": self.launch_kernels.coded(c.array("kernel", np.int32))}
        table = ColumnTable(LAUNCH_COLUMNS, data).take(np.flatnonzero(keep))
        for col in ("name", "kernel"):
            table.columns[col] = table.columns[col].without_unused()
        return table.take(np.argsort(table["start"], kind="stable"))

    def _op_table(self, clock: Clock) -> ColumnTable:
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
            decoded = np.array([decode_json(v) for v in interner.values] + [None], dtype=object)
            data[col] = decoded[c.array(col, np.int32)]  # rows share the decoded (read-only) lists
        return ColumnTable(OP_COLUMNS, data)

    def _range_table(self, clock: Clock) -> ColumnTable:
        c = self.range
        if not c.rows:
            return ColumnTable(RANGE_COLUMNS, {})
        start, end = clock.start_end(c)
        domain = c.array("domain", np.int8)
        data = {
            "name": self.names["range"].coded(c.array("name", np.int32)),
            "domain": Coded(domain, list(RANGE_DOMAINS), object_labels=False),
            "pid": c.array("pid"), "tid": c.array("tid"), "start": start, "end": end,
        }
        # User ranges, then GPU annotations, then Python frames, each in file order.
        return ColumnTable(RANGE_COLUMNS, data).take(np.argsort(domain, kind="stable"))

