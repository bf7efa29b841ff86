"""Backward and recompute from the autograd structure of the ops, before any name rule.

torch.profiler records what the autograd engine runs: each node it executes is an op
`autograd::engine::evaluate_function: <Node>` around the node's own op (`MmBackward0`,
`torch::autograd::AccumulateGrad`, a custom `CheckpointFunctionBackward`), on the thread
that runs the backward pass. Every op executed while grad mode builds a graph carries an
autograd `Sequence number`; the math a backward node does runs with grad mode off, so its
ops carry none (the node op itself does: it is the node's).

So, per op, the nearest autograd context decides:
  backward    an autograd node op, or any op inside one;
  recompute   an op with a sequence number inside a backward node, and what it encloses: a
              forward op recorded for autograd while backward runs. That is activation
              checkpointing re-running the forward: non-reentrant (torch/utils/checkpoint.py's
              saved-tensor unpack hook calls `recompute_fn` under `enable_grad`, inside the
              node that unpacks the first saved tensor) and reentrant
              (`CheckpointFunction.backward` re-runs the forward under `enable_grad`, inside
              its `CheckpointFunctionBackward` node; the inner backward it then runs is
              backward again, being autograd nodes).
  none        everything else (the forward, the optimizer, an inference).
A trace with no autograd node ops has no backward. (A double backward, `create_graph=True`,
records its gradient math for autograd too: it would read as recompute.)
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.trace.column_text import rows_where
from tracekit.trace.grouping import combine

NONE, BACKWARD, RECOMPUTE = 0, 1, 2
AUTOGRAD_NODE = re.compile(r"^autograd::engine::evaluate_function|^torch::autograd::|Backward\d*$")


def op_states(ops: pd.DataFrame) -> np.ndarray:
    """Per op: NONE, BACKWARD or RECOMPUTE (see the module docstring), from the roots down."""
    n = len(ops)
    state = np.zeros(n, dtype=np.int8)
    if not n or "parent" not in ops:
        return state
    node = rows_where(ops["name"], lambda n: AUTOGRAD_NODE.search(n[:512]))
    recorded = ops["sequence"].to_numpy() >= 0
    parent, depth = ops["parent"].to_numpy(), ops["depth"].to_numpy()
    order = np.argsort(depth, kind="stable")
    levels = depth[order]
    bounds = np.searchsorted(levels, np.arange(int(levels.max()) + 2))
    state[order[: bounds[1]]] = np.where(node[order[: bounds[1]]], BACKWARD, NONE)
    for d in range(1, int(levels.max()) + 1):
        rows = order[bounds[d]: bounds[d + 1]]
        p = parent[rows]
        inherited = np.where(p >= 0, state[np.maximum(p, 0)], NONE)
        state[rows] = np.where(node[rows], BACKWARD,
                               np.where(recorded[rows] & (inherited != NONE), RECOMPUTE, inherited))
    return state


def kernel_states(kernels: pd.DataFrame, states: np.ndarray) -> np.ndarray:
    """Per kernel: the state of the op that launched it (NONE without one)."""
    op = kernels["op"].to_numpy()
    return np.where(op >= 0, states[np.maximum(op, 0)] if len(states) else NONE, NONE).astype(np.int8)


def on_autograd_threads(ops: pd.DataFrame, states: np.ndarray, pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """Per (pid, tid) given: did that thread run autograd node ops (a backward pass ran there)?"""
    if not len(ops) or not len(pid):
        return np.zeros(len(pid), dtype=bool)
    node = states == BACKWARD
    key = combine([np.r_[ops["pid"].to_numpy(np.int64)[node], pid], np.r_[ops["tid"].to_numpy(np.int64)[node], tid]])
    return np.isin(key[int(node.sum()):], key[: int(node.sum())])
