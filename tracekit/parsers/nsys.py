"""Nsight Systems SQLite export -> Trace (the same tables as the Kineto parser).

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
import pandas as pd

from tracekit.common.format import MAX_NAME_CHARS
from tracekit.errors import TraceError
from tracekit.parsers import nsys_schema as S
from tracekit.parsers.nsys_unfinished import refuse_unfinished
from tracekit.parsers.source import MAX_RATIO, RATIO_FLOOR_BYTES
from tracekit.parsers.columns import MAX_ABS_TIME_NS, Checks
from tracekit.trace.launch_api import CAPTURE_API, LAUNCH_API
from tracekit.parsers.nsys_nvtx import parse_op_text
from tracekit.trace import KERNEL_COLUMNS, LAUNCH_COLUMNS, OP_COLUMNS, RANGE_COLUMNS, Trace, make_table

PROCESS_MASK = 0xFFFFFFFFFF000000  # globalTid -> globalPid
NVTX_PUSH_POP, NVTX_START_END, NVTX_DOMAIN_CREATE = 59, 60, 75
RUNTIME_CLASSES = (0, 1)  # CUDA runtime and driver calls; other classes are backtrace rows
# CUPTI's memcpy kinds, for exports without the ENUM_CUDA_MEMCPY_OPER table.
_CUPTI_COPY_KINDS = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP"}


def parse_nsys(path: str) -> Trace:
    refuse_unfinished(path)
    conn = _connect(path)
    try:
        return _Reader(path, conn).trace()
    except (sqlite3.Error, pd.errors.DatabaseError) as exc:
        # pandas wraps sqlite3's error in its own, with the whole query in the message
        reason = str(exc.__cause__ or exc)
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

    def _query(self, sql: str) -> pd.DataFrame:
        return pd.read_sql_query(sql, self.conn)

    def trace(self) -> Trace:
        strings = self._strings()
        kernels = self._gpu_activity(strings)
        launches = self._launches(strings, set(kernels["correlation"].tolist()))
        ops, ranges, open_ranges = self._nvtx()
        if not any(len(t) for t in (kernels, launches, ops, ranges)):
            raise TraceError(self.path, "the export holds no readable kernels, copies, runtime calls or NVTX ranges"
                                        + (f" ({'; '.join(self.checks.warnings())})" if self.checks.counts else ""))
        origin = min(int(t["start"].min()) for t in (kernels, launches, ops, ranges) if len(t))
        last = max(int(t["end"].max()) for t in (kernels, launches, ops, ranges) if len(t))
        for table in (kernels, launches, ops, ranges):
            table["start"] -= origin
            table["end"] -= origin
        meta = self._meta(origin, last)
        warnings = []
        if self.bad_utf8:
            warnings.append(f"{self.bad_utf8:,} strings are not UTF-8; undecodable bytes were replaced with U+FFFD")
        if open_ranges:
            warnings.append(f"{open_ranges:,} NVTX ranges were never closed; they are taken to end with the capture")
        if not meta["devices"]:
            warnings.append(f"the export has no {S.GPU_INFO} table: the GPU model is unknown (name it with --device)")
        warnings += self.checks.warnings()
        return Trace(kernels, launches, ops, ranges, meta, warnings)

    # -- strings ---------------------------------------------------------------------------
    def _strings(self) -> pd.Series:
        # Names longer than any report shows are cut by SQLite as they are read (each row's
        # text held once, however long); a string table far larger than the file (a view
        # that makes each row megabytes) is no export, as the gzip rule says.
        table = self._query(f"SELECT id, substr(value, 1, {MAX_NAME_CHARS}) AS value, length(value) AS chars FROM {S.STRINGS}")
        chars = table["chars"].fillna(0).to_numpy(dtype=np.float64)
        total, size = int(chars.sum()), os.path.getsize(self.path)
        if total > max(RATIO_FLOOR_BYTES, MAX_RATIO * size):
            raise TraceError(self.path, f"its string table ({S.STRINGS}) holds {total:,} characters, over {MAX_RATIO}x the "
                                        f"file's {size:,} bytes: not a plausible export (a view that expands?)")
        cut = chars > MAX_NAME_CHARS
        self.checks.count(f"{{n}} {S.STRINGS} texts longer than {MAX_NAME_CHARS:,} characters were cut to that length as read "
                          "(no report shows more)", int(cut.sum()))
        if cut.any():
            table.loc[cut, "value"] = [v[: MAX_NAME_CHARS - 1] + ("\u2026" if isinstance(v, str) else b"...") for v in table.loc[cut, "value"]]
        ids = self.checks.ints(table["id"], f"{S.STRINGS}.id")
        values = np.array([_as_text(v) for v in table["value"].tolist()], dtype=object)
        strings = pd.Series(values, index=ids)[ids >= 0]
        duplicated = strings.index.duplicated()
        self.checks.count(f"{{n}} {S.STRINGS} ids appear twice; the first text of each is used", duplicated.sum())
        return strings[~duplicated]

    def _names(self, ids: pd.Series, strings: pd.Series) -> pd.Categorical:
        """String ids -> Categorical of their text (NULL ids stay missing; ids the string
        table lacks read "<unknown string id>" and are counted)."""
        ids = self.checks.ints(ids, "name id")
        codes, uniques = pd.factorize(np.where(ids >= 0, ids, np.nan), use_na_sentinel=True)
        texts = strings.reindex(uniques.astype(np.int64)).to_numpy(dtype=object) if len(uniques) else np.array([], dtype=object)
        unknown = pd.isna(texts)
        if unknown.any():
            rows = int(np.isin(codes, np.flatnonzero(unknown)).sum())
            self.checks.count(f"{{n}} names refer to ids missing from the {S.STRINGS} table (emptied or damaged?); shown as <unknown string id>", rows)
        texts = np.where(unknown, "<unknown string id>", texts)
        unique_texts, remap = np.unique(texts.astype(str), return_inverse=True)
        codes = np.where(codes >= 0, remap[np.maximum(codes, 0)], -1) if len(remap) else codes
        return pd.Categorical.from_codes(codes, categories=pd.Index(unique_texts, dtype=object))

    # -- GPU activity ----------------------------------------------------------------------
    def _gpu_activity(self, strings: pd.Series) -> pd.DataFrame:
        parts = [self._kernels(strings)]
        if self.schema.has(S.MEMCPY):
            parts.append(self._copies(S.MEMCPY, "memcpy"))
        if self.schema.has(S.MEMSET):
            parts.append(self._copies(S.MEMSET, "memset"))
        parts = [p for p in parts if len(p)]
        if not parts:
            return make_table(KERNEL_COLUMNS)
        table = pd.concat(parts, ignore_index=True)
        table["kind"] = pd.Categorical(table["kind"], categories=["kernel", "memcpy", "memset"])
        for col in ("name", "copy_kind"):
            table[col] = table[col].astype("category")
        return make_table(KERNEL_COLUMNS, {c: table[c] for c in table.columns if c in KERNEL_COLUMNS}).sort_values("start", kind="stable").reset_index(drop=True)

    def _checked(self, rows: pd.DataFrame, what: str, ints: dict[str, Any]) -> pd.DataFrame:
        """Rows with usable times, their integer columns converted (int64 or int32 bounds)."""
        start, end, keep = self.checks.times_ns(rows["start"], rows["end"], what)
        out = rows.assign(start=start, end=end, **{c: self.checks.ints(rows[c], f"{what}: {c}", dtype) for c, dtype in ints.items()})
        return out[keep].reset_index(drop=True)

    def _kernels(self, strings: pd.Series) -> pd.DataFrame:
        t = S.KERNEL
        col = self.schema.column_or
        rows = self._query(
            f"SELECT start, end, deviceId, streamId, correlationId, globalPid, demangledName, "
            f"{col(t, 'shortName', 'NULL')}, {col(t, 'registersPerThread', -1)}, gridX, gridY, gridZ, blockX, blockY, blockZ, "
            f"{col(t, 'staticSharedMemory', 0)}, {col(t, 'dynamicSharedMemory', 0)} FROM {t}"
        )
        i32, i64 = np.int32, np.int64
        rows = self._checked(rows, "kernels", {
            "deviceId": i32, "streamId": i64, "correlationId": i64, "globalPid": i64, "registersPerThread": i32,
            "gridX": i32, "gridY": i32, "gridZ": i32, "blockX": i32, "blockY": i32, "blockZ": i32,
            "staticSharedMemory": i64, "dynamicSharedMemory": i64,
        })
        shared = rows["staticSharedMemory"] + rows["dynamicSharedMemory"]
        shared_known = (rows["staticSharedMemory"] >= 0) & (rows["dynamicSharedMemory"] >= 0) & (shared >= 0)
        return pd.DataFrame({
            "kind": "kernel",
            "name": self._names(rows["demangledName"], strings).astype(object),
            "short_name": self._names(rows["shortName"], strings).astype(object),
            "device": rows["deviceId"], "stream": rows["streamId"],
            "start": rows["start"], "end": rows["end"],
            "pid": rows["globalPid"], "correlation": rows["correlationId"],
            "grid_x": rows["gridX"], "grid_y": rows["gridY"], "grid_z": rows["gridZ"],
            "block_x": rows["blockX"], "block_y": rows["blockY"], "block_z": rows["blockZ"],
            "registers": rows["registersPerThread"],
            "shared_memory": shared.where(shared_known, -1),
            "copy_kind": None,
        })

    def _copies(self, table: str, kind: str) -> pd.DataFrame:
        col = self.schema.column_or
        rows = self._query(
            f"SELECT start, end, deviceId, streamId, correlationId, globalPid, bytes, {col(table, 'copyKind', -1)} FROM {table}"
        )
        rows = self._checked(rows, f"{kind}s", {
            "deviceId": np.int32, "streamId": np.int64, "correlationId": np.int64, "globalPid": np.int64, "bytes": np.int64, "copyKind": np.int64,
        })
        copy_kind = rows["copyKind"].map(self._copy_kind_names()).astype(object) if kind == "memcpy" else None
        return pd.DataFrame({
            "kind": kind,
            "name": "Memcpy " + copy_kind.fillna("Unknown") if kind == "memcpy" else "Memset",
            "device": rows["deviceId"], "stream": rows["streamId"],
            "start": rows["start"], "end": rows["end"],
            "pid": rows["globalPid"], "correlation": rows["correlationId"],
            "bytes": rows["bytes"],
            "copy_kind": copy_kind,
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
    def _launches(self, strings: pd.Series, gpu_correlations: set[int]) -> pd.DataFrame:
        t = S.RUNTIME
        where = f"WHERE eventClass IN {RUNTIME_CLASSES}" if self.schema.has(t, "eventClass") else ""
        name_id = "nameId" if self.schema.has(t, "nameId") else "NULL AS nameId"
        rows = self._query(f"SELECT start, end, globalTid, correlationId, {name_id} FROM {t} {where}")
        rows = self._checked(rows, "runtime calls", {"globalTid": np.int64, "correlationId": np.int64})
        names = self._names(rows["nameId"], strings)
        categories = pd.Series(names.categories, dtype=object)
        launches_work = (categories.str.contains(LAUNCH_API) | categories.str.contains(CAPTURE_API)).to_numpy(dtype=bool)
        codes = names.codes
        by_name = launches_work[np.maximum(codes, 0)] if len(launches_work) else np.zeros(len(codes), dtype=bool)
        keep = rows["correlationId"].isin(gpu_correlations).to_numpy() | ((codes >= 0) & by_name)
        gtid = rows["globalTid"].to_numpy()
        table = make_table(LAUNCH_COLUMNS, {
            "name": names, "pid": gtid & np.int64(PROCESS_MASK - (1 << 64)), "tid": gtid,
            "start": rows["start"], "end": rows["end"], "correlation": rows["correlationId"],
        })[keep]
        table["name"] = table["name"].cat.remove_unused_categories()
        return table.sort_values("start", kind="stable").reset_index(drop=True)

    # -- NVTX ------------------------------------------------------------------------------
    def _nvtx(self) -> tuple[pd.DataFrame, pd.DataFrame, int]:
        if not self.schema.has(S.NVTX):
            return make_table(OP_COLUMNS), make_table(RANGE_COLUMNS), 0
        t = S.NVTX
        text = "COALESCE(n.text, s.value)" if self.schema.has(t, "textId") else "n.text"
        join = f"LEFT JOIN {S.STRINGS} s ON s.id = n.textId" if self.schema.has(t, "textId") else ""
        domain = "n.domainId" if self.schema.has(t, "domainId") else "0"
        rows = self._query(
            f"SELECT n.start, n.end, n.eventType, n.globalTid, {domain} AS domainId, {text} AS text "
            f"FROM {t} n {join} WHERE n.eventType IN ({NVTX_PUSH_POP}, {NVTX_START_END}, {NVTX_DOMAIN_CREATE})"
        )
        rows["text"] = [_as_text(v) for v in rows["text"].tolist()]
        created = (rows["eventType"] == NVTX_DOMAIN_CREATE).to_numpy()
        domains = dict(zip(rows.loc[created, "domainId"], rows.loc[created, "text"]))
        rows = rows[~created].reset_index(drop=True)
        open_ranges = int(rows["end"].isna().sum())
        if open_ranges:  # they end with the capture: the last instant any range starts
            starts = pd.to_numeric(rows["start"], errors="coerce")
            last = starts[starts.abs() <= MAX_ABS_TIME_NS].max()
            rows["end"] = rows["end"].astype(object).where(rows["end"].notna(), last)
        rows = self._checked(rows, "NVTX ranges", {"globalTid": np.int64})
        parsed = [parse_op_text(text) for text in rows["text"].tolist()]
        is_op = np.array([p is not None for p in parsed], dtype=bool)
        gtid = rows["globalTid"].to_numpy()
        pid = gtid & np.int64(PROCESS_MASK - (1 << 64))
        op_rows = np.flatnonzero(is_op)
        ops = make_table(OP_COLUMNS, {
            "name": pd.Categorical([parsed[i][0] for i in op_rows]),
            "pid": pid[op_rows], "tid": gtid[op_rows],
            "start": rows["start"].to_numpy()[op_rows], "end": rows["end"].to_numpy()[op_rows],
            "sequence": self.checks.ints([parsed[i][1] for i in op_rows], "emit_nvtx seq"),
            "input_dims": [parsed[i][2] for i in op_rows],
        }) if len(op_rows) else make_table(OP_COLUMNS)
        range_rows = np.flatnonzero(~is_op)
        domain_names = np.array([f"nvtx:{domains[d]}" if _hashable(d) and d in domains else "nvtx" for d in rows["domainId"].tolist()], dtype=object)
        ranges = make_table(RANGE_COLUMNS, {
            "name": pd.Categorical(rows["text"].to_numpy(dtype=object)[range_rows]),
            "domain": pd.Categorical(domain_names[range_rows]),
            "pid": pid[range_rows], "tid": gtid[range_rows],
            "start": rows["start"].to_numpy()[range_rows], "end": rows["end"].to_numpy()[range_rows],
        }) if len(range_rows) else make_table(RANGE_COLUMNS)
        return ops, ranges, open_ranges

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


def _as_text(value: Any) -> str:
    """A text column's value as str: NULL -> "", a blob decoded (bad bytes replaced)."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value if isinstance(value, str) else str(value)


def _whole(value: Any) -> int | None:
    """An integer column's value, or None when it is NULL, text, a blob, fractional or infinite."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True
