"""Analysis: takes a linked trace, a device and rules; gives an `Analysis` (result.py),
complete when `build` (pipeline.py, the one orchestrator) returns it. load.py turns a trace
path into one (parse, link, resolve the GPU, build).

Stages, each a function returning its table: costs and roofline per kernel, attribution,
steps (per_step.py), blocks and kernels by name (rollup.py), ops (ops.py), coverage
(coverage.py), collectives and overlap (collectives.py), what to fix first (findings.py:
fix.py, idle.py, causes.py, headline.py), and last the plausibility pass (plausibility.py):
every ratio against its physical limit.

The names below load on first use: `tracekit info` reads a trace through load.py without
paying for pandas and every stage.
"""

__all__ = ["build", "Analysis", "SCHEMA_VERSION"]


def __getattr__(name: str):
    if name == "build":
        from tracekit.analysis.pipeline import build

        return build
    if name in ("Analysis", "SCHEMA_VERSION"):
        from tracekit.analysis import result

        return getattr(result, name)
    raise AttributeError(f"module 'tracekit.analysis' has no attribute {name!r}")
