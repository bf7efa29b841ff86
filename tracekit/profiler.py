"""`tracekit.profiler.on_trace_ready(out_dir)` for torch.profiler (see tracekit/integrations/profiler.py)."""

from tracekit.integrations.profiler import Capture, TraceHandler, on_trace_ready

__all__ = ["Capture", "TraceHandler", "on_trace_ready"]
