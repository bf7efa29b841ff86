"""The one writer of output files: a temporary file beside the target, renamed into place,
so an interrupted run or a full disk never leaves a file that looks complete (DESIGN.md).

Every command that writes a file (export --perfetto, diff --out, check --junit,
calibrate --out) checks its output path first (`check_out_file`, before any analysis),
then writes through `write_file` / `open_atomic`: an output path that is empty, lies
under a file, or names one of the command's own inputs is refused with one line (exit 2),
and so is a write that fails (ENOSPC, EFBIG, EACCES). Files get the user's umask.

Staging (a temporary file or directory named `.NAME.tracekit-*` beside the target) is held
with a lock (flock) while its run lives: the next run into the same place removes the
staging that no live run holds (a run killed by SIGKILL, or by the kernel when memory ran
out), and a run forced to end by its interrupt watchdog removes its own (errors.STAGING).
Several files of one command (diff.json and diff.md) are staged together and published
together, or not at all (`write_files`)."""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from typing import BinaryIO, Iterable, Iterator

from tracekit.errors import STAGING, TraceError, raise_if_interrupted


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


STAGING_MARK = ".tracekit-"


def staging_prefix(path: str) -> str:
    """The name every staging entry for `path` starts with, beside it."""
    return f".{os.path.basename(path)[:64]}{STAGING_MARK}"


def hold(path: str, fd: int | None = None) -> int:
    """Lock a staging entry for as long as this run lives (the lock goes with the process,
    whatever ends it), and record it for the interrupt watchdog. A descriptor of its own."""
    import fcntl

    held = os.dup(fd) if fd is not None else os.open(path, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    STAGING[path] = held
    return held


def release(path: str) -> None:
    held = STAGING.pop(path, None)
    if held is not None:
        with contextlib.suppress(OSError):
            os.close(held)


def remove_stale(directory: str, prefix: str) -> None:
    """Remove the staging entries in `directory` whose names start with `prefix` that no
    live run holds (left by a run killed before it could clean up)."""
    import fcntl
    import shutil

    try:
        names = [n for n in os.listdir(directory) if n.startswith(prefix)]
    except OSError:
        return
    for name in names:
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # a live run's
            os.close(fd)
            continue
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(path)
        finally:
            os.close(fd)


@contextlib.contextmanager
def open_atomic(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary file to write; on success it replaces `path` (with the user's umask), on
    any error or interrupt it is removed. OSError becomes one TraceError line."""
    with staged_files([path]) as (tmp,):
        with open(tmp, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())


@contextlib.contextmanager
def staged_files(paths: Iterable[str | os.PathLike]) -> Iterator[list[str]]:
    """One staging file beside each of `paths`, to write; when the block ends without error
    they replace their targets together (after every one is written), else all are
    removed: the command's outputs are published together or not at all. OSError becomes
    one TraceError line naming the file."""
    paths = [os.fspath(p) for p in paths]
    staged: list[str] = []
    named = paths[0] if len(paths) == 1 else os.path.dirname(paths[0]) or os.curdir  # what the error line names
    try:
        for path in paths:
            directory = os.path.dirname(os.path.abspath(path))
            os.makedirs(directory, exist_ok=True)
            remove_stale(directory, staging_prefix(path))
            fd, tmp = tempfile.mkstemp(prefix=staging_prefix(path), dir=directory)
            staged.append(tmp)
            try:
                hold(tmp, fd)
                os.fchmod(fd, 0o666 & ~_umask())
            finally:
                os.close(fd)
        yield list(staged)
        raise_if_interrupted()
        for path, tmp in zip(paths, staged):
            os.replace(tmp, path)
            release(tmp)
        staged = []
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            reason += " (nothing was written)"
        raise TraceError(named, f"cannot write: {reason}") from None
    finally:
        for tmp in staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            release(tmp)


def _encoded(data: str | bytes) -> bytes:
    return data.encode("utf-8", errors="backslashreplace") if isinstance(data, str) else data


def write_file(path: str | os.PathLike, data: str | bytes) -> str:
    path = os.fspath(path)
    with open_atomic(path) as f:
        f.write(_encoded(data))
    return path


def write_files(files: dict[str, str | bytes]) -> list[str]:
    """Several files of one command, published together or not at all (diff.json and
    diff.md: a full disk at the second leaves neither)."""
    paths = list(files)
    with staged_files(paths) as staged:
        for tmp, data in zip(staged, files.values()):
            with open(tmp, "wb") as f:
                f.write(_encoded(data))
                f.flush()
                os.fsync(f.fileno())
    return paths
