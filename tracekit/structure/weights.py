"""The weight reads of a run: the outermost GEMM, convolution and embedding ops outside autograd,
in start order, each with the shape of the weight it reads and the widths it maps.

A forward reads its network's weights in the same order each time it runs, so the trace's
shapes (not tensor identities, which it does not record) are enough to tell networks apart: a
text encoder and a UNet read other shapes, a 1-layer draft and a 4-layer target the same
shapes a different number of times.

Each read carries two codes (integers, equal for equal keys):
- `code`: the op family and the weight's shape only, so a prefill and a decode forward of one
  model (other activations, the same weights) read the same codes;
- `context_code`: the op, the weight's shape and the shape it multiplies (two weights of one
  shape, a DiT's time projection [d, 128] and its FFN's down projection [d, f=128], are told
  apart by what they read).

The `entry` of a call is the read that starts a forward: it maps a narrow input (token ids, a
latent's or an image's few channels, mel bins, a timestep's sinusoid) into the network's width,
once per forward. Candidates are found from the shapes here; tracekit.structure.calls keeps
those read once per forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.trace.autograd import NONE, op_states
from tracekit.trace.column_text import as_text

# op -> the input that is its weight (aten signatures: linear(input, weight, bias),
# addmm(bias, mat1, mat2), mm(self, mat2), convolution(input, weight, ...), embedding(weight, indices))
WEIGHT_INPUT = {"aten::linear": 1, "aten::addmm": 2, "aten::mm": 1, "aten::conv1d": 1, "aten::conv2d": 1,
                "aten::conv3d": 1, "aten::convolution": 1, "aten::_convolution": 1, "aten::conv_transpose1d": 1,
                "aten::conv_transpose2d": 1, "aten::conv_transpose3d": 1, "aten::embedding": 0}
# the family a weight belongs to whatever op reads it: nn.Linear is aten::linear eagerly and
# aten::addmm / aten::mm under some dispatch paths; its [out, in] weight reads as [in, out] there
FAMILY = {"aten::linear": "linear", "aten::addmm": "linear_t", "aten::mm": "linear_t", "aten::embedding": "embedding"}
TRANSPOSED_CONV = ("aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d")
# an entry widens its input more than a layer does: a layer's FFN widens 4x at most (GPT-2's
# 4d, LLaMA's 3.5d); a patch embedding, a conv stem or a timestep MLP more
ENTRY_WIDEN = 4.0
# a convolution over a few channels (pixels 1-4, a latent 4-16) that at least doubles them is a
# stem, a patch embedding, a VAE's conv_in: no layer narrows its stream to so few channels
NARROW_CHANNELS = 16


@dataclass(frozen=True)
class WeightReads:
    """The outermost weight-reading ops outside autograd, in start order (see module doc)."""
    rows: np.ndarray  # op rows
    start: np.ndarray
    end: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    code: np.ndarray  # family + weight shape
    context_code: np.ndarray  # op + weight shape + the shape it multiplies
    in_width: np.ndarray  # features it reads (a conv's input channels; 0 for an embedding's indices)
    out_width: np.ndarray  # features it writes
    embedding: np.ndarray  # bool: an embedding table lookup
    conv: np.ndarray  # bool: a convolution
    size: np.ndarray  # the weight's elements

    def on(self, pid: int, tid: int) -> "WeightReads":
        mine = (self.pid == pid) & (self.tid == tid)
        return WeightReads(*(getattr(self, f)[mine] for f in self.__dataclass_fields__))

    def __len__(self) -> int:
        return len(self.rows)


def code_of(keys: list) -> np.ndarray:
    """One integer per distinct key, in order of first appearance."""
    return pd.factorize(pd.Series(keys, dtype=object))[0].astype(np.int64) if keys else np.zeros(0, dtype=np.int64)


def _empty() -> WeightReads:
    z = np.zeros(0, dtype=np.int64)
    return WeightReads(z, z, z, z, z, z, z, z, z, np.zeros(0, dtype=bool), np.zeros(0, dtype=bool), z)


def _widths(name: str, x, w) -> tuple[int, int]:
    """(in, out) features of a read of weight `w` by input `x` (see WEIGHT_INPUT's signatures)."""
    if name == "aten::embedding":
        return 0, int(w[-1])
    if name == "aten::linear":
        return int(w[-1]), int(w[0])
    if name in ("aten::addmm", "aten::mm"):
        return int(w[0]), int(w[-1])
    channels = int(x[1]) if isinstance(x, (list, tuple)) and len(x) >= 2 else int(w[1])
    if name in TRANSPOSED_CONV:
        return channels, int(w[1])
    return channels, int(w[0])


def weight_reads(ops: pd.DataFrame, states: np.ndarray | None = None) -> WeightReads:
    """The run's weight reads (see the module docstring); none where ops carry no shapes."""
    if not len(ops) or "input_dims" not in ops:
        return _empty()
    names = as_text(ops["name"])
    category = ops["name"] if isinstance(ops["name"].dtype, pd.CategoricalDtype) else ops["name"].astype("category")
    by_code = np.array([WEIGHT_INPUT.get(str(c), -1) for c in category.cat.categories] + [-1], dtype=np.int64)
    slot = by_code[category.cat.codes.to_numpy()]  # once per distinct name, not per op
    is_weight = slot >= 0
    if not is_weight.any():
        return _empty()
    states = op_states(ops) if states is None else states
    parent = ops["parent"].to_numpy() if "parent" in ops else np.full(len(ops), -1)
    # outermost: no weight op above it (linear -> addmm is one read)
    under = np.zeros(len(ops), dtype=bool)
    depth = ops["depth"].to_numpy() if "depth" in ops else np.zeros(len(ops), dtype=np.int64)
    for d in range(1, int(depth.max()) + 1 if len(depth) else 0):
        at = np.flatnonzero(depth == d)
        p = parent[at]
        ok = p >= 0
        under[at[ok]] = is_weight[p[ok]] | under[p[ok]]
    rows = np.flatnonzero(is_weight & ~under & (states == NONE))
    dims = ops["input_dims"].to_numpy()
    keys, context, kept, widths, size = [], [], [], [], []
    for i in rows:
        d = dims[i]
        if not (isinstance(d, (list, tuple)) and len(d) > slot[i] and isinstance(d[slot[i]], (list, tuple)) and len(d[slot[i]]) >= 2):
            continue
        w = tuple(d[slot[i]])
        first = d[0] if slot[i] != 0 else d[1]  # what it multiplies: the activation (an embedding's: its indices)
        try:
            widths.append(_widths(names[i], first, w))
        except (TypeError, ValueError):
            continue
        family = FAMILY.get(names[i], "conv_t" if names[i] in TRANSPOSED_CONV else "conv")
        keys.append((family, w))
        context.append((names[i], w, tuple(first) if isinstance(first, (list, tuple)) else None))
        size.append(int(np.prod(w)))
        kept.append(i)
    rows = np.array(kept, dtype=np.int64)
    if not len(rows):
        return _empty()
    start = ops["start"].to_numpy()[rows]
    order = np.argsort(start, kind="stable")
    rows = rows[order]
    width = np.array(widths, dtype=np.int64)[order]
    embedding = np.array([k[0] == "embedding" for k in keys], dtype=bool)[order]
    conv = np.array([k[0].startswith("conv") for k in keys], dtype=bool)[order]
    return WeightReads(rows, start[order], ops["end"].to_numpy()[rows], ops["pid"].to_numpy()[rows], ops["tid"].to_numpy()[rows],
                       code_of(keys)[order], code_of(context)[order], width[:, 0], width[:, 1], embedding, conv,
                       np.array(size, dtype=np.int64)[order])


def entry_candidates(reads: WeightReads) -> np.ndarray:
    """Mask of the reads that could start a forward: an embedding lookup, a convolution over a
    few channels, or a read that widens its input more than ENTRY_WIDEN times (a patch
    embedding, a timestep MLP; a layer's modulation widens as much, which
    tracekit.structure.calls tells by its count and the width it writes)."""
    widens = (reads.in_width > 0) & (reads.out_width > ENTRY_WIDEN * reads.in_width)
    return reads.embedding | widens | narrow_conv(reads)


def narrow_conv(reads: WeightReads) -> np.ndarray:
    """Mask of the convolutions over a few channels that at least double them (see NARROW_CHANNELS)."""
    return reads.conv & (reads.in_width > 0) & (reads.in_width <= NARROW_CHANNELS) & (reads.out_width >= 2 * reads.in_width)


def main_thread(reads: WeightReads) -> tuple[int, int] | None:
    """(pid, tid) of the thread that reads the most weights: the one running the forwards."""
    if not len(reads):
        return None
    keys, counts = np.unique(np.c_[reads.pid, reads.tid], axis=0, return_counts=True)
    pid, tid = keys[int(np.argmax(counts))]
    return int(pid), int(tid)
