"""The Python API; the CLI is a thin layer over it."""

from __future__ import annotations

import contextlib
import gc
import os

from tracekit.link import link
from tracekit.parsers import parse
from tracekit.trace import Trace


def load(path: str | os.PathLike) -> Trace:
    """Parse a trace (Kineto JSON / .json.gz, or Nsight Systems SQLite) and link it.

    Raises tracekit.TraceError, carrying the path and a plain reason, for bad input.
    Problems that cost only part of the trace are listed in `trace.warnings`.
    """
    with _gc_paused():
        return link(parse(path))


@contextlib.contextmanager
def _gc_paused():
    """Parsing makes millions of small lists and none of them forms a cycle; the cyclic
    collector would rescan them all again and again (measured: 4x slower arg decoding)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
