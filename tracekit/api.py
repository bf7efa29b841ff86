"""The Python API; the CLI is a thin layer over it. Loading and analysing live in
tracekit.analysis.load, the what-if runs in tracekit.projection.run: the API gathers them."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from tracekit.analysis.load import analyze, device_name, load, scan
from tracekit.hardware import DEFAULT_SUSTAINED
from tracekit.projection.run import project, project_tp, what_if

if TYPE_CHECKING:
    from tracekit.analysis.result import Analysis

__all__ = ["analyze", "calibrate", "device_name", "load", "project", "project_tp", "scan", "summary_json", "what_if"]


def summary_json(a: Analysis, top: int = 15) -> str:
    """What `tracekit analyze --format json` prints: summary.json (docs/summary-schema.md), the
    analysis' figures with the reports' words (tracekit.reports.summary_json)."""
    from tracekit.reports.renderer import RenderOptions
    from tracekit.reports.summary_json import render

    return render(a, RenderOptions(top=top))


def calibrate(paths: list[str], model, device: str | None = None, device_file: str | None = None,
              sustained: float = DEFAULT_SUSTAINED) -> dict:
    """Analyse each trace with `model` (tracekit.model.ModelOptions) and fit the roofline step
    model's efficiencies per device (tracekit.model.calibrate)."""
    from tracekit.model.calibrate import calibrate as fit

    return fit([analyze(p, device=device, device_file=device_file, sustained=sustained, model=model) for p in paths])
