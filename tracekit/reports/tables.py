"""The report's tables as rows of display strings: shared by the Markdown and HTML renderers."""

from __future__ import annotations

from tracekit.analysis import Analysis, top_kernels
from tracekit.reports.format import duration, kernel_label, percent, si


def _text(v) -> str:
    return "-" if v is None or (isinstance(v, float) and v != v) else str(v)


def _pct(v) -> str:
    return "-" if v is None or v != v else percent(v)


def block_rows(a: Analysis) -> tuple[list[str], list[list[str]]]:
    head = ["phase", "block", "GPU time", "share", "kernels", "FLOP", "bytes", "TFLOP/s", "TB/s", "efficiency (peak / sustained)", "bound", "coverage"]
    rows = [[r["phase"], r["block"], duration(r["gpu_time_ns"]), _pct(r["share"]), f"{r['count']:,}", si(r["flops"]), si(r["bytes"], "B"),
             f"{r['achieved_tflops']:.2f}" if r["achieved_tflops"] == r["achieved_tflops"] else "-",
             f"{r['achieved_tbps']:.3f}" if r["achieved_tbps"] == r["achieved_tbps"] else "-",
             f"{_pct(r['efficiency'])} / {_pct(r['efficiency_sustained'])}", _text(r["bound"]), _pct(r["coverage"])]
            for r in a.blocks.to_dict(orient="records")]
    return head, rows


def device_rows(a: Analysis) -> tuple[list[str], list[list[str]]]:
    head = ["device", "GPU-active window", "busy", "idle (in window)", "capture span", "idle (in span)", "kernel time", "streams overlap"]
    rows = [[str(r["device"]), duration(r["active_ns"]), duration(r["busy_ns"]), duration(r["idle_ns"]), duration(r["span_ns"]),
             duration(r["idle_span_ns"]), duration(r["kernel_time_ns"]), duration(r["overlap_ns"])]
            for r in a.devices.to_dict(orient="records")]
    return head, rows


def step_rows(a: Analysis) -> tuple[list[str], list[list[str]]]:
    head = ["step", "duration", "kernels", "GPU busy", "bytes", "TB/s", "of peak BW", "of sustained BW"]
    rows = [[r["step"], duration(r["duration_ns"]), f"{r['kernels']:,}", duration(r["busy_ns"]), si(r["bytes"], "B"),
             f"{r['achieved_tbps']:.3f}", _pct(r["bandwidth_share_peak"]), _pct(r["bandwidth_share_sustained"])]
            for r in a.steps.to_dict(orient="records")]
    return head, rows


def kernel_rows(a: Analysis, top: int) -> tuple[list[str], list[list[str]]]:
    head = ["kernel", "class", "calls", "time", "share", "TFLOP/s", "TB/s", "efficiency", "bound"]
    rows = [[kernel_label(r["name"], 80), r["kernel_class"], f"{r['count']:,}", duration(r["time_ns"]), _pct(r["share"]),
             f"{r['achieved_tflops']:.2f}" if r["achieved_tflops"] == r["achieved_tflops"] else "-",
             f"{r['achieved_tbps']:.3f}" if r["achieved_tbps"] == r["achieved_tbps"] else "-", _pct(r["efficiency"]), _text(r["bound"])]
            for r in top_kernels(a, top).to_dict(orient="records")]
    return head, rows


def op_rows(a: Analysis, top: int) -> tuple[list[str], list[list[str]]]:
    head = ["op", "input shapes", "calls", "time", "FLOP", "bytes", "efficiency", "bound"]
    rows = [[r["op"], r["shapes"][:120], f"{r['calls']:,}", duration(r["time_ns"]), si(r["flops"]), si(r["bytes"], "B"), _pct(r["efficiency"]), _text(r["bound"])]
            for r in a.ops.head(top).to_dict(orient="records")]
    return head, rows


def unmodeled_rows(a: Analysis) -> tuple[list[str], list[list[str]]]:
    head = ["kernel", "time", "share", "why it has no cost"]
    rows = [[kernel_label(r["name"], 80), duration(r["time_ns"]), _pct(r["share"]), r["reason"]] for r in a.coverage["top_unmodeled"]]
    return head, rows


SECTIONS = [("Blocks (phase x block)", block_rows), ("Devices: busy and idle", device_rows), ("Steps", step_rows),
            ("Top kernels", kernel_rows), ("Top ops", op_rows), ("Kernels without a cost", unmodeled_rows)]


def sections(a: Analysis, top: int) -> list[tuple[str, list[str], list[list[str]]]]:
    out = []
    for title, fn in SECTIONS:
        head, rows = fn(a, top) if fn in (kernel_rows, op_rows) else fn(a)
        out.append((title, head, rows))
    return out
