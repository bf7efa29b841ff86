"""The structure of a run from what its host ops repeat: the steps, and whether a window holds
a whole forward of the model.

Two sequences per thread, both integer-coded (tracekit.structure.repeats):

- the top-level ops (no op above them, outside autograd), coded by name and input shapes:
  a step of a loop (a denoise step, a video chunk, an iteration) runs the same ops on the
  same shapes each time, so the outermost tandem repeat of this sequence is the steps;
- the weight reads: the outermost GEMM, convolution and embedding ops, coded by name, weight
  shape and the shape it multiplies (two weights of one shape, a DiT's time projection [d, 128] and its FFN's
  down projection [d, f=128], are told apart by what they read). A forward reads every weight of its network once, in the same order each
  time it runs, so the forwards inside a step are the reads of its first weight read, and a window that misses weights the run reads around it (a DiT block's
  `self_attention` range: its FFN, modulation and patch embedding are read outside it) does
  not hold a whole forward.

Names only label what the structure found: the Python frame that encloses exactly one unit
(with_stack traces: the pipeline's `chunk`, say) names it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.trace.autograd import NONE, op_states
from tracekit.trace.column_text import as_text
from tracekit.trace.frames import Trace
from tracekit.structure.repeats import outermost_repeat
from tracekit.structure.weights import WeightReads, code_of, weight_reads

Window = tuple[str, int, int, int, int]  # name, start, end, pid, tid
# Steps are what the run is made of: a repeat whose units take less than this share of the
# thread's host time (from its first top-level op to its last) is a loop inside the run (the
# warm-up forwards of a CUDA-graph capture at one batch size among many), not its steps.
MIN_STEP_SHARE = 0.5


def holds_whole_forwards(reads: WeightReads, windows: list[tuple[int, int]], pid: int, tid: int) -> bool | None:
    """Do the windows (start, end) hold whole forwards? False where a weight read on the thread
    between the first window's start and the last one's end falls outside every window, but
    its weight is read again later in that span (the part of a forward the windows skip: a
    block's other sublayers, a DiT's patch embedding): a per-layer range. None: no weight read
    to tell by (a trace without shapes)."""
    mine = (reads.pid == pid) & (reads.tid == tid)
    if not mine.any() or not windows:
        return None
    start, code = reads.start[mine], reads.context_code[mine]
    lo, hi = min(w[0] for w in windows), max(w[1] for w in windows)
    span = (start >= lo) & (start < hi)
    if not span.any():
        return None
    inside = np.zeros(len(start), dtype=bool)
    for a, b in windows:
        inside |= (start >= a) & (start < b)
    skipped = span & ~inside
    if not skipped.any():
        return True
    # a weight read between windows only once (a text encoder before a denoise loop) is other
    # work; one whose weight recurs across the span is a part of the forward the windows skip
    codes, counts = np.unique(code[span], return_counts=True)
    recurring = set(codes[counts >= 2].tolist())
    return not any(c in recurring for c in code[skipped].tolist())


def holds_layer_stack(reads: WeightReads, windows: list[tuple[int, int]], pid: int, tid: int) -> bool | None:
    """Does every window read a stack of layers (its weight reads hold a tandem repeat: two or
    more layers of one shape, back to back)? A model's forward does; one layer of it (a
    decoder layer's q, k, v, o, gate, up, down; a block's `self_attention` range) does not.
    None: no weight read on the thread."""
    mine = (reads.pid == pid) & (reads.tid == tid)
    if not mine.any():
        return None
    start, code = reads.start[mine], reads.context_code[mine]
    for lo, hi in windows:
        inside = code[(start >= lo) & (start < hi)]
        if outermost_repeat(inside) is None:
            return False
    return True


def top_level_codes(ops: pd.DataFrame, states: np.ndarray) -> tuple[np.ndarray, tuple[int, int]] | None:
    """(rows, thread) of the busiest thread's top-level ops outside autograd, in start order."""
    parent = ops["parent"].to_numpy() if "parent" in ops else np.full(len(ops), -1)
    top = np.flatnonzero((parent < 0) & (states == NONE))
    if len(top) < 4:
        return None
    threads = pd.Series(list(zip(ops["pid"].to_numpy()[top].tolist(), ops["tid"].to_numpy()[top].tolist())))
    busiest = threads.value_counts().index[0]
    rows = top[(threads == busiest).to_numpy()]
    rows = rows[np.argsort(ops["start"].to_numpy()[rows], kind="stable")]
    return rows, (int(busiest[0]), int(busiest[1]))


@dataclass(frozen=True)
class RepeatedSteps:
    windows: list[Window]
    forwards_per_step: int  # reads of each step's first weight read (once per forward), the steps' median


def repeated_steps(trace: Trace, reads: WeightReads | None = None, states: np.ndarray | None = None) -> RepeatedSteps | None:
    """Steps as the outermost repeat of the busiest thread's top-level ops (name + input
    shapes), each step reading weights (a forward at least); None where nothing repeats.
    Step j runs from its first op's start to step j+1's first op's start (the last: to the
    end of its last op), so the work that prepares a step's inputs is that step's."""
    ops = trace.ops
    if not len(ops) or "input_dims" not in ops:
        return None
    states = op_states(ops) if states is None else states
    reads = weight_reads(ops, states) if reads is None else reads
    if not len(reads.rows):
        return None  # no weight read to tell a forward by: no step from repetition
    found = top_level_codes(ops, states)
    if found is None:
        return None
    rows, (pid, tid) = found
    names = as_text(ops["name"])[rows]
    dims = ops["input_dims"].to_numpy()[rows]
    codes = code_of([(n, repr(d)) for n, d in zip(names.tolist(), dims.tolist())])
    repeat = outermost_repeat(codes)
    if repeat is None:
        return None
    starts = ops["start"].to_numpy()[rows]
    ends = ops["end"].to_numpy()[rows]
    bounds = repeat.unit_starts()
    windows, forwards = [], []
    mine = (reads.pid == pid) & (reads.tid == tid)
    for j in range(repeat.count):
        a, b = int(bounds[j]), int(bounds[j + 1])
        lo = int(starts[a])
        hi = int(starts[b]) if b < len(rows) and j + 1 < repeat.count else int(ends[a:b].max())
        in_step = mine & (reads.start >= lo) & (reads.start < hi)
        if not in_step.any():
            return None  # a loop that reads no weight (a data loader, a copy loop) is no step
        # a forward begins with the same read each time it runs: count the step's first one
        first = reads.context_code[np.flatnonzero(in_step)[0]]
        forwards.append(int((reads.context_code[in_step] == first).sum()))
        windows.append((lo, hi))
    span = int(ends.max()) - int(starts.min())
    if span <= 0 or sum(hi - lo for lo, hi in windows) < MIN_STEP_SHARE * span:
        return None
    if not holds_layer_stack(reads, windows, pid, tid):
        return None  # the repeat is the layers of one forward, not forwards
    label = unit_label(trace, windows, pid, tid)
    per = int(np.median(forwards))
    name = label or ("forward" if per == 1 else f"{per} forwards")
    return RepeatedSteps([(f"{name}#{j}", lo, hi, pid, tid) for j, (lo, hi) in enumerate(windows)], per)


def unit_label(trace: Trace, windows: list[tuple[int, int]], pid: int, tid: int) -> str | None:
    """The function name of the innermost Python frame (with_stack traces) that holds the
    first step's work and ends before the second one begins, when every step has a frame of
    that name; None without frames."""
    r = trace.ranges
    if r.empty or len(windows) < 2:
        return None
    python = np.flatnonzero((as_text(r["domain"]) == "python") & (r["pid"].to_numpy() == pid) & (r["tid"].to_numpy() == tid))
    if not len(python):
        return None
    start, end, depth = (r[c].to_numpy()[python] for c in ("start", "end", "depth"))
    names = as_text(r["name"])[python]
    (lo, hi), (next_lo, _) = windows[0], windows[1]
    # the frame holds the step's work, which starts at its first op and ends by the next step's first op
    holds = (start <= lo) & (end >= min(hi, next_lo) - (next_lo - lo) // 2) & (end <= next_lo)
    if not holds.any():
        return None
    best = np.flatnonzero(holds)[np.argmax(depth[holds])]
    label = str(names[best]).rsplit(": ", 1)[-1]
    return label if (names == names[best]).sum() >= len(windows) else None


# the op names that read a weight, where a trace records no shapes to tell the weight by
WEIGHT_OP_NAMES = ("aten::linear", "aten::addmm", "aten::mm", "aten::matmul", "aten::conv1d", "aten::conv2d", "aten::conv3d",
                   "aten::convolution", "aten::embedding")


def repeated_name_steps(trace: Trace, states: np.ndarray | None = None) -> list[Window]:
    """Steps of a trace without shapes (torch.profiler's defaults): the outermost repeat of the
    busiest thread's top-level op names outside autograd, each unit holding two or more
    weight ops (GEMMs, convolutions) and together most of the thread's time. The weaker
    evidence: a loop of the same op names is the steps only by its names."""
    ops = trace.ops
    if not len(ops):
        return []
    states = op_states(ops) if states is None else states
    found = top_level_codes(ops, states)
    if found is None:
        return []
    rows, (pid, tid) = found
    names = as_text(ops["name"])[rows]
    repeat = outermost_repeat(code_of(names.tolist()))
    if repeat is None:
        return []
    unit = names[repeat.start:repeat.start + repeat.period]
    if sum(1 for n in unit if n in WEIGHT_OP_NAMES) < 2:
        return []  # a loop that reads no weights (a data loader, a copy loop) is no step
    starts, ends = ops["start"].to_numpy()[rows], ops["end"].to_numpy()[rows]
    bounds = repeat.unit_starts()
    windows = []
    for j in range(repeat.count):
        a, b = int(bounds[j]), int(bounds[j + 1])
        hi = int(starts[b]) if j + 1 < repeat.count else int(ends[a:b].max())
        windows.append((int(starts[a]), hi))
    span = int(ends.max()) - int(starts.min())
    if span <= 0 or sum(hi - lo for lo, hi in windows) < MIN_STEP_SHARE * span:
        return []
    return [(f"forward#{j}", lo, hi, pid, tid) for j, (lo, hi) in enumerate(windows)]
