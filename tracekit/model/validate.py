"""The one validation layer for `--model` config.json files (as parsers/columns.py is for traces).

A config is read once, bounded (file size, nesting depth, integer digits, list lengths) before
anything uses it, and every field is then read through `Fields`, which checks its type, its
range and its finiteness. Whatever does not fit is one TraceError naming the file, the key
(dotted, `text_config.intermediate_size`) and the reason: exit 2, never a crash, never a
negative or infinite size used in a sum, never a loop as long as a hostile number.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any

from tracekit.errors import TraceError

MAX_FILE_BYTES = 32 * 2**20  # real config.json files are a few kB (100s of kB with long `ignore` lists)
MAX_DEPTH = 32  # real configs nest 3 or 4 levels (quantization_config.config_groups.group_0.weights)
MAX_INT_DIGITS = 19  # anything longer is beyond int64 and beyond any architecture
MAX_LIST = 100_000  # entries of one list (an `ignore` list names a few thousand modules at most)
MAX_LAYERS = 4096  # the deepest published decoders have a few hundred layers
MAX_SIZE = 2**24  # hidden / intermediate widths, vocabulary, heads x dims: 16.7 M is far above any model
MAX_TOKENS = 2**40  # windows and positions


class _TooLong(ValueError):
    pass


def _parse_int(text: str) -> int:
    digits = text.lstrip("-")
    if len(digits) > MAX_INT_DIGITS:
        raise _TooLong(f"an integer of {len(digits):,} digits")
    return int(text)


def _depth(text: str) -> int:
    """The deepest nesting of objects and arrays in JSON text, strings aside (no recursion)."""
    stripped = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)
    depth = deepest = 0
    for char in re.sub(r"[^\[\]{}]", "", stripped):
        depth += 1 if char in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def read_config(path: str) -> tuple[str, dict]:
    """(file read, its top-level object): a config.json or a directory holding one, bounded."""
    file = os.path.join(path, "config.json") if os.path.isdir(path) else path
    try:
        with open(file, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise TraceError(path, "no such model config (pass a config.json or a directory holding one)") from None
    except OSError as exc:
        raise TraceError(path, f"cannot read model config ({exc.strerror or exc})") from None
    if len(data) > MAX_FILE_BYTES:
        raise TraceError(path, f"model config is larger than {MAX_FILE_BYTES // 2**20} MiB; a config.json is a few kB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceError(path, f"model config is not valid JSON (not UTF-8: {exc.reason} at byte {exc.start})") from None
    depth = _depth(text)
    if depth > MAX_DEPTH:
        raise TraceError(path, f"model config nests {depth} levels deep (at most {MAX_DEPTH})")
    try:
        raw = json.loads(text, parse_int=_parse_int)
    except _TooLong as exc:
        raise TraceError(path, f"model config has {exc} (at most {MAX_INT_DIGITS})") from None
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        raise TraceError(path, f"model config is not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise TraceError(path, "model config is not a JSON object")
    return file, raw


class Fields:
    """Typed, bounded reads of one (nested) object of a config; `prefix` names it in errors."""

    def __init__(self, path: str, data: dict, prefix: str = ""):
        self.path, self.data, self.prefix = path, data, prefix

    def fail(self, key: str, reason: str) -> TraceError:
        return TraceError(self.path, f"model config `{self.prefix}{key}` {reason}")

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def first(self, *keys: str) -> str | None:
        """The first of `keys` that is present (not null)."""
        return next((k for k in keys if self.has(k)), None)

    def int(self, *keys: str, lo: int = 1, hi: int = MAX_SIZE, default: Any = ..., allow: tuple = ()) -> Any:
        """A whole number in [lo, hi] (a whole float such as 4096.0 is accepted), from the
        first key present; `allow`: other values accepted as they are (-1: "whole row")."""
        key = self.first(*keys)
        if key is None:
            if default is ...:
                raise TraceError(self.path, f"model config lacks {' / '.join(f'`{self.prefix}{k}`' for k in keys)}")
            return default
        value = self.data[key]
        if value in allow and not isinstance(value, bool):
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(key, f"must be a whole number, not {_show(value)}")
        if isinstance(value, float):
            if not math.isfinite(value):
                raise self.fail(key, f"must be finite, not {value}")
            if value != math.floor(value):
                raise self.fail(key, f"must be a whole number, not {value}")
        if not lo <= value <= hi:
            raise self.fail(key, f"must be between {lo:,} and {hi:,}, not {_show(value)}")
        return int(value)

    def text(self, *keys: str, default: Any = None, limit: int = 200) -> Any:
        key = self.first(*keys)
        if key is None:
            return default
        value = self.data[key]
        if not isinstance(value, str):
            raise self.fail(key, f"must be a string, not {_show(value)}")
        if len(value) > limit:
            raise self.fail(key, f"is longer than {limit} characters")
        return value

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(key, f"must be true or false, not {_show(value)}")
        return value

    def obj(self, key: str) -> Fields | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.fail(key, f"must be an object, not {_show(value)}")
        return Fields(self.path, value, f"{self.prefix}{key}.")

    def items(self, key: str, kind: type = str, limit: int = 1000) -> list:
        """A list of `kind` (strings up to `limit` characters; whole numbers >= 0)."""
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(key, f"must be a list, not {_show(value)}")
        if len(value) > MAX_LIST:
            raise self.fail(key, f"has {len(value):,} entries (at most {MAX_LIST:,})")
        for i, item in enumerate(value):
            if kind is str and (not isinstance(item, str) or len(item) > limit):
                raise self.fail(f"{key}[{i}]", f"must be a string of at most {limit} characters, not {_show(item)}")
            if kind is int and (isinstance(item, bool) or not isinstance(item, int) or not 0 <= item <= MAX_TOKENS):
                raise self.fail(f"{key}[{i}]", f"must be a whole number from 0 to {MAX_TOKENS:,}, not {_show(item)}")
        return value


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f"the string {json.dumps(value[:30])}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:g}"
    return "null" if value is None else type(value).__name__
