"""The stage of each kernel: its phase, or, for a user's own pipeline, the user's range.

A kernel's stage is its phase (tracekit.attribution), except where the phase is only the
default `forward` of an inference (no autograd ran: nothing in the trace says forward as
opposed to backward) and the user marked the work with ranges: then the stage is the
outermost of the user's ranges enclosing the kernel's launch, below the step ranges (a
pipeline's `encode_image`, `sample`, `postprocess`); work of that pipeline launched
outside all of them is OUTSIDE_RANGES. A trace without user ranges keeps `forward`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.attribution.rules import DEFAULT_PHASE
from tracekit.trace.autograd import BACKWARD, op_states
from tracekit.trace.column_text import as_text
from tracekit.trace.step_ownership import step_rows

OUTSIDE_RANGES = "outside the user's ranges"


def _top_below_steps(ranges: pd.DataFrame, eligible: np.ndarray, is_step: np.ndarray) -> np.ndarray:
    """Per range row: the outermost eligible range on its chain up to a step or the root
    (itself included); -1 where none is. Level by level from the roots down."""
    parent, depth = ranges["parent"].to_numpy(), ranges["depth"].to_numpy()
    top = np.where(eligible, np.arange(len(ranges)), -1)
    if not len(top):
        return top
    order = np.argsort(depth, kind="stable")
    levels = depth[order]
    bounds = np.searchsorted(levels, np.arange(int(levels.max()) + 2))
    for d in range(1, int(levels.max()) + 1):
        rows = order[bounds[d]: bounds[d + 1]]
        p = parent[rows]
        inherit = (p >= 0) & ~is_step[np.maximum(p, 0)] & (top[np.maximum(p, 0)] >= 0)
        top[rows[inherit]] = top[p[inherit]]
    return top


def kernel_stages(trace, kernels: pd.DataFrame) -> np.ndarray:
    """Per kernel: its stage name (see the module docstring)."""
    phase = kernels["phase"].astype(object).fillna("unknown").astype(str).to_numpy()
    if trace is None or not len(kernels) or trace.ranges.empty or "parent" not in trace.ranges:
        return phase
    if len(trace.ops) and (op_states(trace.ops) == BACKWARD).any():
        return phase  # training: forward is a real phase there
    r = trace.ranges
    domain = as_text(r["domain"])
    is_step = np.zeros(len(r), dtype=bool)
    is_step[step_rows(trace)] = True
    user = ~np.isin(domain, ["python", "gpu"]) & ~is_step
    if not user.any():
        return phase
    top = _top_below_steps(r, user, is_step)
    pointer = kernels["range"].to_numpy()
    stage_row = np.where(pointer >= 0, top[np.maximum(pointer, 0)], -1)
    names = as_text(r["name"])
    default = phase == DEFAULT_PHASE
    # only a pipeline that marks its stages: some of its kernels ran inside a user range
    if not (stage_row >= 0).any():
        return phase
    out = phase.copy()
    ranged = default & (stage_row >= 0)
    out[ranged] = names[stage_row[ranged]]
    out[default & (stage_row < 0)] = OUTSIDE_RANGES
    return out
