"""`tracekit devices`: the GPUs tracekit knows, one row each (reads the device table only:
no trace, no analysis)."""

from __future__ import annotations

from rich.console import Console

from tracekit.common.format import number


def _short_source(source: str) -> str:
    """A device's source without its parenthesised detail (the figures it quotes, already in
    the row): the document that gives them. The whole text is in devices.toml."""
    head = source.split(" (", 1)[0].strip()
    return head if head else source


def render_devices(devices: dict, console: Console) -> None:
    from tracekit.reports.section import Section
    from tracekit.reports.terminal import print_section

    head = ["key", "name", "bf16 TFLOP/s", "fp8", "fp32 vector", "GB/s", "interconnect GB/s", "aliases", "source"]
    rows = []
    for d in devices.values():
        half = d.matrix_tflops.get("bf16") or d.matrix_tflops.get("fp16")
        rows.append([d.key, d.name, number(half, "{:,.1f}"), number(d.matrix_tflops.get("fp8"), "{:,.1f}"), number(d.vector_tflops.get("fp32"), "{:,.1f}"),
                     f"{d.memory_gbps:,.0f}", f"{d.interconnect_gbps:,.0f}", ", ".join(d.aliases), _short_source(d.source)])
    print_section(Section("Known devices (dense peaks; the full sources are in tracekit/hardware/devices.toml)", head, rows,
                          # the key (what --device takes) and the name whole; the source gives way first
                          [0, 1, 0, 2, 3, 0, 3, 4, 3], flex=1, left=(0, 1, 7, 8)), console)
