"""The process's stdout and stderr, owned in one place (issue 39): whatever they are connected
to, a run ends with its one line and its exit code, never a traceback about the stream.

- stdout closed (`>&-`): Python leaves sys.stdout None (click then failed on `.isatty`); it
  becomes a stream that refuses a write with one line (exit 2). A command that writes
  nothing to stdout (`export`) runs as usual.
- stdout that fails (a full disk, /dev/full, EIO): one line naming stdout, exit 2. A reader
  that went away (EPIPE) stays a BrokenPipeError: cli/main.py ends that run quietly.
- stderr closed or failing: what cannot be said is dropped; the exit code stays the run's
  own (2 for bad input, not 1 for the failed error line).
- a library's own log lines (matplotlib's about an unwritable HOME) are not printed.

fd 1 and 2 are kept open (on /dev/null when they were closed) so that no file this run opens
later takes their number and receives output meant for a terminal.
"""

from __future__ import annotations

import io
import os
import sys

from tracekit.errors import TraceError


class _Descriptor(io.RawIOBase):
    """A raw writer on a descriptor whose failures are decided by `name`'s policy."""

    def __init__(self, fd: int, name: str, closed_before: bool):
        super().__init__()
        self._fd = fd
        self._name = name
        self._closed_before = closed_before

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return not self._closed_before and os.isatty(self._fd)

    def write(self, data) -> int:
        size = len(memoryview(data))
        if self._closed_before:
            if self._name == "stderr":
                return size
            raise TraceError("stdout", "is closed (`>&-`): nothing can be written to it; redirect it to a file or /dev/null")
        try:
            return os.write(self._fd, data)
        except BrokenPipeError:
            if self._name == "stderr":
                return size
            raise
        except OSError as exc:
            if self._name == "stderr":  # nowhere left to say it
                return size
            raise TraceError("stdout", f"cannot write: {exc.strerror or exc}") from None


def _keep_open(fd: int) -> bool:
    """Whether `fd` was closed when the process started; if so it is reopened on /dev/null."""
    try:
        os.fstat(fd)
        return False
    except OSError:
        pass
    null = os.open(os.devnull, os.O_RDWR)
    if null != fd:
        os.dup2(null, fd)
        os.close(null)
    return True


def _stream(fd: int, name: str, current) -> io.TextIOWrapper:
    closed_before = _keep_open(fd) or current is None  # (None: closed at start, reopened by tracekit/__main__.py)
    raw = _Descriptor(fd, name, closed_before)
    encoding = getattr(current, "encoding", None) or "utf-8"
    tty = raw.isatty()
    return io.TextIOWrapper(io.BufferedWriter(raw), encoding=encoding, errors="backslashreplace",
                            line_buffering=tty or name == "stderr", write_through=name == "stderr")


def own_streams() -> None:
    """Replace sys.stdout and sys.stderr by the guarded streams. For the `tracekit` process
    only (cli.main.run): a caller running main() in its own process keeps its streams."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
    sys.stdout = _stream(1, "stdout", sys.stdout)
    sys.stderr = _stream(2, "stderr", sys.stderr)
    quiet_libraries()


def quiet_libraries() -> None:
    """A library's own warnings do not reach stderr as raw lines: matplotlib logs two about an
    unwritable HOME (it then uses a temporary config directory, which is all a report needs)."""
    import logging

    logging.getLogger("matplotlib").setLevel(logging.ERROR)
