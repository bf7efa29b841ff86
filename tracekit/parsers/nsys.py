"""Nsight Systems SQLite export -> the Trace's tables as numpy columns (tracekit.trace.tables),
the same form the Kineto parser hands over: no pandas here (nsys_columns.py).

The file is opened read-only and immutable (no lock is ever taken, nothing is written).
Launches join GPU activity by correlation id within one process: ids repeat across the
processes of one export.
"""

from __future__ import annotations

import os
import pathlib
import sqlite3
from typing import Any
from urllib.parse import quote

import numpy as np

from tracekit.common.format import MAX_NAME_CHARS
from tracekit.errors import TraceError
from tracekit.parsers import nsys_schema as S
from tracekit.parsers.columns import MAX_ABS_TIME_NS, Checks
from tracekit.parsers.nsys_columns import PROCESS_MASK, StringTable, as_text, checked, fetch, joined, labelled, typed
from tracekit.parsers.nsys_nvtx import nvtx_tables
from tracekit.parsers.nsys_unfinished import refuse_unfinished
from tracekit.parsers.source import MAX_RATIO, RATIO_FLOOR_BYTES
from tracekit.trace.launch_api import CAPTURE_API, LAUNCH_API
from tracekit.trace.schema import GPU_KINDS
from tracekit.trace.tables import Coded, ColumnTable, ColumnTrace
from tracekit.trace import KERNEL_COLUMNS, LAUNCH_COLUMNS, OP_COLUMNS, RANGE_COLUMNS

RUNTIME_CLASSES = (0, 1)  # CUDA runtime and driver calls; other classes are backtrace rows
# CUPTI's memcpy kinds, for exports without the ENUM_CUDA_MEMCPY_OPER table.
_CUPTI_COPY_KINDS = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP"}


def parse_nsys(path: str) -> ColumnTrace:
    refuse_unfinished(path)
    conn = _connect(path)
    try:
        return _Reader(path, conn).trace()
    except sqlite3.Error as exc:
        reason = str(exc)
        if "interrupted" in reason:  # the progress handler's bound (_bounded)
            raise TraceError(path, "reading the export took far more SQLite work than its size allows (a damaged or "
                                   "edited file?): stopped") from None
        raise TraceError(path, f"SQLite error while reading the export (damaged or edited file?): {reason}") from None
    finally:
        conn.close()


def _connect(path: str) -> sqlite3.Connection:
    uri = f"file:{quote(str(pathlib.Path(path).resolve()))}?mode=ro&immutable=1"
    try:
        conn = sqlite3.connect(uri, uri=True)
        _bounded(conn, os.path.getsize(path))
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise TraceError(path, f"not a readable SQLite database ({exc})") from None
    except UnicodeDecodeError:  # SQLite's message quotes a damaged schema's bytes, which are not text
        raise TraceError(path, "not a readable SQLite database (its schema is damaged)") from None
    return conn


# SQLite work allowed per byte of the file: every read is bounded (issue 39: a kernel table
# made a view over an endless WITH RECURSIVE grew by 170 MB/s for ever). Reading the shared
# exports takes at most 0.2 VM instructions per byte (h100x2_fsdp: 0.5 M for 2.3 MB); the bound
# is 500x that, and at least 20 M (a runaway query on a small file ends within seconds).
SQLITE_STEPS_PER_BYTE = 100
SQLITE_MIN_STEPS = 20_000_000
_PROGRESS_EVERY = 100_000  # VM instructions between two calls of the handler


def _bounded(conn: sqlite3.Connection, size: int) -> None:
    """Interrupt any statement once the connection has run more VM instructions than a file
    of `size` bytes can need: a view (read like the table it stands for) whose query never
    ends becomes one line."""
    budget = [max(SQLITE_MIN_STEPS, SQLITE_STEPS_PER_BYTE * size) // _PROGRESS_EVERY]

    def spent() -> int:
        budget[0] -= 1
        return budget[0] < 0

    conn.set_progress_handler(spent, _PROGRESS_EVERY)


class _Reader:
    def __init__(self, path: str, conn: sqlite3.Connection):
        self.path = path
        self.conn = conn
        self.bad_utf8 = 0
        self.checks = Checks()  # every column passes through it: the one place values are validated
        conn.text_factory = self._text
        self.schema = S.Schema.read(conn)
        missing = self.schema.missing_for_nsys()
        if S.KERNEL in missing and len(missing) == 1:
            raise TraceError(path, f"Nsight Systems export without a {S.KERNEL} table: it holds no GPU kernels (was CUDA tracing on?)")
        if missing:
            raise TraceError(path, f"SQLite file is not an Nsight Systems export: tables {', '.join(missing)} are missing")

    def _text(self, raw: bytes) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            self.bad_utf8 += 1
            return raw.decode("utf-8", errors="replace")

    def trace(self) -> ColumnTrace:
        strings = self._strings()
        kernels = self._gpu_activity(strings)
        launches = self._launches(strings, kernels["correlation"])
        ops, ranges, open_ranges = nvtx_tables(self.conn, self.schema, self.checks) if self.schema.has(S.NVTX) \
            else (ColumnTable(OP_COLUMNS, {}), ColumnTable(RANGE_COLUMNS, {}), 0)
        tables = (kernels, launches, ops, ranges)
        if not any(len(t) for t in tables):
            raise TraceError(self.path, "the export holds no readable kernels, copies, runtime calls or NVTX ranges"
                                        + (f" ({'; '.join(self.checks.warnings())})" if self.checks.counts else ""))
        origin = min(int(t["start"].min()) for t in tables if len(t))
        last = max(int(t["end"].max()) for t in tables if len(t))
        kernels, launches, ops, ranges = (t.with_columns(start=t["start"] - origin, end=t["end"] - origin) for t in tables)
        meta = self._meta(origin, last)
        warnings = []
        if self.bad_utf8:
            warnings.append(f"{self.bad_utf8:,} strings are not UTF-8; undecodable bytes were replaced with U+FFFD")
        if open_ranges:
            warnings.append(f"{open_ranges:,} NVTX ranges were never closed; they are taken to end with the capture")
        if not meta["devices"]:
            warnings.append(f"the export has no {S.GPU_INFO} table: the GPU model is unknown (name it with --device)")
        warnings += self.checks.warnings()
        return ColumnTrace(kernels, launches, ops, ranges, meta, warnings)

    # -- strings ---------------------------------------------------------------------------
    def _strings(self) -> StringTable:
        # Names longer than any report shows are cut by SQLite as they are read (each row's
        # text held once, however long); a string table far larger than the file (a view
        # that makes each row megabytes) is no export, as the gzip rule says.
        table = fetch(self.conn, f"SELECT id, substr(value, 1, {MAX_NAME_CHARS}) AS value, length(value) AS chars FROM {S.STRINGS}")
        chars = typed(table["chars"]).astype(np.float64)
        total, size = int(np.nansum(chars)), os.path.getsize(self.path)
        if total > max(RATIO_FLOOR_BYTES, MAX_RATIO * size):
            raise TraceError(self.path, f"its string table ({S.STRINGS}) holds {total:,} characters, over {MAX_RATIO}x the "
                                        f"file's {size:,} bytes: not a plausible export (a view that expands?)")
        with np.errstate(invalid="ignore"):
            cut = chars > MAX_NAME_CHARS
        self.checks.count(f"{{n}} {S.STRINGS} texts longer than {MAX_NAME_CHARS:,} characters were cut to that length as read "
                          "(no report shows more)", int(cut.sum()))
        values = list(table["value"])
        for i in np.flatnonzero(cut).tolist():
            v = values[i]
            values[i] = v[: MAX_NAME_CHARS - 1] + ("\u2026" if isinstance(v, str) else b"...")
        ids = self.checks.ints(typed(table["id"]), f"{S.STRINGS}.id")
        return StringTable(ids, [as_text(v) for v in values], self.checks)

    # -- GPU activity ----------------------------------------------------------------------
    def _gpu_activity(self, strings: StringTable) -> ColumnTable:
        parts = [self._kernels(strings)]
        if self.schema.has(S.MEMCPY):
            parts.append(self._copies(S.MEMCPY, "memcpy"))
        if self.schema.has(S.MEMSET):
            parts.append(self._copies(S.MEMSET, "memset"))
        parts = [p for p in parts if len(p)]
        if not parts:
            return ColumnTable(KERNEL_COLUMNS, {})
        coded = {c: joined([p[c] for p in parts]) for c in ("name", "short_name", "copy_kind")}
        plain = {c: np.concatenate([p[c] for p in parts]) for c in parts[0].columns if c not in coded}
        kinds = np.concatenate([np.full(len(p), GPU_KINDS.index(p.kind), dtype=np.int8) for p in parts])
        table = ColumnTable(KERNEL_COLUMNS, {"kind": Coded(kinds, list(GPU_KINDS), object_labels=False), **coded, **plain})
        return table.take(np.argsort(table["start"], kind="stable"))

    def _kernels(self, strings: StringTable) -> "_Part":
        t = S.KERNEL
        col = self.schema.column_or
        rows = fetch(self.conn,
            f"SELECT start, end, deviceId, streamId, correlationId, globalPid, demangledName, "
            f"{col(t, 'shortName', 'NULL')}, {col(t, 'registersPerThread', -1)}, gridX, gridY, gridZ, blockX, blockY, blockZ, "
            f"{col(t, 'staticSharedMemory', 0)}, {col(t, 'dynamicSharedMemory', 0)} FROM {t}"
        )
        i32, i64 = np.int32, np.int64
        c, kept = checked(self.checks, rows, "kernels", {
            "deviceId": i32, "streamId": i64, "correlationId": i64, "globalPid": i64, "registersPerThread": i32,
            "gridX": i32, "gridY": i32, "gridZ": i32, "blockX": i32, "blockY": i32, "blockZ": i32,
            "staticSharedMemory": i64, "dynamicSharedMemory": i64,
        })
        static, dynamic = c["staticSharedMemory"], c["dynamicSharedMemory"]
        shared = static + dynamic
        names = {k: strings.names(typed(rows[k])[kept]) for k in ("demangledName", "shortName")}
        return _Part("kernel", {
            "name": names["demangledName"], "short_name": names["shortName"],
            "device": c["deviceId"], "stream": c["streamId"], "start": c["start"], "end": c["end"],
            "pid": c["globalPid"], "correlation": c["correlationId"],
            "grid_x": c["gridX"], "grid_y": c["gridY"], "grid_z": c["gridZ"],
            "block_x": c["blockX"], "block_y": c["blockY"], "block_z": c["blockZ"],
            "registers": c["registersPerThread"],
            "shared_memory": np.where((static >= 0) & (dynamic >= 0) & (shared >= 0), shared, -1),
            "bytes": np.full(len(kept), -1, dtype=np.int64),
            "copy_kind": Coded(np.full(len(kept), -1, dtype=np.int32), []),
        })

    def _copies(self, table: str, kind: str) -> "_Part":
        col = self.schema.column_or
        rows = fetch(self.conn, f"SELECT start, end, deviceId, streamId, correlationId, globalPid, bytes, {col(table, 'copyKind', -1)} FROM {table}")
        c, kept = checked(self.checks, rows, f"{kind}s", {
            "deviceId": np.int32, "streamId": np.int64, "correlationId": np.int64, "globalPid": np.int64, "bytes": np.int64, "copyKind": np.int64,
        })
        if kind == "memcpy":
            names = self._copy_kind_names()
            copy_kind = [names.get(k) for k in c["copyKind"].tolist()]
            name = labelled([f"Memcpy {k if k is not None else 'Unknown'}" for k in copy_kind])
        else:
            copy_kind = [None] * len(kept)
            name = Coded(np.zeros(len(kept), dtype=np.int32), ["Memset"])
        return _Part(kind, {
            "name": name, "short_name": Coded(np.full(len(kept), -1, dtype=np.int32), []),
            "device": c["deviceId"], "stream": c["streamId"], "start": c["start"], "end": c["end"],
            "pid": c["globalPid"], "correlation": c["correlationId"],
            **{f: np.full(len(kept), -1, dtype=np.int32) for f in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers")},
            "shared_memory": np.full(len(kept), -1, dtype=np.int64),
            "bytes": c["bytes"],
            "copy_kind": labelled(copy_kind),
        })

    def _copy_kind_names(self) -> dict[int, str]:
        if not self.schema.has(S.MEMCPY_KINDS, "name"):
            return _CUPTI_COPY_KINDS
        rows = self.conn.execute(f"SELECT id, name FROM {S.MEMCPY_KINDS}").fetchall()
        # CUDA_MEMCPY_KIND_HTOD -> HtoD, as Kineto and nsys stats write it
        names = {}
        for i, name in rows:
            if not isinstance(name, str):  # a NULL or damaged enum row: the id reads "Unknown"
                continue
            short = name.replace("CUDA_MEMCPY_KIND_", "")
            names[i] = _CUPTI_COPY_KINDS.get(i) if short in {v.upper() for v in _CUPTI_COPY_KINDS.values()} else short
        return names

    # -- launches --------------------------------------------------------------------------
    def _launches(self, strings: StringTable, gpu_correlations: np.ndarray) -> ColumnTable:
        t = S.RUNTIME
        where = f"WHERE eventClass IN {RUNTIME_CLASSES}" if self.schema.has(t, "eventClass") else ""
        name_id = "nameId" if self.schema.has(t, "nameId") else "NULL AS nameId"
        rows = fetch(self.conn, f"SELECT start, end, globalTid, correlationId, {name_id} FROM {t} {where}")
        c, kept = checked(self.checks, rows, "runtime calls", {"globalTid": np.int64, "correlationId": np.int64})
        names = strings.names(typed(rows["nameId"])[kept], object_labels=True)
        # Keep calls that launched captured work, that launch work by their name, or that begin
        # or end a graph capture.
        keep = np.isin(c["correlationId"], gpu_correlations) | names.where(lambda n: bool(LAUNCH_API.search(n) or CAPTURE_API.search(n)))
        gtid = c["globalTid"]
        table = ColumnTable(LAUNCH_COLUMNS, {
            "name": names, "pid": gtid & PROCESS_MASK, "tid": gtid, "start": c["start"], "end": c["end"], "correlation": c["correlationId"],
        }).take(np.flatnonzero(keep))
        table.columns["name"] = table.columns["name"].without_unused()
        return table.take(np.argsort(table["start"], kind="stable"))

    # -- meta ------------------------------------------------------------------------------
    def _meta(self, origin: int, last: int) -> dict[str, Any]:
        devices = []
        if self.schema.has(S.GPU_INFO):
            col = self.schema.column_or
            g = S.GPU_INFO
            for row in self.conn.execute(
                f"SELECT id, name, {col(g, 'memoryBandwidth', 'NULL')}, {col(g, 'smCount', 'NULL')}, "
                f"{col(g, 'totalMemory', 'NULL')}, {col(g, 'l2CacheSize', 'NULL')}, {col(g, 'computeMajor', 'NULL')}, "
                f"{col(g, 'computeMinor', 'NULL')} FROM {g} ORDER BY id"
            ):
                gpu_id, name, bandwidth, sms, memory, l2, major, minor = (row[0], row[1], *(_whole(v) for v in row[2:]))
                devices.append({
                    "id": _whole(gpu_id), "name": name if isinstance(name, str) and len(name) <= 256 else None,
                    "memory_bandwidth": bandwidth, "sm_count": sms, "memory_bytes": memory, "l2_bytes": l2,
                    "compute_capability": f"{major}.{minor}" if major is not None else None,
                })
        versions = {}
        for table in S.EXPORT_META:
            if self.schema.has(table, "name"):
                meta = dict(self.conn.execute(f"SELECT name, value FROM {table}").fetchall())
                if meta.get("EXPORT_PRODUCT_VERSION"):
                    versions["nsys"] = str(meta["EXPORT_PRODUCT_VERSION"])[:256]
                if meta.get("EXPORT_SCHEMA_VERSION"):
                    versions["export_schema"] = str(meta["EXPORT_SCHEMA_VERSION"])[:256]
        start_abs = None
        if self.schema.has(S.SESSION_START, "utcEpochNs"):
            row = self.conn.execute(f"SELECT utcEpochNs FROM {S.SESSION_START}").fetchone()
            epoch = _whole(row[0]) if row else None
            start_abs = epoch + origin if epoch is not None and abs(epoch) <= MAX_ABS_TIME_NS else None
        return {
            "format": "nsys",
            "schema": f"nsys sqlite {versions.get('export_schema', '?')}",
            "path": self.path,
            "devices": devices,
            "rank": None,
            "world_size": None,
            "span_ns": last - origin,
            "origin_abs_ns": start_abs,
            "tool_versions": versions,
        }


def _whole(value: Any) -> int | None:
    """An integer column's value, or None when it is NULL, text, a blob, fractional or infinite."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


class _Part:
    """One source table's GPU activity (kernels, memcpys or memsets) as kernel-table columns."""

    def __init__(self, kind: str, columns: dict[str, Any]):
        self.kind = kind
        self.columns = columns

    def __len__(self) -> int:
        return len(self.columns["start"])

    def __getitem__(self, name: str) -> Any:
        return self.columns[name]
