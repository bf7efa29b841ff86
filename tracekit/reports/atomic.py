"""The one writer of output files: a temporary file beside the target, renamed into place,
so an interrupted run or a full disk never leaves a file that looks complete (DESIGN.md).

Every command that writes a file (export --perfetto, diff --out, check --junit,
calibrate --out) checks its output path first (`check_out_file`, before any analysis),
then writes through `write_file` / `open_atomic`: an output path that is empty, lies
under a file, or names one of the command's own inputs is refused with one line (exit 2),
and so is a write that fails (ENOSPC, EFBIG, EACCES). Files get the user's umask."""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from typing import BinaryIO, Iterable, Iterator

from tracekit.errors import TraceError, raise_if_interrupted


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _same_file(a: str, b: str) -> bool:
    with contextlib.suppress(OSError):
        return os.path.samefile(a, b)
    return os.path.realpath(a) == os.path.realpath(b)


def check_out_path(path: str | None, option: str) -> None:
    """An output path the user gave: not empty, and UTF-8 (a name that prints)."""
    if path is None:
        return
    if not path.strip():
        raise TraceError(option, "an empty path: name the file or directory to write")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise TraceError(os.fsencode(path).decode("utf-8", "backslashreplace"), "output path is not valid UTF-8; choose a plain name") from None


def writable_parent(path: str) -> None:
    """The nearest existing ancestor of `path` is a directory this user may write in."""
    ancestor = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(ancestor):
        ancestor = os.path.dirname(ancestor)
    if not os.path.isdir(ancestor):
        raise TraceError(path, f"{ancestor} is a file, so nothing can be written under it")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise TraceError(path, f"permission denied: cannot create files in {ancestor}")


def refuse_inputs(path: str, inputs: Iterable[str | os.PathLike | None]) -> None:
    for given in inputs:
        if given is not None and os.path.exists(given) and os.path.exists(path) and _same_file(path, os.fspath(given)):
            raise TraceError(path, "is one of this command's inputs: refusing to overwrite it; choose another output path")


def check_out_file(path: str | None, option: str, inputs: Iterable[str | os.PathLike | None] = ()) -> None:
    """Refuse, before any work is done, an output file that cannot be written or would
    replace an input."""
    if path is None:
        return
    check_out_path(path, option)
    if os.path.isdir(path):
        raise TraceError(path, f"is a directory; {option} names a file")
    writable_parent(path)
    if os.path.exists(path) and not os.access(path, os.W_OK) and not os.access(os.path.dirname(os.path.abspath(path)), os.W_OK):
        raise TraceError(path, "permission denied")
    refuse_inputs(path, inputs)


@contextlib.contextmanager
def open_atomic(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary file to write; on success it replaces `path` (with the user's umask), on
    any error or interrupt it is removed. OSError becomes one TraceError line."""
    path = os.fspath(path)
    tmp = None
    try:
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)[:64]}.tracekit-", dir=directory)
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        raise_if_interrupted()
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            reason += " (nothing was written)"
        raise TraceError(path, f"cannot write: {reason}") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def write_file(path: str | os.PathLike, data: str | bytes) -> str:
    path = os.fspath(path)
    with open_atomic(path) as f:
        f.write(data.encode("utf-8", errors="backslashreplace") if isinstance(data, str) else data)
    return path
