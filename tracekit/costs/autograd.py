"""Forward op <-> backward op, through autograd sequence numbers, for the sizes one side lacks.

A forward op records its sequence number; the backward node that autograd runs for it
(`CudnnConvolutionBackward`, `autograd::engine::evaluate_function: ConvolutionBackward0`)
records the same number, and the ops it calls nest inside it. The 2021 Kineto schema has
no concrete inputs, so a forward convolution's stride and padding, and a backward
convolution's input and weight sizes, are unknown on their own; the pair knows them all:
the forward has input and weight, the backward has grad_output (the forward's output).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tracekit.trace.column_text import as_text

CONV_FORWARD = {"aten::cudnn_convolution", "aten::miopen_convolution", "aten::_convolution", "aten::convolution"}
CONV_BACKWARD_INPUT = {"aten::cudnn_convolution_backward_input", "aten::miopen_convolution_backward_input"}
CONV_BACKWARD_WEIGHT = {"aten::cudnn_convolution_backward_weight", "aten::miopen_convolution_backward_weight"}


def _sequence_owner(ops: pd.DataFrame) -> np.ndarray:
    """For each op, its nearest ancestor-or-self with a sequence number (-1 if none)."""
    seq = ops["sequence"].to_numpy()
    parent = ops["parent"].to_numpy()
    owner = np.where(seq >= 0, np.arange(len(ops)), parent)
    pending = np.flatnonzero((owner >= 0) & (seq[np.maximum(owner, 0)] < 0))
    while len(pending):
        owner[pending] = parent[owner[pending]]
        pending = pending[(owner[pending] >= 0) & (seq[np.maximum(owner[pending], 0)] < 0)]
    return owner


def conv_hints(ops: pd.DataFrame) -> dict[int, dict[str, Any]]:
    """op row -> sizes taken from its autograd partner: output_shape for a forward
    convolution, input_size / weight_size for a backward one."""
    convolutions = CONV_FORWARD | CONV_BACKWARD_INPUT | CONV_BACKWARD_WEIGHT
    cat = ops["name"] if isinstance(ops["name"].dtype, pd.CategoricalDtype) else ops["name"].astype("category")
    # one test per distinct name, and text per distinct name (not an Arrow string per row)
    wanted = np.array([str(c) in convolutions for c in cat.cat.categories] + [False])[cat.cat.codes.to_numpy()]
    names = as_text(cat)
    names[names == None] = "nan"  # noqa: E711  (what astype(str) made of a missing name)
    if not wanted.any() or "sequence" not in ops or (ops["sequence"] < 0).all():
        return {}
    owner = _sequence_owner(ops)
    seq = ops["sequence"].to_numpy()
    dims = ops["input_dims"].to_numpy()
    depth = ops["depth"].to_numpy()
    forward: dict[int, int] = {}  # sequence number -> innermost forward convolution
    grad_output: dict[int, list[int]] = {}  # sequence number -> the gradient of its output
    backward_rows = []
    for row in np.flatnonzero(wanted):
        if owner[row] < 0:
            continue
        s = int(seq[owner[row]])
        is_backward = "Backward" in names[owner[row]]
        if names[row] in CONV_FORWARD and not is_backward:
            if s not in forward or depth[row] > depth[forward[s]]:
                forward[s] = row
        elif is_backward and names[row] not in CONV_FORWARD:
            backward_rows.append((row, s))
            d = dims[row]
            if isinstance(d, list) and len(d) > 1 and isinstance(d[1], list) and d[1]:
                grad_output[s] = d[1]
    hints: dict[int, dict[str, Any]] = {}
    for s, row in forward.items():
        if s in grad_output:
            hints[row] = {"output_shape": grad_output[s]}
    for row, s in backward_rows:
        f = forward.get(s)
        d = dims[f] if f is not None else None
        if isinstance(d, list) and len(d) > 1 and isinstance(d[0], list) and isinstance(d[1], list):
            hints[row] = {"input_size": d[0], "weight_size": d[1]}
    return hints
