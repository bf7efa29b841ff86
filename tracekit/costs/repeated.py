"""Kernels launched before the capture began, costed from the same place in a later iteration.

The profiler starts while the GPU still runs work queued before it: those kernels have no op
(`launched_before_capture`), and often no grid. They are the head of their stream in the
trace and the tail of an iteration (a forward, a training step) that the trace then repeats.
Where the stream's whole head (its names in order, and its grids where recorded) occurs at
least twice later in the same stream, each head kernel is the kernel at the same position of every such
occurrence: it takes their cost when all of them have one and they agree on FLOPs and bytes
(a decode step whose attention reads a longer cache each time disagrees, and stays unknown).
Identical kernels alone (same name and grid) cannot tell apart the GEMMs of one layer that
share a kernel and a grid but not a shape; the position in the repeated sequence does.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

REPEATED = "inferred from the same place in a later iteration"
_MAX_OCCURRENCES = 64  # windows compared per stream: enough to see any disagreement
_MIN_OCCURRENCES = 2  # one later match could be chance; two that agree are the iteration repeating


def from_repeated_sequence(k: pd.DataFrame, out: dict) -> None:
    """Fill, in `out` (the per-kernel cost arrays), the uncosted kernels of each stream's
    pre-capture head from the later occurrences of that head (see the module doc)."""
    if "launched_before_capture" not in k or not len(k):
        return
    pre = k["launched_before_capture"].to_numpy(dtype=bool)
    if not pre.any():
        return
    names = k["name"] if isinstance(k["name"].dtype, pd.CategoricalDtype) else k["name"].astype("category")
    name = names.cat.codes.to_numpy()
    grid = np.stack([k[c].to_numpy() for c in ("grid_x", "grid_y", "grid_z", "block_x")], axis=1)
    # a stream is a (device, stream id) pair: every GPU of a multi-GPU trace has its stream 7
    stream = k["stream"].to_numpy().astype(np.int64)
    if "device" in k and len(k):  # one integer per pair, without a MultiIndex (2 s on 5M kernels)
        stream = pd.factorize(k["device"].to_numpy())[0].astype(np.int64) * (int(stream.max() - stream.min()) + 1) \
            + (stream - stream.min())
    start, end = k["start"].to_numpy(), k["end"].to_numpy()
    heads, anchor = {}, None
    for s in pd.unique(stream[pre]):
        rows = np.flatnonzero(stream == s)
        rows = rows[np.argsort(start[rows], kind="stable")]
        n = int(pre[rows].sum())
        if not n or not pre[rows[:n]].all():  # the head is not one run at the start: no tail of an iteration
            continue
        head = heads[s] = rows[:n]
        windows = _occurrences(rows, head, name, grid)
        if len(windows) < _MIN_OCCURRENCES:
            continue
        if (anchor is None or n > len(anchor[0])):
            anchor = (head, [int(rows[i]) for i in windows])
        if np.isnan(out["flops"][head]).any():
            _borrow_by_position(head, np.array([rows[i:i + n] for i in windows]), out)
    if anchor is not None:
        _by_anchor(heads, anchor, name, stream, start, end, pre, out)


def _by_anchor(heads: dict, anchor: tuple, name: np.ndarray, stream: np.ndarray, start: np.ndarray, end: np.ndarray,
               pre: np.ndarray, out: dict) -> None:
    """A side stream (NCCL's, a copy stream) whose own head repeats too often to place it (one
    collective kernel name for every bucket) is placed by the longest head that repeats: the
    head runs in the span of that anchor head, and each later occurrence of the anchor shifts
    that span; the side stream's kernels in the shifted span, the same names in order, are
    the head's donors, position by position."""
    anchor_head, occurrences = anchor
    lo, hi = start[anchor_head[0]], end[anchor_head[-1]]
    for s, head in heads.items():
        if head is anchor_head or not np.isnan(out["flops"][head]).any() or start[head[0]] < lo or start[head[-1]] > hi:
            continue
        rows = np.flatnonzero((stream == s) & ~pre)
        rows = rows[np.argsort(start[rows], kind="stable")]
        donors = []
        for first in occurrences:
            shift = start[first] - lo
            window = rows[(start[rows] >= lo + shift) & (start[rows] <= hi + shift)]
            if len(window) != len(head) or (name[window] != name[head]).any():
                donors = []
                break
            donors.append(window)
        if donors:
            _borrow_by_position(head, np.array(donors), out)


def _occurrences(rows: np.ndarray, head: np.ndarray, name: np.ndarray, grid: np.ndarray) -> list[int]:
    """Start positions (in `rows`) of the later windows equal to the head: the same kernel
    names in order, and the same grid and block where the head kernel's were recorded."""
    n = len(head)
    known = grid[head][:, 0] >= 0
    found = []
    for i in np.flatnonzero(name[rows[n:len(rows) - n + 1]] == name[head[0]]).tolist():
        window = rows[n + i:n + i + n]
        if (name[window] == name[head]).all() and (grid[window][known] == grid[head][known]).all():
            found.append(n + i)
            if len(found) >= _MAX_OCCURRENCES:
                break
    return found


def _borrow_by_position(head: np.ndarray, donors: np.ndarray, out: dict) -> None:
    """Each uncosted head kernel takes the cost of its position's donors when every donor
    has one and all agree on FLOPs, bytes read and bytes written."""
    missing = np.isnan(out["flops"][head])
    values = np.stack([out[f][donors] for f in ("flops", "bytes_read", "bytes_written")])  # 3 x occ x n
    costed = ~np.isnan(values).any(axis=0).any(axis=0)
    agree = (values == values[:, :1, :]).all(axis=(0, 1))
    take = np.flatnonzero(missing & costed & agree)
    if not len(take):
        return
    rows, donor = head[take], donors[0, take]
    for f in ("flops", "bytes_read", "bytes_written", "cost_kind", "dtype", "cost_estimate"):
        out[f][rows] = out[f][donor]
    out["cost_source"][rows] = REPEATED
    out["unknown_reason"][rows] = None
