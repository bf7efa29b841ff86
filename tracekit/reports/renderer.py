"""One interface for every way an Analysis is shown: `render(analysis, options) -> str | bytes`.

Each renderer is a module with that function (a module satisfies a Protocol, PEP 544):
  table     tracekit.reports.analyze       the terminal report (rich), as the text it prints
  markdown  tracekit.reports.markdown      report.md
  html      tracekit.reports.html          report.html, the PNGs in options.images inlined
  json      tracekit.reports.summary_json  summary.json (Analysis.to_dict: it arranges, computes nothing)
`renderer(fmt)` imports only the one asked for, so a command pays for the renderer it uses.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from tracekit.analysis.result import Analysis

MODULES = {"table": "tracekit.reports.analyze", "markdown": "tracekit.reports.markdown",
           "html": "tracekit.reports.html", "json": "tracekit.reports.summary_json"}


@dataclass(frozen=True)
class RenderOptions:
    top: int = 15  # rows per ranked table (kernels, ops, copies, what to fix first)
    # The report's figures as PNG bytes by name (roofline, breakdown): HTML inlines them and
    # Markdown links `NAME.png` beside it; empty: no images.
    images: Mapping[str, bytes] = field(default_factory=dict)
    width: int | None = None  # terminal columns; None: $COLUMNS, the terminal's, or the piped width (reports.terminal)
    warnings: bool = True  # terminal: list the analysis' warnings (False where the CLI put them on stderr)
    full: bool = True  # terminal: every table; False: the first screen (reports.first_screen; `analyze` without --full)
    json_extra: Mapping[str, Any] = field(default_factory=dict)  # json: keys added at the top (the CLI's "what_if")


class Renderer(Protocol):
    def render(self, analysis: Analysis, options: RenderOptions) -> str | bytes: ...


def renderer(fmt: str) -> Renderer:
    """The renderer of a --format name (MODULES), imported now."""
    return importlib.import_module(MODULES[fmt])  # type: ignore[return-value]
