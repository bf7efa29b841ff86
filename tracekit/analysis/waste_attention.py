"""Unfused attention: two batched matmuls on one thread, the first making scores
[..., Sq, Sk] from [..., Sq, d] x [..., d, Sk], the second multiplying scores of that shape
by [..., Sk, d], with the ops between them (scale, mask, softmax, dropout) working on the
Sq x Sk matrix, one of them taking the scores alone (the softmax). Found from the ops'
shapes, not their names; in the forward pass only (the backward follows from it). Where the scores outweigh the
inputs (Sk >= d), materializing them is what a fused kernel (SDPA / FlashAttention) avoids:
every kernel from the first matmul to the second is the unfused attention's time, and the
bytes the work needs are the fused kernel's: Q, K, V read once and the output written once."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from tracekit.analysis.waste_row import row
from tracekit.costs.dtypes import canonical, element_bytes

if TYPE_CHECKING:
    from tracekit.analysis.measured import Measured

LOOKBACK = 4  # matmuls between the score matmul and the one that reads the probabilities
FIX = "use torch.nn.functional.scaled_dot_product_attention (attn_implementation='sdpa' in HF) or FlashAttention"


def operands(dims: Any) -> tuple[tuple, tuple] | None:
    """An op's two tensor inputs as (batch elements, last two dims) pairs, when they are a
    batched matmul's: one rank (3 or more), one batch, inner dimensions equal."""
    if not isinstance(dims, list):
        return None
    t = [d for d in dims if isinstance(d, list) and len(d) > 0]
    # a batched matmul: exactly two tensors, of one rank and one batch (a convolution's
    # backward takes three; its forward's weight is not batched like its input)
    if (len(t) != 2 or len(t[0]) < 3 or len(t[0]) != len(t[1]) or not all(isinstance(x, int) for x in t[0] + t[1])
            or t[0][:-2] != t[1][:-2] or t[0][-1] != t[1][-2]):
        return None
    return (math.prod(t[0][:-2]), tuple(t[0][-2:])), (math.prod(t[1][:-2]), tuple(t[1][-2:]))


def works_on_scores(cols: dict, o1: int, o2: int, second) -> bool:
    """Whether an op between the two matmuls (same thread) takes the scores alone: the
    softmax (or scale) of an attention; a chain of convolutions has no such op. `cols`: the
    ops' tid, start, end and input_dims as arrays (a pandas lookup per op costs ~10 us)."""
    (b, (sq, sk)), _ = second
    tid, lo, hi = cols["tid"][o1], cols["end"][o1], cols["start"][o2]
    for j in range(o1 + 1, o2):
        if cols["tid"][j] != tid or not lo <= cols["start"][j] <= hi:
            continue
        t = [d for d in cols["input_dims"][j] or [] if isinstance(d, list) and len(d) > 0]
        if len(t) == 1 and len(t[0]) >= 3 and all(isinstance(x, int) for x in t[0]) and t[0][-2:] == [sq, sk] \
                and math.prod(t[0][:-2]) == b:
            return True
    return False


def pairs(ops, order: np.ndarray) -> list[tuple[int, int, int, int, int, int]]:
    """(score op, output op, batch, Sq, Sk, d) per unfused attention, from the matmul ops in
    `order` (one thread's, by start)."""
    found = []
    cols = {name: ops[name].to_numpy() for name in ("tid", "start", "end", "input_dims")}
    mm = {o: operands(cols["input_dims"][o]) for o in order.tolist()}
    for j, o2 in enumerate(order):
        second = mm[int(o2)]
        if second is None:
            continue
        (b, (sq, sk)), (_, (sk2, d)) = second
        if sk != sk2 or sk < d:
            continue
        for o1 in order[max(0, j - LOOKBACK):j][::-1]:
            first = mm[int(o1)]
            if (first is not None and first[0][1][0] == sq and first[1][1] == (first[0][1][1], sk) and first[0][1][1] == d
                    and works_on_scores(cols, int(o1), int(o2), second)):
                found.append((int(o1), int(o2), b, sq, sk, d))
                break
    return found


def rows(a: Measured, free: np.ndarray, time: np.ndarray, of_ns: float) -> list[dict[str, Any] | None]:
    k, ops = a.kernels, a.trace.ops
    op = k["op"].to_numpy()
    # the matmuls: ops whose kernels the costs call matrix work (a fused attention kernel is not one)
    matrix = (k["cost_kind"] == "matrix").to_numpy() & (k["kernel_class"] == "gemm").to_numpy()
    # the forward (or inference) pass: an unfused attention's backward follows from its forward
    matrix &= (k["phase"] != "backward").to_numpy()
    linked = np.unique(op[free & (op >= 0) & matrix])
    if not len(linked):
        return []
    start, end = ops["start"].to_numpy(), ops["end"].to_numpy()
    thread = ops["pid"].to_numpy().astype(np.int64) * (1 << 32) + ops["tid"].to_numpy().astype(np.int64)
    mine = np.zeros(len(k), dtype=bool)
    needed, flops, n = 0.0, 0.0, 0
    kernel_start = start[np.maximum(op, 0)]
    for th in np.unique(thread[linked]):
        order = linked[thread[linked] == th]
        order = order[np.argsort(start[order], kind="stable")]
        for o1, o2, b, sq, sk, d in pairs(ops, order):
            types = ops["input_types"].iat[o1]
            dtype = canonical(types[0]) if isinstance(types, list) and types else None
            size = element_bytes(dtype) if dtype else math.nan
            s2 = sq * sk
            mine |= free & (op >= 0) & (thread[np.maximum(op, 0)] == th) & (kernel_start >= start[o1]) & (kernel_start <= end[o2])
            needed += b * (2 * sq * d + 2 * sk * d) * size  # Q and O, K and V: once each
            flops += 4.0 * b * s2 * d
            n += 1
    if not mine.any():
        return []
    evidence = {"attentions": n, "bytes_needed": needed if math.isfinite(needed) else None, "flops": flops}
    return [row(a, "waste_unfused_attention", f"unfused attention: matmul + softmax + matmul over Sq x Sk ({n:,} calls)",
                mine, time, of_ns, FIX, evidence)]
