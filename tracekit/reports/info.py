"""`tracekit info`: the inventory as a console view or JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracekit.common.format import duration, percent
from tracekit.reports.text import terminal
from tracekit.strict_json import dumps

if TYPE_CHECKING:
    from rich.console import Console


def to_json(inv: dict[str, Any]) -> str:
    return dumps(inv)


def render_console(inv: dict[str, Any], console: Console) -> None:
    console.print(terminal(inv["path"], "bold"))
    versions = ", ".join(f"{k}={v}" for k, v in inv["tool_versions"].items())
    console.print(terminal(f"format      {inv['format']} ({inv['schema']}){'; ' + versions if versions else ''}"))
    for dev in inv["devices"] or [{"id": "?", "name": "not in trace (pass --device)"}]:
        extra = ", ".join(f"{k}={dev[k]}" for k in ("sm_count", "memory_bytes", "memory_bandwidth") if dev.get(k) is not None)
        name = dev.get("name") or "not named in the trace (pass --device to analyze)"
        console.print(terminal(f"device {dev.get('id')}    {name}{' (' + extra + ')' if extra else ''}"))
    if inv["rank"] is not None:
        console.print(terminal(f"rank        {inv['rank']} of {inv['world_size']}"))
    console.print(f"span        {duration(inv['span_ns'])}")

    from tracekit.reports.section import Section
    from tracekit.reports.terminal import print_section

    head = [key.replace("_", " ") for key in inv["counts"]]
    lost = inv.get("times_unknown") or {}
    note = ""
    if lost:  # counted, but the profiler lost their times: say so beside the counts
        note = "times unknown (the profiler recorded them with ts 0 and dur 0): " + ", ".join(f"{n:,} {kind}" for kind, n in lost.items())
    print_section(Section("Events", head, [[f"{v:,}" for v in inv["counts"].values()]], [0] * len(head), flex=-1, left=(), note=note), console)

    links = inv["links"]
    rows = [[key.replace("_", " "), f"{links[key]['count']:,}", percent(links[key]["share"])] for key in ("to_launch", "to_op", "to_op_with_shapes")]
    rows += [["launched by a graph", f"{links['graph_launched']:,}", ""], ["launched before capture", f"{links['launched_before_capture']:,}", ""]]
    timed = " with times" if lost else ""
    print_section(Section(f"Links ({links['gpu_activities']:,} GPU activities{timed})", ["linked to", "count", "share"], rows, [0, 0, 0]), console)

    # the same labels as `tracekit analyze` gives the same kernels (trace_labels over all of them)
    rows = [[row["label"], f"{row['count']:,}", duration(row["time_ns"]), percent(row["share"])] for row in inv["top_kernels"]]
    print_section(Section("Top kernels by total time", ["kernel", "calls", "time", "share"], rows, [0, 1, 0, 0], flex=0), console)
