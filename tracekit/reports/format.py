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


_WRAPPERS = ("Kernel", "Kernel2", "kernel", "device_kernel", "GenericKernel")


def _split_top(text: str, open_ch: str, close_ch: str) -> tuple[str, str, str]:
    """text -> (before, inside, after) of its first top-level open_ch ... close_ch."""
    start = text.find(open_ch)
    if start < 0:
        return text, "", ""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == open_ch:
            depth += 1
        elif text[i] == close_ch:
            depth -= 1
            if depth == 0:
                return text[:start], text[start + 1 : i], text[i + 1 :]
    return text[:start], text[start + 1 :], ""


def kernel_label(name: str, width: int = 70) -> str:
    """A readable kernel name: no return type, parameters or template noise.

    void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<...>, ...>(int, ...)
        -> at::native::vectorized_elementwise_kernel<4, CUDAFunctor_add>
    void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_tn_align2>(...)
        -> cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_tn_align2
    """
    text = name.strip()
    if text.startswith("void "):
        text = text[5:]
    base, inside, _ = _split_top(text, "<", ">")
    if not base.strip():  # not a C++ name (a template needs a name before it): show it as is
        return shorten(text, width)
    if not inside:
        base = _split_top(text, "(", ")")[0]
        return shorten(base.strip(), width)
    args = []
    depth, current = 0, ""
    for ch in inside:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if ch == "," and depth == 0:
            args.append(current.strip())
            current = ""
        else:
            current += ch
    args.append(current.strip())
    simple = [_split_top(a, "<", ">")[0].split("::")[-1] for a in args[:2] if a]
    if base.split("::")[-1] in _WRAPPERS and simple:
        return shorten(simple[0], width)
    return shorten(f"{base.strip()}<{', '.join(simple)}>", width)


def si(value: float | None, unit: str = "") -> str:
    """1.23e9 -> '1.23 G'; None / NaN -> '-'."""
    if value is None or value != value:
        return "-"
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:,.2f} {prefix}{unit}"
    return f"{value:,.0f} {unit}".rstrip()
