"""Blocks from the trace's structure, for kernels the name rules left in `other`.

HF models on a current torch record no ranges and (without with_stack) no module frames, so
nothing named says which block a kernel serves. The structure does, in this order:

1. A GEMM's weight shape against the model's widths (attribution.widths): q/k/v/o to
   attention, gate/up/down to ffn, the vocabulary projection to lm_head. Backward GEMMs
   (input and weight gradients) hold the same two dims, so they are placed the same way.
2. The op that launched a GEMM also launches the kernels around it (aten::linear's bias add,
   autocast's weight cast): they take its GEMM's block. The walk up the op tree stops at an
   autograd node, which encloses a whole recomputed layer under checkpointing.
3. A kernel's own tensors: the vocabulary width is the logits (loss, softmax, sampling:
   block `logits`, beside the lm_head's GEMM: "lm_head 18%" must read as the vocabulary
   projection, not as a serving engine's sampler), the FFN width is the activation (silu x mul and its gradient: ffn), a
   [B, heads, T, head_dim] or [B, T, heads, head_dim] tensor is split into heads (rotary,
   head transposes: attention).
4. Its place on its stream between kernels whose block is certain (anchors: GEMMs and
   convolutions placed by weight, attention kernels, norms and reductions over the hidden
   width, embeddings): between two anchors of one block it is that block's (the attention
   core's reshapes, the activation, a conv block's activations, also between a norm and a
   convolution); next to a norm, on the
   side of a layer part, it is the layer boundary (the residual add and the normalisation's
   elementwise steps: norm); after the lm_head in the forward it is the logits' (loss, softmax,
   sampling: `logits`); in the backward, between the lm_head's gradients and the next anchor,
   the lm_head's (its gradient's accumulation, not the logits').
   A serving step's last GEMM, when no shape placed it, is its lm_head: a decoder's forward
   ends with the vocabulary projection (only with a vocabulary among the widths).
5. Convolutions are block `conv`; the optimizer's kernels (phase optimizer) block `optimizer`.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.attribution.rules import DEFAULT_BLOCK
from tracekit.attribution.widths import Widths, weight_pairs
from tracekit.trace.step_ownership import kernel_steps

TRANSFORMER_BLOCKS = ("attention", "ffn", "lm_head")
LOGITS = "logits"  # the work on the lm_head's output (loss, softmax, sampling), apart from its GEMM
LAYER_PARTS = ("attention", "ffn", "embedding", "norm", "lm_head")  # what sits next to a normalisation (the final one precedes the lm_head)
# autograd nodes: the op tree above them is the backward pass, not the module that ran the op
AUTOGRAD_NODE = re.compile(r"Backward\d*$|^autograd::engine::evaluate_function|^torch::autograd::")
MAX_DEPTH = 64


def _op_dims(trace) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(name per op row, is it an autograd node, input dims, parent): names are read once per
    distinct name (the table holds a few hundred names many thousand times)."""
    ops = trace.ops
    names = ops["name"] if isinstance(ops["name"].dtype, pd.CategoricalDtype) else ops["name"].astype("category")
    text = np.array([str(c) for c in names.cat.categories] + [""], dtype=object)
    node = np.array([bool(AUTOGRAD_NODE.search(t[:512])) for t in text], dtype=bool)
    codes = names.cat.codes.to_numpy()
    parent = ops["parent"].to_numpy() if "parent" in ops else np.full(len(ops), -1)
    return text[codes], node[codes], ops["input_dims"].to_numpy(), parent


def _per_kernel(by_op: np.ndarray, op: np.ndarray) -> np.ndarray:
    """A per-op-row label array read per kernel (None for a kernel without an op)."""
    if not len(by_op):
        return np.full(len(op), None, dtype=object)
    return np.where(op >= 0, by_op[np.maximum(op, 0)], None)


def gemm_blocks(op: np.ndarray, gemm: np.ndarray, names: np.ndarray, dims: np.ndarray, widths: Widths) -> np.ndarray:
    """Per kernel: the block its GEMM's weight shape says, None where it says nothing."""
    by_op = np.full(len(names), None, dtype=object)
    for row in np.unique(op[gemm & (op >= 0)]):
        for pair in weight_pairs(names[row], dims[row]):
            block = widths.block_of(pair)
            if block is not None:
                by_op[row] = block
                break
    return np.where(gemm, _per_kernel(by_op, op), None)


def enclosing_op_blocks(op: np.ndarray, block_of_gemm: np.ndarray, parent: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """Per kernel: the block of the GEMM its enclosing module-level op (below any autograd node)
    launched, when that op's GEMMs are all of one block; None elsewhere."""
    n_ops = len(parent)
    out = np.full(len(op), None, dtype=object)
    if not n_ops:
        return out
    codes = {b: i + 1 for i, b in enumerate(TRANSFORMER_BLOCKS)}
    marks = np.zeros(n_ops, dtype=np.int8)  # 0 none, a block's code, -1 GEMMs of several blocks
    for block, code in codes.items():
        cur = np.unique(op[(block_of_gemm == block) & (op >= 0)])
        for _ in range(MAX_DEPTH):
            cur = cur[(cur >= 0) & ~stop[np.maximum(cur, 0)]]
            if not len(cur):
                break
            marks[cur] = np.where((marks[cur] == 0) | (marks[cur] == code), code, -1)
            cur = np.unique(parent[cur])
    cur = op.copy()
    found = np.zeros(len(op), dtype=np.int8)
    for _ in range(MAX_DEPTH):
        live = (found == 0) & (cur >= 0)
        if not live.any():
            break
        live &= ~stop[np.maximum(cur, 0)]
        found[live] = marks[cur[live]]
        cur = np.where(live & (found == 0), parent[np.maximum(cur, 0)], -1)
    for block, code in codes.items():
        out[found == code] = block
    return out


def _tensor_shapes(inputs) -> list[list[int]]:
    """The shapes of an op's tensor inputs, a tensor list's (aten::cat) included."""
    out = []
    for value in (inputs if isinstance(inputs, (list, tuple)) else [])[:8]:
        for s in (value[:8] if value and isinstance(value[0], (list, tuple)) else [value]) if isinstance(value, (list, tuple)) else []:
            if isinstance(s, (list, tuple)) and s and all(isinstance(d, (int, np.integer)) for d in s):
                out.append([int(d) for d in s])
    return out


def tensor_blocks(op: np.ndarray, dims: np.ndarray, widths: Widths, wanted: np.ndarray) -> np.ndarray:
    """Per kernel: the block its op's tensors' widths say (vocab, FFN width, heads); None
    elsewhere. Only the ops of `wanted` kernels are read."""
    head = {widths.head_dim, widths.head_dim // 2} if widths.head_dim else set()
    ffn = widths.ffn - {widths.hidden}
    # heads at [B, heads, T, D] or [B, T, heads, D]; one head says nothing (a VAE's attention, any [N, C, H, W])
    heads = set(widths.heads) - {1}
    # a mixture of experts: its stacked weights [E, X, H] / [E, H, X] and the router's scores
    # [tokens, E] (softmax, top-k); E is not a last-dim width of its own (it may equal a head dim)
    experts = set(widths.experts)
    ffn -= experts
    by_op = np.full(len(dims), None, dtype=object)
    for row in np.unique(op[wanted & (op >= 0)]):
        shapes = _tensor_shapes(dims[row])
        last = {s[-1] for s in shapes}
        if last & widths.vocab:
            by_op[row] = LOGITS
        elif experts and any((len(s) == 3 and s[0] in experts and widths.hidden in s[1:]) or (len(s) == 2 and s[-1] in experts)
                             for s in shapes):
            by_op[row] = "ffn"
        elif last & ffn:
            by_op[row] = "ffn"
        elif head and any(len(s) == 4 and s[-1] in head and {s[1], s[2]} & heads for s in shapes):
            by_op[row] = "attention"
    return _per_kernel(by_op, op)


def reduced_dims(concrete) -> list[int] | None:
    """The `dim` list of a reduction as its concrete inputs record it ('[-1]', '[0, 1]'), None if absent."""
    for value in (concrete if isinstance(concrete, (list, tuple)) else [])[1:3]:
        text = str(value)[:64].strip()
        if text.startswith("[") and text.endswith("]"):
            try:
                return [int(d) for d in text[1:-1].split(",") if d.strip()]
            except ValueError:
                return None
    return None


def hidden_reductions(op: np.ndarray, kernel_class: np.ndarray, dims: np.ndarray, concrete: np.ndarray, hidden: int) -> np.ndarray:
    """Per kernel: a reduction over the hidden width (the mean of an RMSNorm written out in
    Python, a LayerNorm's statistics), or a norm kernel. Where the op records the dims it
    reduces, the last one must be among them (a bias gradient sums [tokens, hidden] over tokens)."""
    reduction = (kernel_class == "reduction") & (op >= 0)
    over_hidden = np.zeros(len(dims), dtype=bool)
    for row in np.unique(op[reduction]):
        inputs = dims[row] if isinstance(dims[row], (list, tuple)) else []
        first = inputs[0] if inputs and isinstance(inputs[0], (list, tuple)) and inputs[0] else None
        if first is None or first[-1] != hidden:
            continue
        reduced = reduced_dims(concrete[row])
        over_hidden[row] = reduced is None or -1 in reduced or len(first) - 1 in reduced
    return (kernel_class == "norm") | (reduction & over_hidden[np.maximum(op, 0)]) if len(dims) else kernel_class == "norm"


def between_anchors(lane_order: np.ndarray, lane: np.ndarray, anchor: np.ndarray, todo: np.ndarray) -> np.ndarray:
    """Per kernel (`todo` ones only): the block its place between anchors says (step 4 of the
    module docstring). `anchor`: per kernel, the block of a kernel whose block is certain (a
    GEMM or convolution by its weight, an attention kernel, a norm, an embedding; 'other' for
    a GEMM of no known block), '' for the rest."""
    a = anchor[lane_order]
    new_lane = np.r_[True, lane[1:] != lane[:-1]] if len(a) else np.zeros(0, bool)
    is_anchor = a != ""
    opens = is_anchor | new_lane  # a segment starts at an anchor or at a lane's start
    segment = np.cumsum(opens) - 1
    first = np.flatnonzero(opens)
    prev_block = np.where(is_anchor[first], a[first], "").astype(object)
    same_lane = np.append(~new_lane[first[1:]], False)
    next_block = np.where(same_lane, np.append(prev_block[1:], ""), "").astype(object)
    verdict = np.full(len(first), None, dtype=object)
    around_norm = ((prev_block == "norm") & np.isin(next_block, LAYER_PARTS)) | ((next_block == "norm") & np.isin(prev_block, LAYER_PARTS))
    verdict[around_norm] = "norm"  # the residual add and the normalisation's elementwise steps
    conv_side = ((prev_block == "conv") & (next_block == "norm")) | ((prev_block == "norm") & (next_block == "conv"))
    verdict[conv_side] = "conv"  # a CNN's activation between its batch / group norm and the next convolution
    inside = (prev_block == next_block) & np.isin(prev_block, ["attention", "ffn", "lm_head", "conv", "norm"])
    verdict[inside] = prev_block[inside]
    # the logits after the lm_head (loss, softmax, sampling) up to the next anchor, even when that is
    # the next step's first norm (a serving step's embedding may be graph-replayed, with no op)
    verdict[(prev_block == "lm_head") & (next_block != "lm_head")] = LOGITS
    placed = np.full(len(a), None, dtype=object)
    placed[lane_order] = verdict[segment]
    return np.where(todo, placed, None)


def last_gemm_of_steps(k, gemm: np.ndarray, phase: np.ndarray, block: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Per kernel: True for the last GEMM of an inference step of a transformer (a step with
    attention kernels and no backward or optimizer work) on its device, when no weight shape
    placed it: a decoder's forward ends with the vocabulary projection (graph-replayed
    serving steps carry no shapes). A training step ends with weight gradients instead."""
    out = np.zeros(len(k), dtype=bool)
    owned = steps >= 0
    if not (owned & gemm).any():
        return out
    device = k["device"].to_numpy().astype(np.int64)
    key = (steps.astype(np.int64) << 16) ^ device
    training = np.isin(key, np.unique(key[owned & np.isin(phase, ["backward", "recompute", "optimizer"])]))
    has_attention = np.isin(key, np.unique(key[owned & (block == "attention")])) & ~training
    rows = np.flatnonzero(owned & gemm & has_attention)
    if not len(rows):
        return out
    start = k["start"].to_numpy()[rows]
    order = np.lexsort((start, key[rows]))
    last = rows[order][np.r_[key[rows][order][1:] != key[rows][order][:-1], True]]
    out[last[block[last] == DEFAULT_BLOCK]] = True
    return out


def after_final_norm(lane_order: np.ndarray, lane: np.ndarray, layer_work: np.ndarray, norm: np.ndarray) -> np.ndarray:
    """Per kernel: the nearest GEMM, convolution, attention or norm kernel before it on its
    stream is a norm. A trace without shapes (no widths) still shows a decoder's forward:
    its layers, the final normalisation, then the vocabulary projection and the sampling;
    a serving step's last GEMM right after a norm is that projection, not a layer's (a
    layer's GEMMs follow its attention or its activation, or a norm that opens a layer and
    is followed by more GEMMs of the same step)."""
    n = len(lane_order)
    out = np.zeros(n, dtype=bool)
    if not n:
        return out
    anchor = (layer_work | norm)[lane_order]
    index = np.where(anchor, np.arange(n), -1)
    # the last anchor strictly before each position, within its lane
    previous = np.r_[-1, np.maximum.accumulate(index)[:-1]]
    starts = np.r_[0, np.flatnonzero(lane[1:] != lane[:-1]) + 1]
    lane_start = starts[np.searchsorted(starts, np.arange(n), side="right") - 1]
    ok = previous >= lane_start
    out[lane_order] = ok & norm[lane_order][np.maximum(previous, 0)]
    return out


def same_step_as_last(lane_order: np.ndarray, lane: np.ndarray, mark: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Per kernel: the nearest `mark` kernel at or before it on its stream is of its step, or
    the kernel is of no step (a serving engine samples outside its model-step range)."""
    n = len(lane_order)
    out = np.zeros(n, dtype=bool)
    if not n:
        return out
    index = np.where(mark[lane_order], np.arange(n), -1)
    previous = np.maximum.accumulate(index)
    starts = np.r_[0, np.flatnonzero(lane[1:] != lane[:-1]) + 1]
    lane_start = starts[np.searchsorted(starts, np.arange(n), side="right") - 1]
    s = steps[lane_order]
    out[lane_order] = (previous >= lane_start) & ((s[np.maximum(previous, 0)] == s) | (s < 0))
    return out


def structural_blocks(trace, kernel_class: np.ndarray, phase: np.ndarray, block: np.ndarray, conv: np.ndarray,
                      widths: Widths | None, gemms_only: bool = False) -> np.ndarray:
    """`block` with the kernels left in `other` placed by structure (the module docstring);
    `gemms_only`: step 1 alone (the GEMMs' weight shapes)."""
    k = trace.kernels
    block = block.copy()
    names, autograd_node, dims, parent = _op_dims(trace)
    op = k["op"].to_numpy()
    gemm = (kernel_class == "gemm") & ~conv

    def fill(found: np.ndarray) -> None:
        hit = (block == DEFAULT_BLOCK) & (found != None)  # noqa: E711 (elementwise on an object array)
        block[hit] = found[hit]

    if gemms_only:  # before the layer-pattern inference; what it leaves, it leaves for good
        if widths is not None and len(names):
            fill(gemm_blocks(op, gemm, names, dims, widths))
        return block
    block[(block == DEFAULT_BLOCK) & conv] = "conv"
    block[(block == DEFAULT_BLOCK) & (phase == "optimizer")] = "optimizer"
    norm_like = (kernel_class == "norm") | (block == "norm")
    if widths is not None and len(names):
        known = np.where(gemm & np.isin(block, TRANSFORMER_BLOCKS), block, None)
        fill(enclosing_op_blocks(op, known, parent, autograd_node))
        found = tensor_blocks(op, dims, widths, block == DEFAULT_BLOCK)
        found[gemm & (found == LOGITS)] = "lm_head"  # a GEMM on the vocabulary width is the projection (its input gradient)
        fill(found)
        norm_like |= hidden_reductions(op, kernel_class, dims, trace.ops["concrete_inputs"].to_numpy(), widths.hidden)
    block[(block == DEFAULT_BLOCK) & norm_like] = "norm"
    order = np.lexsort((k["start"].to_numpy(), k["stream"].to_numpy(), k["device"].to_numpy()))
    lane = (k["device"].to_numpy()[order].astype(np.int64) << 32) ^ k["stream"].to_numpy()[order]
    steps = kernel_steps(trace, k)
    if widths is not None and widths.vocab:
        block[last_gemm_of_steps(k, gemm, phase, block, steps)] = "lm_head"
    elif widths is None:  # no shapes: the position says it, after the final norm (see after_final_norm)
        last = last_gemm_of_steps(k, gemm, phase, block, steps)
        block[last & after_final_norm(order, lane, gemm | conv | (kernel_class == "attention"), norm_like)] = "lm_head"
    anchor = np.where(gemm, np.where(np.isin(block, TRANSFORMER_BLOCKS), block, "other"), "").astype(object)
    anchor[conv] = "conv"
    anchor[(anchor == "") & (kernel_class == "attention") & (block == "attention")] = "attention"
    anchor[(anchor == "") & norm_like] = "norm"
    anchor[(anchor == "") & (block == "embedding")] = "embedding"
    todo = (block == DEFAULT_BLOCK) & (k["kind"].astype(str).to_numpy() == "kernel") & (anchor == "")
    if todo.any():
        found = between_anchors(order, lane, anchor, todo)
        # backward: after the lm_head's gradient GEMMs come their accumulation, not the logits
        found[(found == LOGITS) & np.isin(phase, ["backward", "recompute"])] = "lm_head"
        # the logits end where the next step begins: its input copies before its first anchor are not sampling
        found[(found == LOGITS) & ~same_step_as_last(order, lane, gemm & (block == "lm_head"), steps)] = None
        fill(found)
    return block
