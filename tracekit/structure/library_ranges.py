"""Ranges that a library or a profiler writes for itself: never a step, a stage or a cycle.

NVTX ranges carry a domain (nsys exports it: NVTX_EVENTS.domainId, named by the eventType 75
domain-create rows; tracekit.parsers.nsys writes it as `nvtx:<name>`). Domains excluded, from
the libraries' published source:

- `NCCL`: NCCL's own ranges around every collective and group call (`ncclAllReduce`,
  `ncclGroupEnd`, `ncclCommCount`, ...), one per call, not per iteration. NCCL declares the
  domain in src/include/nvtx.h: `struct nccl_domain{static constexpr char const* name{"NCCL"};}`.
- `cuvs`: RAPIDS cuVS's per-call ranges (cuvs/core/nvtx.hpp: `struct cuvs {name = "cuvs"}`).

And by name, in any domain: `aten::` ranges (torch.autograd.profiler.emit_nvtx writes one
per op; a torch op is an op, not a range of the user's), `autograd::` ranges (the autograd
engine's own nodes), and the profiler's own span (Kineto's `PyTorch Profiler (0)`). No
cuBLAS or cuDNN NVTX domain name was found in their published headers: a library range not
listed here is caught by the whole-forward test (tracekit.structure.repeated_steps).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.trace.column_text import rows_in, rows_where

LIBRARY_DOMAINS = ("nvtx:NCCL", "nvtx:cuvs")
LIBRARY_NAME = re.compile(r"^(?:aten::|autograd::|PyTorch Profiler \(\d+\)$)")


def library_ranges(ranges: pd.DataFrame) -> np.ndarray:
    """Per row of a ranges table: is it a library's or a profiler's own range (see above)?"""
    if ranges.empty:
        return np.zeros(0, dtype=bool)
    return rows_in(ranges["domain"], LIBRARY_DOMAINS) | rows_where(ranges["name"], lambda n: LIBRARY_NAME.search(n[:64]))
