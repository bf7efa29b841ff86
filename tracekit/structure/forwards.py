"""A language model's forward passes, from its token embedding op: where each began, and
the batch and tokens it took.

Every forward of a token model starts by looking its input ids up in the token embedding:
`aten::embedding(weight [V, d], indices [B, T], ...)`. The token embedding is the one whose
table is the largest (position or type embeddings are smaller tables). Its indices give
the work: B sequences of T tokens, B x T tokens; T > 1 is a prompt (prefill, or a training
batch), T = 1 one new token per sequence (decode). Only forwards the model runs as such
count: an embedding under an autograd node (its backward, or a checkpointed recompute)
is not a new forward (tracekit.trace.autograd).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.trace.autograd import NONE, op_states
from tracekit.trace.column_text import as_text

EMBEDDING_OP = "aten::embedding"
FORWARD_COLUMNS = ["op", "start", "end", "pid", "tid", "batch", "tokens_per_sequence", "tokens", "vocabulary"]


def _dims(value) -> list | None:
    return value if isinstance(value, (list, tuple)) else None


def token_forwards(ops: pd.DataFrame, states: np.ndarray | None = None) -> pd.DataFrame:
    """One row per forward pass (FORWARD_COLUMNS), in start order: the token embedding ops
    outside autograd, with B, T and B x T from their indices. `states`: op_states(ops), when
    the caller has it."""
    if not len(ops):
        return pd.DataFrame(columns=FORWARD_COLUMNS)
    names = as_text(ops["name"])
    rows = np.flatnonzero(names == EMBEDDING_OP)
    if not len(rows):
        return pd.DataFrame(columns=FORWARD_COLUMNS)
    states = op_states(ops) if states is None else states
    # an embedding op nested in another (a dispatcher's re-record of the same call) is one forward
    parent = ops["parent"].to_numpy() if "parent" in ops else np.full(len(ops), -1)
    outer = np.array([parent[i] < 0 or names[parent[i]] != EMBEDDING_OP for i in rows], dtype=bool)
    rows = rows[(states[rows] == NONE) & outer]
    found = []
    for i in rows:
        dims = _dims(ops["input_dims"].iat[i]) or []
        weight, indices = (_dims(dims[0]), _dims(dims[1])) if len(dims) >= 2 else (None, None)
        if not weight or len(weight) != 2 or not indices:
            continue
        batch, per = (int(indices[0]), int(indices[1])) if len(indices) >= 2 else (1, int(indices[0]))
        found.append((int(i), int(weight[0]), batch, per))
    if not found:
        return pd.DataFrame(columns=FORWARD_COLUMNS)
    vocabulary = max(v for _, v, _, _ in found)
    out = [(i, b, t) for i, v, b, t in found if v == vocabulary]
    i = np.array([r[0] for r in out], dtype=np.int64)
    table = pd.DataFrame({
        "op": i, "start": ops["start"].to_numpy()[i], "end": ops["end"].to_numpy()[i],
        "pid": ops["pid"].to_numpy()[i], "tid": ops["tid"].to_numpy()[i],
        "batch": [r[1] for r in out], "tokens_per_sequence": [r[2] for r in out],
        "tokens": [r[1] * r[2] for r in out], "vocabulary": vocabulary})
    return table.sort_values("start", kind="stable").reset_index(drop=True)


def tokens_between(forwards: pd.DataFrame, start: float, end: float, pid: int | None = None) -> tuple[int, int] | None:
    """(forwards, tokens) of the forward passes that began inside [start, end) (in process
    `pid` when given; a step's window ends where the next one's forward begins); None when
    none did."""
    if not len(forwards):
        return None
    t = forwards["start"].to_numpy()
    inside = (t >= start) & (t < end)
    if pid is not None and pid >= 0:
        inside &= forwards["pid"].to_numpy() == pid
    if not inside.any():
        return None
    return int(inside.sum()), int(forwards["tokens"].to_numpy()[inside].sum())
