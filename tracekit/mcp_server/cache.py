"""The analyses the MCP server holds: one per (options, device, inode, size, mtime_ns).

A model often asks several tools about one trace at once (the summary, then the top kernels,
then one of them explained); the analysis is the costly part, so calls that arrive together
on one file wait for the one analysis in progress instead of starting their own. A file
replaced or rewritten in place gets a new key (its inode, size or mtime changed), so a stale
analysis is never served. Few are kept: an analysis holds the trace's tables in memory.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import OrderedDict
from concurrent.futures import Future
from typing import Any, Callable, Hashable

from tracekit.errors import TraceError, printable

KEEP = 4  # analyses held at once; the least recently used goes first


def file_key(path: str) -> tuple[int, int, int, int]:
    """(device, inode, size, mtime_ns) of `path`, or the one-line reason it cannot be read."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise TraceError(path, "no such file") from None
    except OSError as exc:
        raise TraceError(path, f"cannot be read ({exc.strerror or type(exc).__name__})") from None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class AnalysisCache:
    """get(path, options, compute) -> compute(path) once per key, shared by concurrent callers."""

    def __init__(self, keep: int = KEEP, log: Callable[[str], None] | None = None):
        self._keep = keep
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, Future] = OrderedDict()
        self._log = log or (lambda line: print(line, file=sys.stderr, flush=True))

    def get(self, path: str, options: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
        key = (options, file_key(path))
        with self._lock:
            future = self._entries.get(key)
            owner = future is None
            if owner:
                future = Future()
                self._entries[key] = future
                while len(self._entries) > self._keep:
                    self._entries.popitem(last=False)
            else:
                self._entries.move_to_end(key)
        if owner:
            try:
                self._log(f"tracekit mcp: analysing {printable(path)}")
                future.set_result(compute())
            except BaseException as exc:  # the waiters get the same error; nothing bad is kept
                with self._lock:
                    if self._entries.get(key) is future:
                        del self._entries[key]
                future.set_exception(exc)
        return future.result()
