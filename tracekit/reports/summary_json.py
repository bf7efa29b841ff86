"""summary.json: the Analysis' figures (Analysis.to_dict, which arranges what build computed)
with the words the reports give them (the headline, each ranked cause's sentence:
reports.headline), and the --what-if projections where the CLI made them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracekit.reports.headline import cause_sentences, efficiency_flagged, headline
from tracekit.strict_json import clean, dumps

if TYPE_CHECKING:
    from tracekit.analysis.result import Analysis
    from tracekit.reports.renderer import RenderOptions


def summary(analysis: Analysis, top: int = 15) -> dict[str, Any]:
    """summary.json as a dict: the headline second, after the schema version."""
    figures = analysis.to_dict(top)
    fix = figures["what_to_fix_first"]
    return {"schema_version": figures.pop("schema_version"), "headline": headline(analysis.findings, efficiency_flagged(analysis)), **figures,
            "what_to_fix_first": {**fix, "causes": clean(cause_sentences(analysis.findings))}}


def render(analysis: Analysis, options: RenderOptions) -> str:
    return dumps({**summary(analysis, options.top), **options.json_extra})
