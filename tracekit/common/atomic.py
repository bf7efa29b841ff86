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
together, or not at all (`write_files`).

What an output path names decides how it is written (`output_kind`), never by replacing
what is not a file of the user's (issue 39: `--perfetto /dev/null` as root once renamed a
regular file over the real /dev/null):

- nothing yet, or a regular file: staged beside it and renamed into place;
- a symlink of the user's (or the directory owner's) to a regular file: written through, as
  a shell's `>` writes it: the file it names keeps its inode and mode, the link is kept; to
  nothing yet: the file it names is made. Another user's link is refused
  (tracekit.common.ownership: the kernel's protected_symlinks rule);
- a character device (/dev/null, a terminal, /dev/stdout on one) or a FIFO / pipe (also
  /dev/stdout or /proc/self/fd/1 on a pipe): written through, once the output is complete
  (staged in the temporary directory until then); a FIFO that no reader opens within
  FIFO_WAIT_S is refused;
- a block device, a socket or a directory: refused with one line."""

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


FIFO_WAIT_S = 10.0  # how long a FIFO named as an output may wait for its reader

# An output path's kind (output_kind)
NEW_OR_FILE, WRITE_THROUGH = "file", "through"


def absolute(path: str) -> str:
    """os.path.abspath, with a working directory that was deleted under the run as one line."""
    try:
        return os.path.abspath(path)
    except FileNotFoundError:
        raise TraceError(path, "the working directory no longer exists, so a relative path names nothing: "
                               "give an absolute path or run from an existing directory") from None


def output_kind(path: str) -> str:
    """NEW_OR_FILE (staged and renamed into place) or WRITE_THROUGH (a character device or a
    FIFO, written into); anything else an output may not be is refused with one line."""
    import stat

    from tracekit.common.ownership import refuse_foreign_link

    refuse_foreign_link(path)  # another user's link is never followed (protected_symlinks)
    try:
        mode = os.stat(path).st_mode  # through symlinks: what the link names decides
    except (FileNotFoundError, NotADirectoryError):  # nothing there yet (writable_parent says why it cannot be)
        return NEW_OR_FILE
    except OSError as exc:
        raise TraceError(path, f"cannot write: {exc.strerror or exc}") from None
    if stat.S_ISREG(mode):
        # the user's own link to a file: written into, so the file keeps its inode and mode
        return WRITE_THROUGH if os.path.islink(path) else NEW_OR_FILE
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return WRITE_THROUGH
    what = ("a directory" if stat.S_ISDIR(mode) else "a block device" if stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
    raise TraceError(path, f"is {what}: refusing to write to it; name a file")


def publish_target(path: str) -> str:
    """Where a staged output is renamed to: a symlink is followed (the file it names is
    replaced and the link kept), any other path is itself."""
    return os.path.realpath(path) if os.path.islink(path) else path


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
    ancestor = os.path.dirname(absolute(path))
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
    if output_kind(path) == WRITE_THROUGH:
        if not os.access(path, os.W_OK):
            raise TraceError(path, "permission denied")
        refuse_inputs(path, inputs)  # a link to an input is the input
        return
    target = publish_target(path)
    writable_parent(target)
    if os.path.exists(target) and not os.access(target, os.W_OK) and not os.access(os.path.dirname(absolute(target)), os.W_OK):
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
    """One staging file for each of `paths`, to write; when the block ends without error
    they are published together (after every one is written), else all are removed, and so
    are the directories made for them: the command's outputs are published together or not
    at all, and nothing partial is left. A file is staged beside its target and renamed
    into place; a device or FIFO is staged in the temporary directory and written through
    (output_kind). OSError becomes one TraceError line naming the file."""
    paths = [os.fspath(p) for p in paths]
    staged: list[str] = []
    made: list[str] = []  # directories this run made for its outputs, deepest last
    named = paths[0] if len(paths) == 1 else os.path.dirname(paths[0]) or os.curdir  # what the error line names
    try:
        kinds = [output_kind(path) for path in paths]
        targets = [publish_target(path) if kind == NEW_OR_FILE else path for path, kind in zip(paths, kinds)]
        for path, kind, target in zip(paths, kinds, targets):
            if kind == WRITE_THROUGH:
                directory = tempfile.gettempdir()
            else:
                directory = os.path.dirname(absolute(target))
                made += _make_directories(directory)
            remove_stale(directory, staging_prefix(target))
            fd, tmp = tempfile.mkstemp(prefix=staging_prefix(target), dir=directory)
            staged.append(tmp)
            try:
                hold(tmp, fd)
                os.fchmod(fd, 0o666 & ~_umask())
            finally:
                os.close(fd)
        yield list(staged)
        raise_if_interrupted()
        for path, kind, target, tmp in zip(paths, kinds, targets, staged):
            if kind == WRITE_THROUGH:
                _write_through(tmp, path)
                os.unlink(tmp)
            else:
                os.replace(tmp, target)
            release(tmp)
        staged = made = []
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
        for directory in reversed(made):
            with contextlib.suppress(OSError):
                os.rmdir(directory)  # only while empty: never what another writer put there


def _make_directories(directory: str) -> list[str]:
    """os.makedirs, returning the directories it made (outermost first)."""
    missing = []
    while directory and not os.path.isdir(directory):
        missing.append(directory)
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    missing.reverse()
    made = []
    for directory in missing:
        try:
            os.mkdir(directory)
        except FileExistsError:
            continue
        made.append(directory)
    return made


def _open_fifo_writer(path: str) -> int:
    """A FIFO opened for writing once a reader has it open (O_NONBLOCK: open() would wait for
    ever), for at most FIFO_WAIT_S; then blocking again, so that writes wait for the reader."""
    import time

    deadline = time.monotonic() + FIFO_WAIT_S
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: no reader yet
                raise
            if time.monotonic() > deadline:
                raise TraceError(path, f"is a FIFO that no reader opened within {FIFO_WAIT_S:.0f} s: nothing was written") from None
            time.sleep(0.05)
            continue
        os.set_blocking(fd, True)
        return fd


def _write_through(staged: str, path: str) -> None:
    """The complete output copied into a device, a FIFO or a linked file (never replaced)."""
    import stat

    mode = os.stat(path).st_mode
    if stat.S_ISFIFO(mode):
        fd = _open_fifo_writer(path)
    else:  # a device, or the file a link of the user's names (emptied first, its inode and mode kept)
        fd = os.open(path, os.O_WRONLY | (os.O_TRUNC if stat.S_ISREG(mode) else 0))
    try:
        with open(staged, "rb") as src:
            while chunk := src.read(1 << 20):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view):]
    except BrokenPipeError:
        raise TraceError(path, "its reader closed it before the output was written") from None
    finally:
        os.close(fd)


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
