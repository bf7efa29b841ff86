"""Reading the small files a user hands tracekit besides traces (device files, rules,
expectations, stored summaries): bounded in size, UTF-8, nested at most MAX_DEPTH deep,
and typed field by field. Every problem is one TraceError naming the file, the key and
the reason (exit 2), as parsers/columns.py does for traces.

    tables = load_toml(path, "device file")
    f = Fields(path, "[H100]", tables["H100"])
    f.number("memory_gbps", required=True, positive=True)
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from tracekit.errors import TraceError

MAX_DEPTH = 32  # no tracekit file nests deeper than 5; a deep file is hostile or broken
TOML_MAX_BYTES = 4 << 20
MAX_TEXT = 10_000  # longest string field (a name, a pattern)
_MISSING = object()


def read_text(path: str | os.PathLike, what: str, max_bytes: int) -> str:
    """The file's text: at most `max_bytes`, UTF-8 (an error names the byte offset)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except FileNotFoundError:
        raise TraceError(path, f"no such {what}") from None
    except IsADirectoryError:
        raise TraceError(path, f"is a directory, not a {what}") from None
    except OSError as exc:
        raise TraceError(path, f"cannot read the {what}: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise TraceError(path, f"{what} larger than {max_bytes >> 20} MiB: not a {what}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceError(path, f"not UTF-8 text (byte {exc.start}): a {what} is UTF-8") from None


def load_toml(path: str | os.PathLike, what: str, max_bytes: int = TOML_MAX_BYTES) -> dict[str, Any]:
    import tomllib

    path = os.fspath(path)
    text = read_text(path, what, max_bytes)
    _shallow_enough(text, path, what, "{[")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TraceError(path, f"not valid TOML ({exc})") from None
    except RecursionError:
        raise TraceError(path, f"nested deeper than {MAX_DEPTH} levels: not a {what}") from None
    check_depth(data, path, what)
    return data


def load_json(path: str | os.PathLike, what: str, max_bytes: int, text: str | None = None) -> Any:
    """Strict JSON (NaN and Infinity are not JSON; integers beyond a float's range are refused)."""
    path = os.fspath(path)
    if text is None:
        text = read_text(path, what, max_bytes)

    def constant(name: str):
        raise TraceError(path, f"{name} is not JSON (tracekit writes null for an unknown figure)")

    try:
        data = json.loads(text, parse_constant=constant, parse_int=_int)
    except RecursionError:
        raise TraceError(path, f"nested deeper than {MAX_DEPTH} levels: not a {what}") from None
    except ValueError as exc:
        raise TraceError(path, f"not valid JSON ({exc})") from None
    check_depth(data, path, what)
    return data


def _int(text: str) -> int:
    if len(text.lstrip("-")) > 1000:  # Python refuses 4,300 digits; a float holds 309
        raise ValueError(f"an integer of {len(text)} digits")
    return int(text)


def _shallow_enough(text: str, path: str, what: str, openers: str) -> None:
    """Refuse a text whose brackets alone nest past MAX_DEPTH before a recursive parser
    sees it (brackets inside strings count too: a real file is far below the limit)."""
    depth = deepest = 0
    closers = {"{": "}", "[": "]"}
    wanted = set(openers) | {closers[o] for o in openers}
    if not wanted & set(text):
        return
    for ch in text:
        if ch in openers:
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > 4 * MAX_DEPTH:  # a margin for brackets inside strings
                    raise TraceError(path, f"nested deeper than {MAX_DEPTH} levels: not a {what}")
        elif ch in "}]":
            depth = max(depth - 1, 0)


def check_depth(value: Any, path: str, what: str, limit: int = MAX_DEPTH) -> None:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            raise TraceError(path, f"nested deeper than {limit} levels: not a {what}")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


def finite(value: Any) -> float | None:
    """`value` as a finite float, None for anything else (a string, a bool, inf, a huge int)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


def kind_of(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and finite(value) is None:
        return "an integer beyond a float's range" if isinstance(value, int) else repr(value)
    return {dict: "a table", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number"}.get(type(value), type(value).__name__)


class Fields:
    """The keys of one table of a user file, read with their types and ranges checked."""

    def __init__(self, path: str, where: str, table: Any, what: str = "table"):
        self.path, self.where = path, where
        if not isinstance(table, dict):
            raise self.error(None, f"must be a {what}, not {kind_of(table)}")
        self.table = table

    def error(self, key: str | None, reason: str) -> TraceError:
        name = ".".join(p for p in (self.where, key) if p)
        return TraceError(self.path, f"{name}: {reason}" if name else reason)

    def unknown(self, allowed) -> None:
        extra = sorted(set(self.table) - set(allowed))
        if extra:
            raise self.error(str(extra[0]), f"unknown key (known: {', '.join(sorted(allowed))})")

    def get(self, key: str, default: Any = _MISSING) -> Any:
        if key not in self.table:
            if default is _MISSING:
                raise self.error(key, "missing")
            return default
        return self.table[key]

    def number(self, key: str, default: Any = _MISSING, *, positive: bool = False, minimum: float | None = None,
               maximum: float | None = None, integer: bool = False) -> Any:
        value = self.get(key, default)
        if key not in self.table:
            return value
        if integer and (isinstance(value, bool) or not isinstance(value, int)):
            raise self.error(key, f"must be an integer, not {kind_of(value)}")
        number = finite(value)
        if number is None:
            raise self.error(key, f"must be a finite number, not {_shown(value)}")
        if positive and number <= 0:
            raise self.error(key, f"must be greater than 0, not {value}")
        if minimum is not None and number < minimum:
            raise self.error(key, f"must be at least {minimum:g}, not {value}")
        if maximum is not None and number > maximum:
            raise self.error(key, f"must be at most {maximum:g}, not {value}")
        return value if integer else number

    def string(self, key: str, default: Any = _MISSING, max_len: int = MAX_TEXT) -> Any:
        value = self.get(key, default)
        if key not in self.table:
            return value
        if not isinstance(value, str):
            raise self.error(key, f"must be a string, not {kind_of(value)}")
        if len(value) > max_len:
            raise self.error(key, f"longer than {max_len} characters")
        return value

    def strings(self, key: str, max_items: int = 1000) -> tuple[str, ...]:
        value = self.get(key, [])
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise self.error(key, f"must be a list of strings, not {kind_of(value)}")
        if len(value) > max_items:
            raise self.error(key, f"more than {max_items} items")
        for i, item in enumerate(value):
            if not isinstance(item, str) or len(item) > MAX_TEXT:
                raise self.error(f"{key}[{i}]", f"must be a string (at most {MAX_TEXT} characters), not {kind_of(item)}")
        return tuple(value)

    def boolean(self, key: str, default: bool = False) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise self.error(key, f"must be true or false, not {kind_of(value)}")
        return value

    def sub(self, key: str, default: Any = _MISSING) -> "Fields":
        value = self.get(key, default)
        return Fields(self.path, ".".join(p for p in (self.where, key) if p), value)


def _shown(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "an integer beyond a float's range" if isinstance(value, int) else repr(value)
    return kind_of(value)
