"""`tracekit info`: the inventory as a console view or JSON."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from tracekit.reports.format import duration, kernel_label, percent
from tracekit.reports.text import terminal
from tracekit.strict_json import dumps


def to_json(inv: dict[str, Any]) -> str:
    return dumps(inv)


def render_console(inv: dict[str, Any], console: Console) -> None:
    console.print(terminal(inv["path"], "bold"))
    versions = ", ".join(f"{k}={v}" for k, v in inv["tool_versions"].items())
    console.print(terminal(f"format      {inv['format']} ({inv['schema']}){'; ' + versions if versions else ''}"))
    for dev in inv["devices"] or [{"id": "?", "name": "not in trace (pass --device)"}]:
        extra = ", ".join(f"{k}={dev[k]}" for k in ("sm_count", "memory_bytes", "memory_bandwidth") if dev.get(k) is not None)
        console.print(terminal(f"device {dev.get('id')}    {dev.get('name')}{' (' + extra + ')' if extra else ''}"))
    if inv["rank"] is not None:
        console.print(terminal(f"rank        {inv['rank']} of {inv['world_size']}"))
    console.print(f"span        {duration(inv['span_ns'])}")

    counts = Table(title="Events", show_header=True, header_style="bold")
    for key in inv["counts"]:
        counts.add_column(key.replace("_", " "), justify="right")
    counts.add_row(*(f"{v:,}" for v in inv["counts"].values()))
    console.print(counts)

    links = inv["links"]
    table = Table(title=f"Links ({links['gpu_activities']:,} GPU activities)", header_style="bold")
    table.add_column("linked to")
    table.add_column("count", justify="right")
    table.add_column("share", justify="right")
    for key in ("to_launch", "to_op", "to_op_with_shapes"):
        table.add_row(key.replace("_", " "), f"{links[key]['count']:,}", percent(links[key]["share"]))
    table.add_row("launched by a graph", f"{links['graph_launched']:,}", "")
    table.add_row("launched before capture", f"{links['launched_before_capture']:,}", "")
    console.print(table)

    top = Table(title="Top kernels by total time", header_style="bold")
    top.add_column("kernel", overflow="fold")
    top.add_column("calls", justify="right")
    top.add_column("time", justify="right")
    top.add_column("share", justify="right")
    for row in inv["top_kernels"]:
        top.add_row(terminal(kernel_label(row["name"])), f"{row['count']:,}", duration(row["time_ns"]), percent(row["share"]))
    console.print(top)
