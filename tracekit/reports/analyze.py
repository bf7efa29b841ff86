"""`tracekit analyze`: the coverage line, the top kernels and ops with their roofline."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from tracekit.analysis import Analysis, top_kernels
from tracekit.reports.tables import block_rows, device_rows, step_rows
from tracekit.reports.format import duration, kernel_label, percent, shorten, si
from tracekit.strict_json import dumps


def to_json(analysis: Analysis, top: int) -> str:
    return dumps(analysis.to_dict(top))


def _text(v) -> str:
    return "-" if v is None or (isinstance(v, float) and v != v) else str(v)


def _num(value: Any, fmt: str = "{:,.2f}") -> str:
    return "-" if value is None or value != value else fmt.format(value)


def _efficiency(peak: Any, sustained: Any) -> str:
    if peak is None or peak != peak:
        return "-"
    flag = " [bold red]>peak[/]" if peak > 1.05 else ""
    return f"{percent(peak)} / {percent(sustained)}{flag}"


def coverage_line(analysis: Analysis) -> str:
    c = analysis.coverage
    sources = ", ".join(f"{k} {percent(v)}" for k, v in sorted(c["modeled_share_by_source"].items(), key=lambda kv: -kv[1]))
    return (f"coverage    {percent(c['modeled_share'])} of GPU kernel time has a cost "
            f"({c['kernels_modeled']:,} of {c['kernels']:,} kernels; {sources or 'none'}); "
            f"above 105% of peak: {percent(c['over_peak_share'])} of modeled time")


def device_label(analysis: Analysis) -> str:
    """The device line's text: the spec used, or why there is none."""
    if analysis.device is not None:
        return f"{analysis.device.name} [{analysis.device.key}]"
    if len(analysis.kernels):
        return "unknown: roofline figures need --device NAME (see `tracekit devices`)"
    return "none (CPU-only profile)"


def render_console(analysis: Analysis, console: Console, top: int) -> None:
    meta, dev, c = analysis.meta, analysis.device, analysis.coverage
    console.print(f"[bold]{meta.get('path')}[/bold]  ({meta.get('format')}, span {duration(meta.get('span_ns'))})")
    if dev is None and not len(analysis.kernels):
        console.print("device      none: the trace holds no GPU activity (a CPU-only profile); its ops are costed against CPU time")
        _ops(analysis, console, top, title="Top CPU ops by time (outermost op with a cost model), with their FLOPs and bytes")
        return
    if dev is None:  # a GPU trace on an unnamed or unknown GPU: everything but the roofline
        console.print(f"device      {device_label(analysis)}")
    else:
        console.print(f"device      {dev.name} [{dev.key}]: {dev.memory_gbps:,.0f} GB/s "
                      f"(sustained {analysis.sustained:.0%}), source: {dev.source}")
    console.print(coverage_line(analysis))
    if dev is not None:
        console.print(f"roofline    kernel time at {percent(c['efficiency'])} of the peak roofline, "
                      f"{percent(c['efficiency_sustained'])} of the sustained one (sum t_min / sum time over modeled kernels)")
    for w in analysis.warnings:
        console.print(f"[yellow]warning[/]     {w}")
    _plain_table(console, "GPU time by phase x block (overlapping streams counted once)", *block_rows(analysis))
    _plain_table(console, "Devices: busy and idle", *device_rows(analysis))
    if len(analysis.steps):
        _plain_table(console, "Steps", *step_rows(analysis))

    table = Table(title="Top kernels by GPU time", header_style="bold")
    for col, justify in [("kernel", "left"), ("class", "left"), ("calls", "right"), ("time", "right"), ("share", "right"),
                         ("TFLOP/s", "right"), ("TB/s", "right"), ("FLOP/B", "right"), ("eff. peak / sust.", "right"), ("bound", "left")]:
        table.add_column(col, justify=justify, overflow="fold")
    for r in top_kernels(analysis, top).to_dict(orient="records"):
        table.add_row(kernel_label(r["name"], 60), r["kernel_class"], f"{r['count']:,}", duration(r["time_ns"]), percent(r["share"]),
                      _num(r["achieved_tflops"]), _num(r["achieved_tbps"], "{:,.3f}"), _num(r["intensity"], "{:,.1f}"),
                      _efficiency(r["efficiency"], r["efficiency_sustained"]), _text(r["bound"]))
    console.print(table)

    _ops(analysis, console, top, title="Top ops by GPU time")
    _unmodeled(analysis, console)


def _ops(analysis: Analysis, console: Console, top: int, title: str) -> None:
    ops = Table(title=title, header_style="bold")
    for col, justify in [("op", "left"), ("input shapes", "left"), ("calls", "right"), ("time", "right"), ("FLOP", "right"),
                         ("bytes", "right"), ("efficiency", "right"), ("bound", "left")]:
        ops.add_column(col, justify=justify, overflow="fold")
    for r in analysis.ops.head(top).to_dict(orient="records"):
        ops.add_row(r["op"], shorten(r["shapes"], 48), f"{r['calls']:,}", duration(r["time_ns"]), si(r["flops"]), si(r["bytes"], "B"), percent(r["efficiency"]) if r["efficiency"] == r["efficiency"] else "-", _text(r["bound"]))
    console.print(ops)


def _unmodeled(analysis: Analysis, console: Console) -> None:
    c = analysis.coverage
    if c["top_unmodeled"]:
        un = Table(title="Top kernels without a cost, and why", header_style="bold")
        for col in ("kernel", "time", "share", "reason"):
            un.add_column(col, overflow="fold")
        for r in c["top_unmodeled"]:
            un.add_row(kernel_label(r["name"], 60), duration(r["time_ns"]), percent(r["share"]), r["reason"])
        console.print(un)


def _plain_table(console: Console, title: str, head: list[str], rows: list[list[str]]) -> None:
    table = Table(title=title, header_style="bold")
    for i, col in enumerate(head):
        table.add_column(col, justify="left" if i < 2 else "right", overflow="fold")
    for row in rows:
        table.add_row(*row)
    console.print(table)


def render_devices(devices: dict, console: Console) -> None:
    table = Table(title="Known devices (dense peaks)", header_style="bold")
    for col in ("key", "name", "bf16/fp16 TFLOP/s", "fp8", "fp32 vector", "GB/s", "interconnect GB/s", "aliases", "source"):
        table.add_column(col, overflow="fold")
    for d in devices.values():
        half = d.matrix_tflops.get("bf16") or d.matrix_tflops.get("fp16")
        table.add_row(d.key, d.name, _num(half, "{:,.1f}"), _num(d.matrix_tflops.get("fp8"), "{:,.1f}"), _num(d.vector_tflops.get("fp32"), "{:,.1f}"),
                      f"{d.memory_gbps:,.0f}", f"{d.interconnect_gbps:,.0f}", ", ".join(d.aliases), d.source)
    console.print(table)
