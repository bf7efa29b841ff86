"""Number formatting shared by the renderers."""

from __future__ import annotations


def duration(ns: float | int | None) -> str:
    if ns is None:
        return "-"
    ns = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:,.3f} {unit}"
    return f"{ns:,.0f} ns"


def percent(share: float | None) -> str:
    return "-" if share is None else f"{100.0 * share:.1f}%"


def shorten(name: str, width: int = 90) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"
