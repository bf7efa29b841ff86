"""One parser per input format; `parse` sniffs the format from the file's first bytes."""

from __future__ import annotations

import os
import shlex

from tracekit.errors import TraceError
from tracekit.parsers.source import GZIP_MAGIC, SQLITE_MAGIC, check_readable, read_head
from tracekit.trace.tables import ColumnTrace
from tracekit.trace import Trace
from tracekit.trace.frames import to_trace


def sniff(path: str) -> str:
    head = read_head(path, 64)
    if head.startswith(SQLITE_MAGIC):
        return "nsys"
    if head.startswith(GZIP_MAGIC) or head.lstrip()[:1] in (b"{", b"["):
        return "kineto"
    from tracekit.parsers.input_forms import compression_of, utf16_without_bom

    if compression_of(head) or head.startswith((b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")) \
            or utf16_without_bom(head):
        return "kineto"  # compressed or another text encoding: read_source reads it, or names it
    if path.endswith((".json", ".json.gz")):
        return "kineto"  # let the JSON decoder say what is wrong with it
    raise TraceError(path, "not a torch.profiler JSON trace (.json, .json.gz) or an Nsight Systems SQLite export (.sqlite)" + how_to_read(path))


# Nsight Systems' own report formats (current and before 2021.1): only its CLI reads them.
_NSYS_REPORTS = (".nsys-rep", ".qdrep")


def how_to_read(path: str) -> str:
    """The command that turns a file tracekit cannot read into one it can, where one is known."""
    lower = path.lower()
    for ext in _NSYS_REPORTS:
        if lower.endswith(ext):
            name = os.path.basename(path)
            return (f"; an Nsight Systems report: export it with `nsys export --type sqlite --output "
                    f"{shlex.quote(name[: -len(ext)] + '.sqlite')} {shlex.quote(name)}` and analyse the .sqlite")
    return ""


def parse_tables(path: str | os.PathLike, progress=None, workers: int | None = None, meanwhile=None) -> ColumnTrace:
    """The trace's tables as numpy columns, whatever the format (no pandas: see
    trace/tables.py). `progress(done, total)`, if given,
    follows the events read (JSON traces). `workers`: processes that decode one large JSON
    trace (default: the cores available; 1: none). `meanwhile()`: called once while worker
    processes decode, if they do (see kineto_parallel.py)."""
    path = check_readable(path)
    fmt = sniff(path)
    if fmt == "nsys":
        from tracekit.parsers.nsys import parse_nsys

        return parse_nsys(path)
    from tracekit.parsers.kineto import parse_kineto

    return parse_kineto(path, progress, workers, meanwhile)


def parse(path: str | os.PathLike, progress=None, workers: int | None = None) -> Trace:
    """The trace as the Trace contract's DataFrames (unlinked)."""
    return as_trace(parse_tables(path, progress, workers))


def as_trace(tables: ColumnTrace) -> Trace:
    """The column tables as the Trace contract's DataFrames (imports pandas)."""
    return to_trace(tables)
