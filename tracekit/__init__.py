"""tracekit: where the GPU time of a profiled run went, and how far each part is from the roofline."""

__version__ = "0.1.0"

from tracekit.api import analyze, load  # noqa: E402  (the public API sits on top of the package)
from tracekit.errors import TraceError  # noqa: E402

__all__ = ["analyze", "load", "TraceError", "__version__"]


def __getattr__(name: str):
    """`tracekit.profiler`, `tracekit.mlflow`, `tracekit.compare` on first use: a plain
    `import tracekit` stays as light as the analysis needs."""
    if name in ("profiler", "mlflow", "compare"):
        import importlib

        return importlib.import_module(f"tracekit.{name}")
    raise AttributeError(f"module 'tracekit' has no attribute {name!r}")
