"""summary.json: the Analysis as strict JSON (Analysis.to_dict arranges what build computed),
with the --what-if projections where the CLI made them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.strict_json import dumps

if TYPE_CHECKING:
    from tracekit.analysis.result import Analysis
    from tracekit.reports.renderer import RenderOptions


def render(analysis: Analysis, options: RenderOptions) -> str:
    return dumps({**analysis.to_dict(options.top), **options.json_extra})
