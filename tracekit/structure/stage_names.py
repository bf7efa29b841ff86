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
stages come from the structure of the op sequence (tracekit.structure.segments: a
repeated forward, a forward of the same weights after it, the networks before and after),
and where it finds no repeated forward the stage stays `forward`. A user range inside a
forward (a DiT block's `self_attention`: it never holds a network's entry and occurs more
than once per step) is never a stage.
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


def kernel_stages(trace, kernels: pd.DataFrame, windows: np.ndarray | None = None) -> np.ndarray:
    """Per kernel: its stage name (see the module docstring). `windows`: the steps' host
    windows (n, 2), inside which the structure is looked for; None: the whole capture."""
    phase = kernels["phase"].astype(object).fillna("unknown").astype(str).to_numpy()
    if trace is None or not len(kernels):
        return phase
    if len(trace.ops) and (op_states(trace.ops) == BACKWARD).any():
        return phase  # training: forward is a real phase there
    if trace.ranges.empty or "parent" not in trace.ranges:
        return structure_stages(trace, kernels, phase, windows)
    r = trace.ranges
    domain = as_text(r["domain"])
    is_step = np.zeros(len(r), dtype=bool)
    is_step[step_rows(trace)] = True
    user = ~np.isin(domain, ["python", "gpu"]) & ~is_step & ~layer_ranges(trace, is_step)
    if not user.any():
        return _python_stages(r, kernels, phase, trace, windows)
    top = _top_below_steps(r, user, is_step)
    pointer = kernels["range"].to_numpy()
    stage_row = np.where(pointer >= 0, top[np.maximum(pointer, 0)], -1)
    names = as_text(r["name"])
    default = phase == DEFAULT_PHASE
    # only a pipeline that marks its stages: some of its kernels ran inside a user range
    if not (stage_row >= 0).any():
        return _python_stages(r, kernels, phase, trace, windows)
    out = phase.copy()
    ranged = default & (stage_row >= 0)
    out[ranged] = names[stage_row[ranged]]
    out[default & (stage_row < 0)] = OUTSIDE_RANGES
    return out


def layer_ranges(trace, is_step: np.ndarray) -> np.ndarray:
    """Mask of the user ranges that are inside a forward (a DiT block's `self_attention`): no
    occurrence of the name holds a network's entry (tracekit.structure.segments.entry_ops)
    and the name occurs more than once per step (per capture without steps)."""
    r, o = trace.ranges, trace.ops
    out = np.zeros(len(r), dtype=bool)
    user = ~np.isin(as_text(r["domain"]), ["python", "gpu"]) & ~is_step
    if not len(o) or not user.any():
        return out
    from tracekit.structure.segments import entry_ops

    entry = entry_ops(o)
    starts = np.sort(o["start"].to_numpy()[entry])
    codes, distinct = pd.factorize(pd.Series(as_text(r["name"]), dtype=object))
    lo, hi = r["start"].to_numpy(), r["end"].to_numpy()
    holds = np.searchsorted(starts, hi, side="right") > np.searchsorted(starts, lo, side="left")
    per_name_holds = np.bincount(codes[user], weights=holds[user], minlength=len(distinct)) > 0
    count = np.bincount(codes[user], minlength=len(distinct))
    layer = ~per_name_holds & (count > max(int(is_step.sum()), 1))
    out[user] = layer[codes[user]]
    return out


def structure_stages(trace, kernels: pd.DataFrame, phase: np.ndarray, windows: np.ndarray | None) -> np.ndarray:
    """The default-phase kernels' stages from the op sequence's structure
    (tracekit.structure.segments), each kernel by the start of the op that launched it."""
    default = phase == DEFAULT_PHASE
    op = kernels["op"].to_numpy() if "op" in kernels else np.full(len(kernels), -1)
    if not default.any() or trace is None or not len(trace.ops) or not (op[default] >= 0).any():
        return phase
    from tracekit.structure.segments import entry_ops, outermost_ops, segments

    found = []
    outer, entry = outermost_ops(trace.ops), entry_ops(trace.ops)  # once: each window takes its slice
    for lo, hi in (windows if windows is not None and len(windows) else [(-np.inf, np.inf)]):
        found += segments(trace.ops, lo, hi, outer, entry)
    if not found:
        return phase
    found.sort(key=lambda s: s.start)
    starts = np.array([s.start for s in found], dtype=np.float64)
    ends = np.array([s.end for s in found], dtype=np.float64)
    names = np.array([s.name for s in found], dtype=object)
    when = np.where(op >= 0, trace.ops["start"].to_numpy()[np.maximum(op, 0)], np.nan).astype(np.float64)
    at = np.searchsorted(starts, when, side="right") - 1
    hit = default & (op >= 0) & (at >= 0) & (when <= ends[np.maximum(at, 0)])
    out = phase.copy()
    out[hit] = names[at[hit]]
    return out


def _python_stages(r: pd.DataFrame, kernels: pd.DataFrame, phase: np.ndarray, trace=None, windows=None) -> np.ndarray:
    """The user's functions as stages of the default-phase kernels (see the module docstring);
    without them, the structure's stages."""
    default = phase == DEFAULT_PHASE
    leaf = kernels["frame"].to_numpy() if "frame" in kernels else np.full(len(kernels), -1)
    if not default.any() or (leaf[default] >= 0).sum() * 2 < default.sum():
        return structure_stages(trace, kernels, phase, windows)  # most of the work has no stack
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
    common = len(stacks[0])  # the frames every stack starts with (one tuple comparison per stack)
    for c in stacks[1:]:
        common = min(common, len(c))
        if c[:common] != stacks[0][:common]:
            common = next(i for i in range(common) if c[i] != stacks[0][i])
    branch = {c[common] for c in stacks if len(c) > common}
    functions = {b: user_function(b) for b in branch}
    if len(set(functions.values())) < 2 or None in functions.values():
        return structure_stages(trace, kernels, phase, windows)
    stage_of = {}
    for row, c in zip(distinct.tolist(), stacks):
        frame = c[common] if len(c) > common else c[-1]
        stage_of[row] = functions.get(frame) or user_function(frame) or frame
    out = phase.copy()
    rows = np.flatnonzero(default & (leaf >= 0))
    out[rows] = [stage_of[int(x)] for x in leaf[rows]]
    return out
