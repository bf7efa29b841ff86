"""Nsight Systems SQLite export -> Trace (the same tables as the Kineto parser).

The file is opened read-only and immutable (no lock is ever taken, nothing is written).
Launches join GPU activity by correlation id within one process: ids repeat across the
processes of one export.
"""

from __future__ import annotations

import pathlib
import sqlite3
from typing import Any
from urllib.parse import quote

import numpy as np
import pandas as pd

from tracekit.errors import TraceError
from tracekit.parsers import nsys_schema as S
from tracekit.parsers.launch_api import LAUNCH_API
from tracekit.parsers.nsys_nvtx import parse_op_text
from tracekit.trace import KERNEL_COLUMNS, LAUNCH_COLUMNS, OP_COLUMNS, RANGE_COLUMNS, Trace, make_table

PROCESS_MASK = 0xFFFFFFFFFF000000  # globalTid -> globalPid
NVTX_PUSH_POP, NVTX_START_END, NVTX_DOMAIN_CREATE = 59, 60, 75
RUNTIME_CLASSES = (0, 1)  # CUDA runtime and driver calls; other classes are backtrace rows
# CUPTI's memcpy kinds, for exports without the ENUM_CUDA_MEMCPY_OPER table.
_CUPTI_COPY_KINDS = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP"}


def parse_nsys(path: str) -> Trace:
    conn = _connect(path)
    try:
        return _Reader(path, conn).trace()
    except sqlite3.DatabaseError as exc:
        raise TraceError(path, f"SQLite error while reading the export: {exc}") from None
    finally:
        conn.close()


def _connect(path: str) -> sqlite3.Connection:
    uri = f"file:{quote(str(pathlib.Path(path).resolve()))}?mode=ro&immutable=1"
    try:
        conn = sqlite3.connect(uri, uri=True)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise TraceError(path, f"not a readable SQLite database ({exc})") from None
    return conn


class _Reader:
    def __init__(self, path: str, conn: sqlite3.Connection):
        self.path = path
        self.conn = conn
        self.bad_utf8 = 0
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
        return Trace(kernels, launches, ops, ranges, meta, warnings)

    # -- strings ---------------------------------------------------------------------------
    def _strings(self) -> pd.Series:
        table = self._query(f"SELECT id, value FROM {S.STRINGS}")
        return pd.Series(table["value"].to_numpy(dtype=object), index=table["id"].to_numpy())

    @staticmethod
    def _names(ids: pd.Series, strings: pd.Series) -> pd.Categorical:
        """String ids -> Categorical of their text (missing ids stay missing)."""
        codes, uniques = pd.factorize(ids.to_numpy(dtype=np.float64), use_na_sentinel=True)
        texts = strings.reindex(uniques.astype(np.int64)).to_numpy(dtype=object) if len(uniques) else np.array([], dtype=object)
        texts = np.where(pd.isna(texts), "<unknown string id>", texts)
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

    def _kernels(self, strings: pd.Series) -> pd.DataFrame:
        t = S.KERNEL
        col = self.schema.column_or
        rows = self._query(
            f"SELECT start, end, deviceId, streamId, correlationId, globalPid, demangledName, "
            f"{col(t, 'shortName', 'NULL')}, {col(t, 'registersPerThread', -1)}, gridX, gridY, gridZ, blockX, blockY, blockZ, "
            f"{col(t, 'staticSharedMemory', 0)}, {col(t, 'dynamicSharedMemory', 0)} FROM {t}"
        )
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
            "shared_memory": rows["staticSharedMemory"] + rows["dynamicSharedMemory"],
            "copy_kind": None,
        })

    def _copies(self, table: str, kind: str) -> pd.DataFrame:
        col = self.schema.column_or
        rows = self._query(
            f"SELECT start, end, deviceId, streamId, correlationId, globalPid, bytes, {col(table, 'copyKind', -1)} FROM {table}"
        )
        copy_kind = rows["copyKind"].map(self._copy_kind_names()) if kind == "memcpy" else None
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
            short = name.replace("CUDA_MEMCPY_KIND_", "")
            names[i] = _CUPTI_COPY_KINDS.get(i) if short in {v.upper() for v in _CUPTI_COPY_KINDS.values()} else short
        return names

    # -- launches --------------------------------------------------------------------------
    def _launches(self, strings: pd.Series, gpu_correlations: set[int]) -> pd.DataFrame:
        t = S.RUNTIME
        where = f"WHERE eventClass IN {RUNTIME_CLASSES}" if self.schema.has(t, "eventClass") else ""
        name_id = "nameId" if self.schema.has(t, "nameId") else "NULL AS nameId"
        rows = self._query(f"SELECT start, end, globalTid, correlationId, {name_id} FROM {t} {where}")
        names = self._names(rows["nameId"], strings)
        launches_work = pd.Series(names.categories, dtype=object).str.contains(LAUNCH_API).to_numpy(dtype=bool)
        codes = names.codes
        keep = rows["correlationId"].isin(gpu_correlations).to_numpy() | np.where(codes >= 0, launches_work[np.maximum(codes, 0)], False)
        gtid = rows["globalTid"].to_numpy(dtype=np.int64)
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
        created = rows["eventType"] == NVTX_DOMAIN_CREATE
        domains = dict(zip(rows.loc[created, "domainId"], rows.loc[created, "text"]))
        rows = rows[~created].reset_index(drop=True)
        open_ranges = int(rows["end"].isna().sum())
        if open_ranges:
            rows["end"] = rows["end"].fillna(rows["start"].max())
        rows["end"] = rows["end"].astype(np.int64)
        rows["text"] = rows["text"].fillna("")
        parsed = [parse_op_text(text) for text in rows["text"].tolist()]
        is_op = np.array([p is not None for p in parsed], dtype=bool)
        gtid = rows["globalTid"].to_numpy(dtype=np.int64)
        pid = gtid & np.int64(PROCESS_MASK - (1 << 64))
        op_rows = np.flatnonzero(is_op)
        ops = make_table(OP_COLUMNS, {
            "name": pd.Categorical([parsed[i][0] for i in op_rows]),
            "pid": pid[op_rows], "tid": gtid[op_rows],
            "start": rows["start"].to_numpy()[op_rows], "end": rows["end"].to_numpy()[op_rows],
            "sequence": np.array([parsed[i][1] for i in op_rows], dtype=np.int64),
            "input_dims": [parsed[i][2] for i in op_rows],
        }) if len(op_rows) else make_table(OP_COLUMNS)
        range_rows = np.flatnonzero(~is_op)
        domain_names = rows["domainId"].map(lambda d: f"nvtx:{domains[d]}" if d in domains else "nvtx").to_numpy(dtype=object)
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
                devices.append({
                    "id": row[0], "name": row[1], "memory_bandwidth": row[2], "sm_count": row[3],
                    "memory_bytes": row[4], "l2_bytes": row[5],
                    "compute_capability": f"{row[6]}.{row[7]}" if row[6] is not None else None,
                })
        versions = {}
        for table in S.EXPORT_META:
            if self.schema.has(table, "name"):
                meta = dict(self.conn.execute(f"SELECT name, value FROM {table}").fetchall())
                if meta.get("EXPORT_PRODUCT_VERSION"):
                    versions["nsys"] = meta["EXPORT_PRODUCT_VERSION"]
                if meta.get("EXPORT_SCHEMA_VERSION"):
                    versions["export_schema"] = meta["EXPORT_SCHEMA_VERSION"]
        start_abs = None
        if self.schema.has(S.SESSION_START, "utcEpochNs"):
            row = self.conn.execute(f"SELECT utcEpochNs FROM {S.SESSION_START}").fetchone()
            start_abs = int(row[0]) + origin if row and row[0] is not None else None
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
