"""`tracekit analyze` in the terminal (the `table` renderer, reports.renderer): the coverage
line, the top kernels and ops with their roofline."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from tracekit.analysis import Analysis
from tracekit.common.format import duration
from tracekit.reports.lines import capture_line, coverage_line, device_line, roofline_line
from tracekit.reports.tables import headline, lead, sections
from tracekit.reports.terminal import console, print_section
from tracekit.reports.text import terminal

if TYPE_CHECKING:
    from rich.console import Console

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
    text = captured.get()
    if options.full:
        return text
    # the first screen is read and pasted: no table padding after the last character of a line
    return "\n".join(line.rstrip(" ") for line in text.split("\n"))




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
