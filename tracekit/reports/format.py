"""Number formatting shared by the renderers."""

from __future__ import annotations


def duration(ns: float | int | None) -> str:
    if ns is None or ns != ns:
        return "—"
    ns = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:,.3f} {unit}"
    return f"{ns:,.0f} ns"


def percent(share: float | None) -> str:
    return "—" if share is None or share != share else f"{100.0 * share:.1f}%"


def shorten(name: str, width: int = 90) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def kernel_label(name: str, width: int = 70) -> str:
    """A kernel's short label (tracekit.names.label), cut to `width`."""
    from tracekit.names import label

    return shorten(label(str(name)), width)


def si(value: float | None, unit: str = "") -> str:
    """1.23e9 -> '1.23 G'; None / NaN -> '—' (unknown, not zero)."""
    if value is None or value != value:
        return "—"
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:,.2f} {prefix}{unit}"
    return f"{value:,.0f} {unit}".rstrip()
