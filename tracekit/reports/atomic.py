"""Write output files atomically: a temporary file beside the target, renamed into place,
so an interrupted run never leaves a file that looks complete (DESIGN.md)."""

from __future__ import annotations

import os
import tempfile


def write_file(path: str | os.PathLike, data: str | bytes) -> str:
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tracekit-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path
