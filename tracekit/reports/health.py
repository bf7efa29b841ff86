"""The "Trace health" section: what in the trace cannot be true (tracekit.trace.health), per
activity kind, and what the analysis did about it. Shown first, in every renderer, so a
reader sees a broken trace named before reading figures made from it."""

from __future__ import annotations

from tracekit.analysis import Analysis
from tracekit.reports.section import Section


def health_section(a: Analysis) -> Section:
    head = ["kind", "problem", "count", "of", "what the analysis does"]
    rows = [[str(p["kind"]), str(p["problem"]), f"{p['count']:,}", f"{p['of']:,}" if p["of"] else "—", str(p["action"])]
            for p in a.meta.get("health") or []]
    return Section("Trace health (what the trace holds that cannot be true, and what the analysis does about it)", head, rows,
                   [0, 0, 0, 1, 0], flex=1, left=(0, 1, 4), wrap=(1, 4), empty="(no problem found)")
