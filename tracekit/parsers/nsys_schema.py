"""What an Nsight Systems export holds, read from the file itself.

nsys changes its schema between versions (columns come and go, a lazy export leaves out
tables that would be empty). Nothing is assumed from the version number: the parser asks
`sqlite_master` and `PRAGMA table_info` what is there.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX = "NVTX_EVENTS"
STRINGS = "StringIds"
GPU_INFO = "TARGET_INFO_GPU"
SESSION_START = "TARGET_INFO_SESSION_START_TIME"
EXPORT_META = ("META_DATA_EXPORT", "EXPORT_META_DATA")  # newer, older name
MEMCPY_KINDS = "ENUM_CUDA_MEMCPY_OPER"


@dataclass(frozen=True)
class Schema:
    tables: dict[str, tuple[str, ...]]  # table -> its columns

    @classmethod
    def read(cls, conn: sqlite3.Connection) -> "Schema":
        # (a view is read like a table; one whose query runs for ever is stopped by the
        # connection's bound: nsys._bounded)
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")]
        tables = {}
        for name in names:
            quoted = name.replace('"', '""')
            tables[name] = tuple(r[1] for r in conn.execute(f'PRAGMA table_info("{quoted}")'))
        return cls(tables)

    def has(self, table: str, column: str | None = None) -> bool:
        cols = self.tables.get(table)
        return cols is not None and (column is None or column in cols)

    def column_or(self, table: str, column: str, fallback: str) -> str:
        """`column` when the table has it, else an SQL expression standing in for it."""
        return column if self.has(table, column) else f"{fallback} AS {column}"

    def missing_for_nsys(self) -> list[str]:
        """The tables an Nsight export always has that this file lacks."""
        return [t for t in (STRINGS, RUNTIME, KERNEL) if t not in self.tables]
