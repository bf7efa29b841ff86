"""The stage of each kernel: its phase, or, for a user's own pipeline, the user's range.

A kernel's stage is its phase (tracekit.attribution), except where the phase is only the
default `forward` of an inference (no autograd ran: nothing in the trace says forward as
opposed to backward) and the user marked the work with ranges: then the stage is the
outermost of the user's ranges enclosing the kernel's launch, below the step ranges (a
pipeline's `encode_image`, `sample`, `postprocess`); work of that pipeline launched
outside all of them is OUTSIDE_RANGES. Without such ranges but with Python frames
(torch.profiler with_stack), the stages are the user's own functions: below the frames
every such kernel's stack shares, the functions the stacks branch into, when they are the
user's code (not an installed library's, not an nn.Module) and more than one. Otherwise the
stage stays `forward`.
"""

from __future__ import annotations

import re
import sys

import numpy as np
import pandas as pd

from tracekit.attribution.rules import DEFAULT_PHASE
from tracekit.trace.autograd import BACKWARD, op_states
from tracekit.trace.column_text import as_text
from tracekit.trace.intervals import levels_down
from tracekit.trace.step_ownership import step_rows

OUTSIDE_RANGES = "outside the user's ranges"
# torch.profiler writes an installed package's frames with the path inside the package
# (`transformers/pipelines/base.py(1306): __call__`, `torch/nn/modules/module.py(...)`), the
# user's script as it was run: a bare file name or an absolute path outside site-packages
FRAME_FILE = re.compile(r"^(.*?\.py)\(\d+\): (.+)$")
INSTALLED = re.compile(r"site-packages|dist-packages|/lib/python\d")


def user_function(frame: str) -> str | None:
    """The function name of a Python frame of the user's own code; None for any other frame
    (an installed library's, an nn.Module, a built-in)."""
    found = FRAME_FILE.match(frame[:1024])
    if not found:
        return None
    path = found.group(1)
    # the standard library's files come bare too (`enum.py(1230): __hash__`): known by module name
    if "/" not in path and path[:-3] in sys.stdlib_module_names:
        return None
    mine = "/" not in path or (path.startswith("/") and not INSTALLED.search(path))
    return found.group(2) if mine else None


def _top_below_steps(ranges: pd.DataFrame, eligible: np.ndarray, is_step: np.ndarray) -> np.ndarray:
    """Per range row: the outermost eligible range on its chain up to a step or the root
    (itself included); -1 where none is. Level by level from the roots down."""
    parent, depth = ranges["parent"].to_numpy(), ranges["depth"].to_numpy()
    top = np.where(eligible, np.arange(len(ranges)), -1)
    for rows, p in levels_down(parent, depth):
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
        return _python_stages(r, kernels, phase)
    top = _top_below_steps(r, user, is_step)
    pointer = kernels["range"].to_numpy()
    stage_row = np.where(pointer >= 0, top[np.maximum(pointer, 0)], -1)
    names = as_text(r["name"])
    default = phase == DEFAULT_PHASE
    # only a pipeline that marks its stages: some of its kernels ran inside a user range
    if not (stage_row >= 0).any():
        return _python_stages(r, kernels, phase)
    out = phase.copy()
    ranged = default & (stage_row >= 0)
    out[ranged] = names[stage_row[ranged]]
    out[default & (stage_row < 0)] = OUTSIDE_RANGES
    return out


def _python_stages(r: pd.DataFrame, kernels: pd.DataFrame, phase: np.ndarray) -> np.ndarray:
    """The user's functions as stages of the default-phase kernels (see the module docstring)."""
    default = phase == DEFAULT_PHASE
    leaf = kernels["frame"].to_numpy() if "frame" in kernels else np.full(len(kernels), -1)
    if not default.any() or (leaf[default] >= 0).sum() * 2 < default.sum():
        return phase  # most of the work has no stack: nothing to name it by
    names, parent = as_text(r["name"]), r["parent"].to_numpy()
    chains: dict[int, tuple[str, ...]] = {}

    def chain(row: int) -> tuple[str, ...]:
        path = []
        while row >= 0 and row not in chains:
            path.append(row)
            row = parent[row]
        known = chains.get(row, ())
        for node in reversed(path):
            known = known + (names[node],)
            chains[node] = known
        return known

    distinct = np.unique(leaf[default & (leaf >= 0)])
    stacks = [chain(int(row)) for row in distinct]
    common = 0
    while all(len(c) > common for c in stacks) and len({c[common] for c in stacks}) == 1:
        common += 1
    branch = {c[common] for c in stacks if len(c) > common}
    functions = {b: user_function(b) for b in branch}
    if len(set(functions.values())) < 2 or None in functions.values():
        return phase
    stage_of = {}
    for row, c in zip(distinct.tolist(), stacks):
        frame = c[common] if len(c) > common else c[-1]
        stage_of[row] = functions.get(frame) or user_function(frame) or frame
    out = phase.copy()
    rows = np.flatnonzero(default & (leaf >= 0))
    out[rows] = [stage_of[int(x)] for x in leaf[rows]]
    return out
