"""Getting a trace file's bytes: read-only, gzip-aware, tolerant of a stream cut short."""

from __future__ import annotations

import mmap
import os
import zlib
from dataclasses import dataclass, field

from tracekit.errors import TraceError

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"
_CHUNK = 16 << 20


@dataclass
class Source:
    path: str
    data: bytes | bytearray | mmap.mmap  # the uncompressed bytes (an mmap for plain files: no copy)
    compressed: bool
    warnings: list[str] = field(default_factory=list)


def check_readable(path: str | os.PathLike) -> str:
    path = os.fspath(path)
    if not os.path.exists(path):
        raise TraceError(path, "no such file")
    if os.path.isdir(path):
        raise TraceError(path, "is a directory, not a trace file")
    if not os.access(path, os.R_OK):
        raise TraceError(path, "permission denied")
    if os.path.getsize(path) == 0:
        raise TraceError(path, "empty file")
    return path


def read_head(path: str, n: int = 16) -> bytes:
    with open(path, "rb") as f:
        return f.read(n)


def read_source(path: str) -> Source:
    """The file's uncompressed content. The file is opened read-only and never written."""
    if read_head(path, 2) == GZIP_MAGIC:
        data, warnings = _gunzip(path)
        return Source(path, data, True, warnings)
    with open(path, "rb") as f:
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return Source(path, data, False)


def _gunzip(path: str) -> tuple[bytearray, list[str]]:
    """Decompress every gzip member; a stream cut short keeps what was decompressed."""
    out = bytearray()
    warnings: list[str] = []
    decomp = zlib.decompressobj(wbits=31)
    with open(path, "rb") as f:
        while True:
            chunk = f.read(_CHUNK)
            if not chunk:
                break
            try:
                while chunk:
                    out += decomp.decompress(chunk)
                    chunk = decomp.unused_data if decomp.eof else b""
                    if chunk:  # a second gzip member follows (concatenated .gz files)
                        decomp = zlib.decompressobj(wbits=31)
            except zlib.error as exc:
                if not out:
                    raise TraceError(path, f"gzip data is corrupt ({exc})") from None
                warnings.append(f"gzip data is corrupt after {len(out):,} bytes ({exc}); read what came before")
                return out, warnings
    if not decomp.eof:
        out += decomp.flush()
        if not out:
            raise TraceError(path, "gzip stream is cut short before any data")
        warnings.append(f"gzip stream is cut short after {len(out):,} uncompressed bytes; reading what is whole")
    return out, warnings
