"""Getting a trace file's bytes: read-only, gzip-aware, tolerant of a stream cut short."""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass, field

from tracekit.errors import TraceError

try:  # ISA-L inflates gzip about 2x faster than zlib (55 MB: 0.04 vs 0.10 s), same interface
    from isal import isal_zlib as inflate
except ImportError:  # pragma: no cover - a platform without its wheel: the standard library
    inflate = zlib

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"
_CHUNK = 16 << 20


@dataclass
class Source:
    path: str
    data: bytes | bytearray  # the uncompressed bytes (a plain file copied: see _snapshot)
    compressed: bool
    warnings: list[str] = field(default_factory=list)
    cut_short: bool = False  # the gzip stream ended early or broke: what follows is lost
    replaced_utf8: int = 0  # byte sequences that were not UTF-8, replaced in `data` (utf8.py)

    def all_warnings(self) -> list[str]:
        from tracekit.parsers.utf8 import replaced_warning

        return self.warnings + replaced_warning(self.replaced_utf8)


def check_readable(path: str | os.PathLike) -> str:
    """The one guard before a trace is read: a regular file this user may read, not empty."""
    import stat

    path = os.fspath(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise TraceError(path, "no such file") from None
    except OSError as exc:  # EACCES on a directory above it, ELOOP, ENAMETOOLONG, ...
        raise TraceError(path, f"cannot read: {exc.strerror or exc}") from None
    if stat.S_ISDIR(mode):
        raise TraceError(path, "is a directory, not a trace file")
    if not stat.S_ISREG(mode):
        # (a FIFO once read as "empty file"; /dev/zero would be read for ever)
        what = "a FIFO or pipe" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"
        raise TraceError(path, f"is {what}, not a trace file: save the trace to a file and give its path")
    if not os.access(path, os.R_OK):
        raise TraceError(path, "permission denied")
    if os.path.getsize(path) == 0:
        raise TraceError(path, "empty file")
    return path


def list_directory(path: str) -> list[str]:
    """A directory's entry names, sorted; unreadable (EACCES for a normal user) is one line."""
    try:
        return sorted(os.listdir(path))
    except OSError as exc:
        raise TraceError(path, f"cannot list the directory: {exc.strerror or exc}") from None


def read_head(path: str, n: int = 16) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError as exc:
        raise TraceError(path, f"cannot read: {exc.strerror or exc}") from None


def read_source(path: str) -> Source:
    """The file's uncompressed content, as UTF-8 JSON text where it is another encoding
    (tracekit.parsers.input_forms: bz2, xz, gzip inside gzip, BOMs, UTF-16/32). The file is
    opened read-only and never written."""
    from tracekit.parsers.input_forms import as_utf8, decompressed

    if read_head(path, 2) == GZIP_MAGIC:
        data, warnings, cut_short = _gunzip(path)
        source = Source(path, data, True, warnings, cut_short=cut_short)
        first = "gzip"
    else:
        source, first = Source(path, _snapshot(path), False), None
    size, limit, by_ratio = os.path.getsize(path), max_uncompressed_bytes(), not os.environ.get(LIMIT_ENV)
    data = decompressed(path, source.data, source.warnings, lambda produced: check_growth(path, produced, size, limit, by_ratio), first)
    source.compressed = source.compressed or data is not source.data
    source.data = as_utf8(path, data, source.warnings)
    return source


def _snapshot(path: str) -> bytearray:
    """A plain file's bytes, copied into memory. Not a memory map: a mapped file that shrinks
    while it is read (a profiler still writing it, a `> trace.json` in another shell) kills
    the process with SIGBUS, no message (issue 39: 11 of 11 tries). The copy takes the same
    address space as the map did; a file whose size changes during the copy is refused."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        data = bytearray(size)
        view = memoryview(data)
        done = 0
        while done < size:
            got = f.readinto(view[done:])
            if not got:
                break
            done += got
        view.release()
        now = os.fstat(f.fileno()).st_size
    if done != size or now != size:
        raise TraceError(path, f"the file changed while it was read ({size:,} bytes, then {max(done, now) if now != size else done:,}): "
                               "read it again once whatever writes it has finished")
    return data


# A decompression bomb (a few MB of gzip holding many GB) is refused with a plain message
# before it exhausts memory. Real traces compress 10-30x; gzip can reach ~1000x. So:
# beyond 256 MiB uncompressed, more than 200x the compressed size is refused; and nothing
# may grow past half the machine's memory, or TRACEKIT_MAX_GUNZIP_BYTES when set.
MAX_RATIO = 200
RATIO_FLOOR_BYTES = 256 << 20
LIMIT_ENV = "TRACEKIT_MAX_GUNZIP_BYTES"


def max_uncompressed_bytes() -> int:
    setting = os.environ.get(LIMIT_ENV)
    if setting:
        try:
            limit = int(setting)
        except ValueError:
            limit = 0
        if limit < 1:  # (-1 was once taken as "1 byte": every gzip trace refused, for a reason the user never gave)
            raise TraceError(LIMIT_ENV, f"environment variable must be a positive number of bytes, not {setting[:40]!r}")
        return limit
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError, AttributeError):
        return 32 << 30


def check_growth(path: str, produced: int, compressed: int, limit: int, by_ratio: bool) -> None:
    if produced > limit:
        raise TraceError(path, f"gzip expands past {_size(limit)} (limit: half the memory, or {LIMIT_ENV}); "
                               f"set {LIMIT_ENV} to read it anyway")
    if by_ratio and produced > RATIO_FLOOR_BYTES and produced > MAX_RATIO * max(compressed, 1):
        raise TraceError(path, f"gzip expands more than {MAX_RATIO}x (past {_size(produced)} from {_size(compressed)}): "
                               f"not a plausible trace (a decompression bomb?); set {LIMIT_ENV} to read it anyway")


def _size(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB"


def _gunzip(path: str) -> tuple[bytearray, list[str], bool]:
    """Decompress every gzip member, a bounded piece at a time (so a bomb is stopped before
    it takes the memory); a stream cut short keeps what was decompressed (and says so: the
    third value). Bytes after the last member that are not another member (padding, garbage)
    are ignored with a warning, as gzip(1) does: the data before them is whole."""
    out = bytearray()
    warnings: list[str] = []
    compressed = os.path.getsize(path)
    limit = max_uncompressed_bytes()
    by_ratio = not os.environ.get(LIMIT_ENV)  # a limit the user sets replaces the ratio rule
    decomp = inflate.decompressobj(wbits=31)
    with open(path, "rb") as f:
        while True:
            chunk = f.read(_CHUNK)
            if not chunk:
                break
            try:
                while chunk:
                    out += decomp.decompress(chunk, _CHUNK)
                    check_growth(path, len(out), compressed, limit, by_ratio)
                    if decomp.eof:
                        # What follows a member's end is the next member (concatenated .gz
                        # files). Checked first: after the end, zlib may also leave those
                        # bytes in unconsumed_tail, and feeding them back loops for ever.
                        chunk = decomp.unused_data
                        if chunk and not GZIP_MAGIC.startswith(chunk[:2]):
                            trailing = compressed - f.tell() + len(chunk)
                            warnings.append(f"{trailing:,} bytes after the end of the gzip data are not gzip; ignored")
                            return out, warnings, False
                        if chunk:
                            decomp = inflate.decompressobj(wbits=31)
                    else:
                        chunk = decomp.unconsumed_tail
            except (zlib.error, inflate.error) as exc:
                if not out:
                    raise TraceError(path, f"gzip data is corrupt ({exc})") from None
                warnings.append(f"gzip data is corrupt after {len(out):,} bytes ({exc}); read what came before")
                return out, warnings, True
    if not decomp.eof:
        out += decomp.flush()
        if not out:
            raise TraceError(path, "gzip stream is cut short before any data")
        warnings.append(f"gzip stream is cut short after {len(out):,} uncompressed bytes; reading what is whole")
        return out, warnings, True
    return out, warnings, False
