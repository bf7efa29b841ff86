"""report.md: the summary and every table as GitHub Markdown."""

from __future__ import annotations

from tracekit.analysis import Analysis
from tracekit.reports.analyze import coverage_line, device_label
from tracekit.reports.format import duration
from tracekit.reports.tables import sections


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render(a: Analysis, top: int = 15, images: bool = True) -> str:
    meta = a.meta
    lines = [f"# tracekit report: {meta.get('path')}", ""]
    lines.append(f"- format: {meta.get('format')} ({meta.get('schema')}), span {duration(meta.get('span_ns'))}")
    lines.append(f"- device: {device_label(a)}")
    lines.append(f"- {coverage_line(a).replace('coverage    ', 'coverage: ')}")
    for w in a.warnings:
        lines.append(f"- warning: {w}")
    if images:
        lines += ["", "![roofline](roofline.png)", "", "![breakdown](breakdown.png)"]
    for title, head, rows in sections(a, top):
        lines += ["", f"## {title}", ""]
        if not rows:
            lines.append("(none)")
            continue
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
