"""Compare a summary with a stored golden copy within tolerances, and write goldens.

Floats compare with a relative tolerance (plus an absolute one for values near 0); every
other value, key and list length must match exactly: null turning into a number is a change."""

from __future__ import annotations

import json
import os
from typing import Any


def first_difference(expected: Any, actual: Any, rel: float = 1e-6, abs_tol: float = 1e-12, path: str = "$") -> str | None:
    """A description of the first difference between golden `expected` and `actual`, or None."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in sorted(set(expected) | set(actual)):
            if key not in expected or key not in actual:
                return f"{path}.{key}: only in {'golden' if key in expected else 'new'}"
            found = first_difference(expected[key], actual[key], rel, abs_tol, f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return f"{path}: {len(expected)} items in golden, {len(actual)} now"
        for i, (e, a) in enumerate(zip(expected, actual)):
            found = first_difference(e, a, rel, abs_tol, f"{path}[{i}]")
            if found:
                return found
        return None
    numeric = isinstance(actual, (int, float)) and not isinstance(actual, bool)
    if isinstance(expected, float) and numeric:
        return None if abs(actual - expected) <= max(rel * abs(expected), abs_tol) else f"{path}: golden {expected}, now {actual}"
    return None if expected == actual else f"{path}: golden {expected!r}, now {actual!r}"


def portable(summary: dict[str, Any], golden_dir: str | os.PathLike) -> dict[str, Any]:
    """`summary` with an absolute trace path made relative to the golden file's directory
    (POSIX separators): the same text wherever the repository lies. A relative path is
    kept as the caller gave it (it is portable already)."""
    trace = summary.get("trace") if isinstance(summary, dict) else None
    if not isinstance(trace, dict) or not isinstance(trace.get("path"), str) or not os.path.isabs(trace["path"]):
        return summary
    relative = os.path.relpath(os.path.abspath(trace["path"]), os.path.abspath(golden_dir)).replace(os.sep, "/")
    return {**summary, "trace": {**trace, "path": relative}}


def golden_text(summary: dict[str, Any]) -> str:
    """The stored form: sorted keys, one space indent, strict JSON."""
    return json.dumps(summary, indent=1, sort_keys=True, allow_nan=False) + "\n"


def write_golden(path: str | os.PathLike, summary: dict[str, Any]) -> None:
    from tracekit.common.atomic import write_file

    write_file(path, golden_text(summary))
