"""GEMMs no shape or name placed, by the sub-layer they sit in; then the kernels with no launch
take the blocks of their identical kernels again.

A transformer layer is two sub-layers, each opened by a normalisation: the attention (its
projections, the attention core, the output projection) and the FFN (up / gate, the
activation, down). A trace recorded without shapes (Nsight Systems with emit_nvtx, a
profile without record_shapes) leaves the GEMMs with no weight shape; the layer pattern
(attribution.inference) places those next to an activation or an attention core, and the
rest sit in a sub-layer with them: the output projection after the attention core, the
down projection after the activation's GEMMs, the query / key / value projection before
the core (with a position bias computed in between). Such a GEMM takes the block of the
nearest placed GEMM on its stream, before or after it, that no normalisation separates
from it (both, when both qualify, must agree), when a normalisation precedes it on its
stream (it is inside a sub-layer): the sub-layer's GEMMs are one block.

Kernels launched before the capture of their launch calls (half of an emit_nvtx export)
carry no op; the identical-kernels rule (attribution.inference) ran before the layer
pattern placed their twins, so it runs again here for what is still `other`.
"""

from __future__ import annotations

import numpy as np

from tracekit.attribution.inference import from_identical_kernels, identical_signatures
from tracekit.attribution.rules import DEFAULT_BLOCK

SUBLAYER_BLOCKS = ("attention", "ffn")


def _nearest(flags: np.ndarray) -> np.ndarray:
    """Per position: the last index <= it where flags holds, -1 where none."""
    index = np.where(flags, np.arange(len(flags)), -1)
    return np.maximum.accumulate(index) if len(index) else index


def _side(block: np.ndarray, placed: np.ndarray, norm: np.ndarray, lane_start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per position (kernels in lane order): (the block of the nearest placed GEMM strictly
    before it in its lane with no norm between them, None where there is none; whether a norm
    precedes it in its lane)."""
    n = len(block)
    before = np.r_[-1, _nearest(placed)[:-1]] if n else np.zeros(0, dtype=np.int64)
    last_norm = np.r_[-1, _nearest(norm)[:-1]] if n else np.zeros(0, dtype=np.int64)
    ok = (before >= lane_start) & (before > last_norm)
    return np.where(ok, block[np.maximum(before, 0)], None), last_norm >= lane_start


def sublayer_blocks(k, kernel_class: np.ndarray, block: np.ndarray, conv: np.ndarray) -> np.ndarray:
    """`block` with GEMMs still in `other` placed by their sub-layer, then blind kernels by
    their identical kernels (the module docstring)."""
    gemm = (kernel_class == "gemm") & ~conv
    # first the blind kernels' twins: their norms are the sub-layers' bounds
    out = _from_twins(k, block)
    todo = gemm & (out == DEFAULT_BLOCK)
    if todo.any():
        order = np.lexsort((k["start"].to_numpy(), k["stream"].to_numpy(), k["device"].to_numpy()))
        lane = (k["device"].to_numpy()[order].astype(np.int64) << 32) ^ k["stream"].to_numpy()[order]
        n = len(order)
        starts = np.r_[0, np.flatnonzero(lane[1:] != lane[:-1]) + 1]
        lane_start = starts[np.searchsorted(starts, np.arange(n), side="right") - 1]
        lane_end = np.r_[starts[1:], n][np.searchsorted(starts, np.arange(n), side="right") - 1] - 1
        b = out[order]
        placed = gemm[order] & np.isin(b, SUBLAYER_BLOCKS)
        norm = (b == "norm") | (kernel_class[order] == "norm")
        before, opened = _side(b, placed, norm, lane_start)
        # the same walk backwards: positions mirrored, a lane's end is its start
        after = _side(b[::-1], placed[::-1], norm[::-1], (n - 1 - lane_end)[::-1])[0][::-1]
        one = np.where(before != None, before, after)  # noqa: E711 (elementwise on object arrays)
        agree = (before == None) | (after == None) | (before == after)  # noqa: E711
        # only inside a sub-layer: a normalisation opened it (kernels with no layer structure,
        # a dense GEMM beside MoE GEMMs with no norm around, say nothing of each other)
        take = todo[order] & opened & (one != None) & agree  # noqa: E711
        out[order[take]] = one[take]
    return _from_twins(k, out)  # and the GEMMs placed here


def _from_twins(k, block: np.ndarray) -> np.ndarray:
    """Kernels with no launch still in `other` take the block every identical kernel with a
    launch has (attribution.inference.from_identical_kernels)."""
    blind = (k["launch"].to_numpy() < 0) & (k["kind"].astype(str).to_numpy() == "kernel")
    if not blind.any() or not (block[blind] == DEFAULT_BLOCK).any():
        return block
    return from_identical_kernels(block, blind, identical_signatures(k), (k["grid_x"] >= 0).to_numpy(), DEFAULT_BLOCK)
