"""The one error type for bad input.

Every problem with a user's file becomes a TraceError carrying the path and a plain
reason; the CLI prints it as one line and exits 2. Anything else is a bug (exit 1).
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator


class TraceError(Exception):
    def __init__(self, path: str | os.PathLike, reason: str):
        self.path = os.fspath(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")

    def __reduce__(self):
        # Worker processes send their errors back pickled; the default would call
        # TraceError(message) with one argument and break the pool (BrokenProcessPool).
        return (type(self), (self.path, self.reason))


# The signals (SIGINT, SIGTERM) that interrupted this run, recorded by the command's handler
# (cli/main.py). The handler raises KeyboardInterrupt, but Python drops an exception raised
# where it cannot propagate (an at-fork hook, a __del__): writers check this list before
# they rename anything into place, so an interrupted run never installs its output.
INTERRUPTS: list[int] = []


def raise_if_interrupted() -> None:
    if INTERRUPTS:
        raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """SIGINT / SIGTERM held back (blocked, not lost) for a few system calls and delivered
    right after: around a fork (an interrupt inside os.fork runs its handler in an at-fork
    hook, where Python can only print it as "Exception ignored"), or a temporary directory
    made and recorded, or renames that must not be torn apart halfway. Main thread only."""
    import signal
    import threading

    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def address_space_limit() -> int | None:
    """The process's address-space limit (`ulimit -v`) in bytes, or None when there is none
    (or the platform cannot say)."""
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):
        return None
    return None if limit == resource.RLIM_INFINITY else limit


def memory_ran_out(exc: BaseException) -> bool:
    """Whether `exc` says the process could not get memory (under `ulimit -v` or a cgroup):
    MemoryError, a shared library that cannot be mapped, numpy's allocation failures."""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "_ArrayMemoryError":
        return True
    text = str(exc)
    return isinstance(exc, (ImportError, SystemError, OSError)) and any(
        words in text for words in ("failed to map segment", "Cannot allocate memory", "Unable to allocate", "MemoryError"))
