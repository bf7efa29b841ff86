"""The Python API; the CLI is a thin layer over it."""

from __future__ import annotations

import os

from tracekit.link import link
from tracekit.parsers import parse
from tracekit.trace import Trace


def load(path: str | os.PathLike) -> Trace:
    """Parse a trace (Kineto JSON / .json.gz, or Nsight Systems SQLite) and link it.

    Raises tracekit.TraceError, carrying the path and a plain reason, for bad input.
    Problems that cost only part of the trace are listed in `trace.warnings`.
    """
    return link(parse(path))
