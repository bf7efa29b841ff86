"""Tensor / expert parallel degree of the traced rank: from the options, else from the trace.

In order of trust: --tp / --ep; the per-rank width of the query/key/value projection in the
op shapes (a [(Hq + 2·Hkv)·D / tp, hidden] weight); the largest collective group size; the
job's world size. Expert parallelism is not visible in these and defaults to 1.
"""

from __future__ import annotations

import numpy as np

from tracekit.model.blocks import Parallel
from tracekit.model.architecture import Architecture
from tracekit.trace import Trace

_LINEAR = ["aten::linear", "aten::addmm", "aten::mm", "aten::matmul"]


def infer_parallel(trace: Trace, arch: Architecture, tp: int | None, ep: int | None) -> Parallel:
    ep = ep or 1
    if tp:
        return Parallel(tp, ep, "--tp")
    from_shapes = _tp_from_weights(trace, arch)
    if from_shapes:
        return Parallel(from_shapes, ep, "per-rank qkv weight shape")
    groups = trace.kernels["coll_group_size"].to_numpy() if len(trace.kernels) else np.zeros(0)
    if len(groups) and groups.max() > 1:
        return Parallel(int(groups.max()), ep, "collective group size")
    world = trace.meta.get("world_size")
    if isinstance(world, int) and world > 1:
        return Parallel(world, ep, "world size")
    return Parallel(1, ep, "default (one GPU; no collective, world size 1)")


def _tp_from_weights(trace: Trace, arch: Architecture) -> int | None:
    """The smallest TP degree whose per-rank query/key/value and output projection widths all
    appear among the [N, hidden] / [hidden, N] operands of the trace's GEMMs."""
    ops = trace.ops
    if ops.empty or arch.is_mla:
        return None
    names = ops["name"].astype(str).to_numpy()
    rows = np.flatnonzero(np.isin(names, _LINEAR))[:5000]
    widths = set()
    dims = ops["input_dims"].to_numpy()
    for row in rows:
        try:
            shapes = [list(s) for s in dims[row] if isinstance(s, (list, tuple)) and len(s) == 2]
        except TypeError:
            continue
        for s in shapes:
            if arch.hidden in s:
                widths.add(s[0] if s[1] == arch.hidden else s[1])
    for tp in (1, 2, 4, 8, 16, 32, 64):
        if arch.heads % tp:
            continue
        q, kv = arch.heads // tp * arch.head_dim, max(arch.kv_heads // tp, 1) * arch.head_dim
        q_out = q * (2 if arch.attn_output_gate else 1)  # Qwen3-Next / 3.5: the query projection also yields the gate
        # the fused qkv (or the q and k projections apart) and o_proj's input width, all per rank
        if ((q_out + 2 * kv) in widths or (q_out in widths and kv in widths)) and q in widths:
            return tp
    return None
