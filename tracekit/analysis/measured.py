"""Measured: the tables build measures from the trace, before the judgment stages (collectives,
findings, plausibility, the model's prediction) read them; the Analysis (analysis.result) is a
Measured with those stages' results. Its own module so that the stages can name the type they
read without importing the Analysis they help complete."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from tracekit.hardware import Device
from tracekit.trace.frames import Trace


@dataclass(frozen=True)
class HostEvents:
    """The host side of the timeline as the trace recorded it (the linked trace's own tables,
    not copies): what reports.perfetto draws above the GPU rows, with each op's launch arrows."""

    ops: pd.DataFrame  # one row per CPU op (name, pid, tid, start, end, input_dims, ...)
    ranges: pd.DataFrame  # annotations and Python frames (name, domain, pid, tid, start, end)
    launches: pd.DataFrame  # CUDA / HIP runtime calls (name, pid, tid, start, end)

    @classmethod
    def of(cls, trace: Trace) -> HostEvents:
        return cls(ops=trace.ops, ranges=trace.ranges, launches=trace.launches)


@dataclass(frozen=True, kw_only=True)
class Measured:
    kernels: pd.DataFrame  # one row per GPU activity: trace columns + costs + roofline + labels + op name + step
    ops: pd.DataFrame  # one row per (op name, input shapes) that launched GPU work
    coverage: dict[str, Any]
    device: Device | None  # None for a CPU-only profile
    sustained: float
    meta: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    blocks: pd.DataFrame = field(default_factory=pd.DataFrame)  # phase x block
    steps: pd.DataFrame = field(default_factory=pd.DataFrame)
    devices: pd.DataFrame = field(default_factory=pd.DataFrame)  # busy / idle per device
    # The linked trace it was built from. The judgment stages read it while build runs; after
    # build only tracekit.projection does: it re-infers tensor / expert parallelism from the
    # ops' shapes (model.infer_parallel), re-counts step items under its own
    # --samples-per-step / --frames-per-step (analysis.throughput.step_items), reads the
    # launch calls and the ops' shapes to place each kernel's host gap, and the device name
    # the profiler recorded. None in a rank's analysis (ranks.executor keeps it in the worker).
    trace: Trace | None = field(default=None, repr=False)
    model_notes: list[str] | None = None  # with --model: what the model could not cost (None: no --model)
