"""The one place that prints numbers and unknowns. Unknown (None or NaN) prints as "—"
everywhere: in the terminal, Markdown, HTML, the headline and the cross-rank report."""

from __future__ import annotations

from typing import Any

UNKNOWN = "—"


def is_unknown(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value) or (not isinstance(value, str) and value != value)


def text(value: Any) -> str:
    return UNKNOWN if is_unknown(value) else str(value)


def number(value: Any, fmt: str = "{:,.2f}") -> str:
    return UNKNOWN if is_unknown(value) else fmt.format(value)


def duration(ns: float | int | None) -> str:
    if is_unknown(ns):
        return UNKNOWN
    ns = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:,.3f} {unit}"
    return f"{ns:,.0f} ns"


def signed_duration(ns: float | int | None) -> str:
    return UNKNOWN if is_unknown(ns) else ("+" if ns > 0 else "") + duration(ns)


def percent(share: float | None) -> str:
    return UNKNOWN if is_unknown(share) else f"{100.0 * share:.1f}%"


def signed_percent(share: float | None) -> str:
    return UNKNOWN if is_unknown(share) else f"{share:+.1%}"


def rounded_percent(share: float | None) -> str:
    """Whole percents, one decimal below 9.5% and between 99.5% and 100% (never "100%" for
    less): for sentences such as the headline."""
    if is_unknown(share):
        return UNKNOWN
    return f"{100 * share:.0f}%" if 0.095 <= abs(share) < 0.995 or share == 1 else f"{100 * share:.1f}%"


def ratio(value: float | None) -> str:
    return UNKNOWN if is_unknown(value) else f"{value:.2f}x"


def si(value: float | None, unit: str = "") -> str:
    """1.23e9 -> '1.23 G'; None / NaN -> '—' (unknown, not zero)."""
    if is_unknown(value):
        return UNKNOWN
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:,.2f} {prefix}{unit}"
    return f"{value:,.0f} {unit}".rstrip()


def shorten(name: str, width: int = 90) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def middle(name: str, width: int = 60) -> str:
    """`name` in at most `width` characters, cut in the middle: the head names the op or
    kernel, the tail holds what tells two of them apart (the last shapes, template arguments)."""
    name = str(name)
    if len(name) <= width:
        return name
    head = (width - 1) * 2 // 3
    return name[:head] + "…" + name[len(name) - (width - 1 - head):]


def percent_against(share: float | None, limit: float) -> str:
    """`share` as a percent with as many decimals as it takes to differ from `limit` printed
    the same way: never "50.0% ... below the 50.0% needed" (49.96% is printed 49.96%)."""
    if is_unknown(share):
        return UNKNOWN
    for digits in (1, 2, 3, 4):
        if f"{100 * share:.{digits}f}" != f"{100 * limit:.{digits}f}" or share == limit:
            return f"{100 * share:.{digits}f}%"
    return f"{100 * share:.4f}%"
