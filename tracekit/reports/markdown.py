"""report.md: the headline, what to fix first, and every table as GitHub Markdown.
Every trace string passes through text.markdown."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.analysis import Analysis
from tracekit.reports.lines import capture_line, coverage_line, device_line, roofline_line
from tracekit.common.format import duration
from tracekit.reports.tables import headline, lead, sections
from tracekit.reports.section import section_markdown
from tracekit.reports.text import markdown as md

if TYPE_CHECKING:
    from tracekit.reports.renderer import RenderOptions


def render(a: Analysis, options: RenderOptions) -> str:
    """report.md; the images in options.images are linked as NAME.png (the bundle writes them beside it)."""
    meta = a.meta
    lines = [f"# tracekit report: {md(meta.get('path'))}", ""]
    lines += [f"**{md(s)}**  " for s in headline(a)]  # one line each (a hard break: two trailing spaces)
    for s in lead(a):
        lines += section_markdown(s)
    lines.append("")
    lines.append(f"- format: {md(meta.get('format'))} ({md(meta.get('schema'))}), span {duration(meta.get('span_ns'))}")
    lines.append(f"- device: {md(device_line(a))}")
    if len(a.kernels):
        lines.append(f"- coverage: {md(coverage_line(a))}")
    if (captured := capture_line(a)) is not None:
        lines.append(f"- capture: {md(captured)}")
    if a.device is not None:
        lines.append(f"- roofline: {md(roofline_line(a))}")
    for w in a.warnings:
        lines.append(f"- warning: {md(w)}")
    if options.images and a.device is not None:
        for name in options.images:
            lines += ["", f"![{name}]({name}.png)"]
    for s in sections(a, options.top):
        lines += section_markdown(s)
    return "\n".join(lines) + "\n"
