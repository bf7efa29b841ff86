"""`tracekit analyze` in the terminal (the `table` renderer, reports.renderer): the coverage
line, the top kernels and ops with their roofline."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from tracekit.analysis import Analysis
from tracekit.analysis.roofline import OVER_PEAK
from tracekit.common.format import duration, percent, percent_against
from tracekit.reports.first_screen import device_label
from tracekit.reports.tables import headline, lead, sections
from tracekit.reports.terminal import console, print_section
from tracekit.reports.text import terminal

if TYPE_CHECKING:
    from tracekit.reports.renderer import RenderOptions


def render(analysis: Analysis, options: RenderOptions) -> str:
    """The terminal report as the text (with the console's colour codes) it prints."""
    con = console()
    if options.width is not None:
        con.width = options.width
    with con.capture() as captured:
        if options.full:
            render_console(analysis, con, options.top, warnings=options.warnings)
        else:
            from tracekit.reports.first_screen import render_first_screen

            render_first_screen(analysis, con)
    return captured.get()




def coverage_line(analysis: Analysis) -> str:
    c = analysis.coverage
    sources = ", ".join(f"{k} {percent(v)}" for k, v in sorted(c["modeled_share_by_source"].items(), key=lambda kv: -kv[1]))
    return (f"{percent(c['modeled_share'])} of GPU kernel time has a cost "
            f"({c['kernels_modeled']:,} of {c['kernels']:,} kernels; {sources or 'none'}); "
            f"above {OVER_PEAK:.0%} of peak: {percent(c['over_peak_share'])} of modeled time")


def capture_line(analysis: Analysis) -> str | None:
    """Graph-capture pairing (--capture): what was paired, what was not and why; None without it."""
    c = analysis.meta.get("capture")
    if c is None:
        return None
    how = ", ".join(f"{n} {h}" for h, n in c["matched_by"].items())
    costed = analysis.coverage.get("modeled_share_from_capture")
    line = (f"{c['graph_launches_matched']:,} of {c['graph_launches']:,} graph launches paired with "
            f"{c['graphs_captured']:,} captured graphs{' (' + how + ')' if how else ''}: {c['kernels_matched']:,} of "
            f"{c['kernels']:,} graph kernels took a captured op ({percent(c['matched_share_of_kernel_time'])} of kernel time"
            f"{', ' + percent(costed) + ' costed from it' if costed is not None else ''})")
    if c["unmatched"]:
        top = c["unmatched"][0]
        more = f"; {len(c['unmatched']) - 1} other reasons" if len(c["unmatched"]) > 1 else ""
        line += f"; {c['kernels_unmatched']:,} unmatched: {top['kernels']:,} {top['reason']}{more}"
    return line


def device_line(analysis: Analysis) -> str:
    """The device and the bandwidth the roofline uses; its sources are in `tracekit devices`."""
    dev = analysis.device
    if dev is None and len(analysis.kernels):
        return device_label(analysis)
    if dev is None:
        return "none: the trace holds no GPU activity (a CPU-only profile); its ops are costed against CPU time"
    return (f"{dev.name} [{dev.key}]: {dev.memory_gbps:,.0f} GB/s, sustained {analysis.sustained:.0%} "
            f"(sources: tracekit devices)")


def roofline_line(analysis: Analysis) -> str:
    from tracekit.costs.unknown import MIN_COVERAGE

    c = analysis.coverage
    eff, sus = c.get("efficiency"), c.get("efficiency_sustained")
    if "kernel_time_ns" in c and c["kernel_time_ns"] is None:  # the profiler lost the kernels' times (trace health)
        return "— : the kernels' times are lost (see Trace health), so no efficiency can be stated"
    if (c.get("modeled_share") or 0.0) < MIN_COVERAGE:  # unknown is not zero, nor a measurement
        return (f"— : only {percent_against(c.get('modeled_share') or 0.0, MIN_COVERAGE)} of GPU kernel time has a cost, "
                f"below the {percent(MIN_COVERAGE)} needed to state an efficiency")
    return (f"kernel time at {percent(eff)} of the peak roofline, {percent(sus)} of the sustained one "
            f"(sum t_min / sum time over the kernels with a cost)")


def render_console(analysis: Analysis, console: Console, top: int, warnings: bool = True) -> None:
    """`warnings=False`: the CLI has printed them on stderr already."""
    meta = analysis.meta
    console.print(Text.assemble(terminal(meta.get("path"), "bold"), f"  ({terminal(meta.get('format'))}, span {duration(meta.get('span_ns'))})"))
    for sentence in headline(analysis):
        console.print(terminal(sentence, "bold"))
    for section in lead(analysis):
        print_section(section, console)
    console.print(terminal(f"device      {device_line(analysis)}"))
    if len(analysis.kernels):
        console.print(terminal(f"coverage    {coverage_line(analysis)}"))
    if (captured := capture_line(analysis)) is not None:
        console.print(terminal(f"capture     {captured}"))
    if analysis.device is not None:
        console.print(terminal(f"roofline    {roofline_line(analysis)}"))
    for w in analysis.warnings if warnings else []:
        console.print(Text.assemble(("warning", "yellow"), "     ", terminal(w)))
    for section in sections(analysis, top):
        if section.terminal:
            print_section(section, console)
