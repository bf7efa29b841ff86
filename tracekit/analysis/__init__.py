"""Analysis: takes a linked trace, a device and rules; gives an `Analysis` (result.py),
complete when `build` (build.py, the one orchestrator) returns it.

Stages, each a function returning its table: costs and roofline per kernel, attribution,
steps (steps.py), blocks and kernels by name (rollup.py), ops (ops.py), coverage
(coverage.py), collectives and overlap (collectives.py), what to fix first (findings.py), and
last the plausibility pass (plausibility.py): every ratio against its physical limit.
"""

from tracekit.analysis.build import build
from tracekit.analysis.result import SCHEMA_VERSION, Analysis

__all__ = ["build", "Analysis", "SCHEMA_VERSION"]
