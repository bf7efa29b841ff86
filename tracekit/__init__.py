"""tracekit: where the GPU time of a profiled run went, and how far each part is from the roofline."""

__version__ = "0.1.0"

from tracekit.api import analyze, load  # noqa: E402  (the public API sits on top of the package)
from tracekit.errors import TraceError  # noqa: E402

__all__ = ["analyze", "load", "TraceError", "__version__"]
