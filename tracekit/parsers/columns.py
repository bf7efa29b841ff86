"""Validating and converting input columns: what a parser hands to the Trace is in range.

Each parser passes its raw columns through a `Checks` object once, in one place per
format: integers outside int64 (or the column's narrower type), NaN, infinities, text in
numeric columns, timestamps too large to be nanoseconds of one capture, durations below
zero. What cannot be used becomes "unknown" (-1) or is dropped, and every such value is
counted, so the user sees a warning with counts instead of wrong numbers or a crash.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

import numpy as np

# Times (ns from the capture's first event) must leave room for `end = start + duration`
# and for differences between tables without overflowing int64 (9.2e18 ns).
MAX_ABS_TIME_NS = 4 * 10**18  # about 127 years: wall-clock ns since 1970 fit until 2096
MAX_DURATION_NS = 10**18  # about 31 years
_INT_BOUNDS = {np.dtype(t): (np.iinfo(t).min, np.iinfo(t).max) for t in (np.int32, np.int64)}


class Checks:
    """Counts of what was clamped, dropped or read as unknown, turned into warnings."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = defaultdict(int)

    def count(self, message: str, n: int) -> None:
        if n:
            self.counts[message] += int(n)

    def warnings(self) -> list[str]:
        return [message.format(n=f"{n:,}") for message, n in self.counts.items()]

    # -- integers ------------------------------------------------------------------------
    def ints(self, values: Any, column: str, dtype: Any = np.int64, unknown: int = -1) -> np.ndarray:
        """Any column (Python ints of any size, floats, text, None) -> `dtype`. Missing
        values (None, NaN: SQL NULL) become `unknown`; values that are not whole numbers
        inside the type's range (too large, infinite, fractional, text) too, and are counted."""
        dtype = np.dtype(dtype)
        lo, hi = _INT_BOUNDS[dtype]
        values = _numpy(values)
        array = values if isinstance(values, np.ndarray) and values.dtype != object else None
        if array is None:
            try:
                array = np.asarray(values, dtype=np.int64)
            except (OverflowError, TypeError, ValueError):
                array = _object_ints(values)
        if array.dtype.kind in "iu":
            ok = np.ones(len(array), dtype=bool) if array.dtype == dtype else (array >= lo) & (array <= hi)
            missing = np.zeros(len(array), dtype=bool)
        else:
            array = array.astype(np.float64, copy=False)
            missing = np.isnan(array)
            with np.errstate(invalid="ignore"):
                # hi + 1 is exact as a float (2^63, 2^31); hi itself is not, for int64
                ok = np.isfinite(array) & (array >= lo) & (array < hi + 1) & (np.floor(array) == array)
        bad = ~ok & ~missing
        self.count(f"{{n}} `{column}` values are not integers in range (too large, fractional, infinite or text); read as unknown", bad.sum())
        if ok.all():
            return array.astype(dtype)
        out = np.where(ok, array, 0).astype(dtype)
        out[~ok] = unknown
        return out

    # -- times ---------------------------------------------------------------------------
    def times_ns(self, start: Any, end: Any, what: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Integer-ns (start, end) columns -> (start, end, keep): rows whose start or end is
        missing or outside the range a capture can have are dropped; an end before its
        start is clamped to the start (zero duration), as Kineto's reader does."""
        start_f = as_float(start)
        end_f = as_float(end)
        with np.errstate(invalid="ignore"):
            keep = np.isfinite(start_f) & (np.abs(start_f) <= MAX_ABS_TIME_NS)
            keep &= np.isfinite(end_f) & (np.abs(end_f) <= MAX_ABS_TIME_NS)
        self.count(f"{{n}} {what} dropped: start or end missing or outside any plausible capture", (~keep).sum())
        s = self.ints(np.where(keep, _as_int(start, start_f), 0), "start")
        e = self.ints(np.where(keep, _as_int(end, end_f), 0), "end")
        backwards = keep & (e < s)
        self.count(f"{{n}} {what} end before they start; their duration is taken as 0", backwards.sum())
        e = np.where(backwards, s, e)
        too_long = keep & (e - s > MAX_DURATION_NS)
        self.count(f"{{n}} {what} last longer than {MAX_DURATION_NS // 10**9 // 86400 // 365} years; dropped", too_long.sum())
        return s, e, keep & ~too_long

    def times_us(self, ts: np.ndarray, dur: np.ndarray, what: str) -> np.ndarray:
        """Kineto float microseconds: which events have a usable time. Negative durations
        are kept (the clock clamps them to 0) but counted."""
        with np.errstate(invalid="ignore"):
            keep = np.isfinite(ts) & (np.abs(ts) <= MAX_ABS_TIME_NS / 1000)
            keep &= np.isfinite(dur) & (dur <= MAX_DURATION_NS / 1000)
            negative = keep & (dur < 0)
        self.count(f"{{n}} {what} dropped: `ts` or `dur` is missing or not a plausible time (NaN, infinite or beyond 100 years)", (~keep).sum())
        self.count(f"{{n}} {what} have a negative `dur`; taken as 0", negative.sum())
        return keep


def _object_ints(values: Iterable[Any]) -> np.ndarray:
    """Element by element, for columns holding huge ints, text or None: float64, NaN for a
    missing value, inf for text or bytes (an int beyond int64 becomes a float beyond it)."""
    out = []
    for v in values:
        if isinstance(v, int) and not isinstance(v, bool):
            # decided on the exact int: float(-(2**63) - 1) would round into the range
            out.append(float(v) if -(2**63) <= v < 2**63 else np.inf)
        elif isinstance(v, (np.integer, float, np.floating)):
            out.append(float(v))
        elif v is None:
            out.append(np.nan)
        else:
            out.append(np.inf)
    return np.array(out, dtype=np.float64)


def as_float(values: Any) -> np.ndarray:
    """A column as float64: numbers as they are, numeric text parsed, anything else NaN."""
    values = _numpy(values)
    values = np.asarray(values)
    if values.dtype.kind in "iuf":
        return values.astype(np.float64)
    # a column of mixed objects (SQL values): the Kineto path never comes here
    return np.fromiter(map(_number, values.reshape(-1)), dtype=np.float64, count=values.size)


def _number(value: Any) -> float:
    """One SQL value as a float, as pandas' to_numeric(errors="coerce") reads it: numbers as
    they are; ASCII text (or a blob of it) that spells a decimal number (whitespace around
    it, "inf" and "nan" too) parsed; the rest (other text, NULL) NaN."""
    if isinstance(value, (int, float, np.integer, np.floating)):
        try:
            return float(value)
        except OverflowError:
            return np.inf if value > 0 else -np.inf
    if isinstance(value, bytes):
        try:
            value = value.decode("ascii")
        except UnicodeDecodeError:
            return np.nan
    if isinstance(value, str) and value.isascii() and "_" not in value:
        try:
            return float(value)
        except ValueError:
            return np.nan
    return np.nan


def _as_int(values: Any, as_float: np.ndarray) -> np.ndarray:
    """Exact int64 where the column already is integer (floats lose ns above 2^53)."""
    values = _numpy(values)
    values = np.asarray(values)
    if values.dtype.kind in "iu":
        return values.astype(np.int64)
    # Only values int64 holds are cast (a REAL of 1e300 is finite, and numpy warns casting it);
    # the rest are 0 here, and their rows dropped by the caller, with its count.
    with np.errstate(invalid="ignore"):
        fits = np.isfinite(as_float) & (np.abs(as_float) < 2.0**63)
    return np.where(fits, as_float, 0).astype(np.int64)


def _numpy(values: Any) -> Any:
    """A pandas Series' values, without importing pandas (neither parser hands one over)."""
    return values.to_numpy() if hasattr(values, "to_numpy") and not isinstance(values, np.ndarray) else values
