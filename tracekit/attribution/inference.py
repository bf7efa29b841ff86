"""Labels for kernels that no rule could see: from identical kernels, and from the layer
pattern around a GEMM.

Compiled graphs (torch.compile's `## Call CompiledFxGraph` regions), CUDA / HIP graph
replays and kernels launched before the capture carry no module frames and often no op,
so the context rules leave them in block `other` or phase `unknown`. Two general facts
still place them:

- Identical kernels (same name, grid and block) launched inside the capture run the same
  code for the same layer: a kernel with no context takes their phase or block, but only
  when all of them agree.
- A transformer layer repeats one pattern on each stream: the FFN's up (and gate)
  projection GEMMs are followed by the activation (GELU, SiLU, SwiGLU, ...), its down
  projection follows the activation; the attention projections sit next to the attention
  kernel. A GEMM with no other label takes the block its neighbours say, looking past the
  GEMMs of its own run (gate and up projections back to back) but not past another GEMM.
  The activation is read from the kernel's name or from the op that launched it (a GELU
  written out launches `aten::tanh` as a `vectorized_elementwise_kernel`); the attention
  kernel may be an eager attention core, a softmax with a GEMM on each side (QK^T, PV).
  Only GEMMs: a convolution (an implicit-GEMM conv kernel is classed gemm too) next to a
  SiLU is a VAE or U-Net block, not an FFN, so it is never relabelled; nor is any kernel's class.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.common.text_match import searches
from tracekit.trace import Trace
from tracekit.trace.column_text import category_text
from tracekit.trace.grouping import combine
from tracekit.attribution.rules import DEFAULT_BLOCK, UNKNOWN_PHASE
from tracekit.attribution.structure import structural_blocks
from tracekit.attribution.widths import Widths, infer_widths

ACTIVATION = re.compile(r"gelu|silu|swiglu|geglu|swish|relu|act_and_mul|_and_mul|glu_kernel|mish", re.I)
# Convolution kernels by name (cuDNN fprop / dgrad / wgrad and implicit-GEMM kernels, MIOpen
# igemm_* and naive_conv, CK grouped_conv, Winograd) or by the op that launched them.
CONVOLUTION = re.compile(r"conv|implicit_?gemm|igemm|winograd|fprop|dgrad|wgrad", re.I)
# activation ops by name: what a GEMM feeds in an FFN (a GEMM next to tanh / sigmoid gates, an
# LSTM's, is feed-forward work too)
ACTIVATION_OPS = re.compile(r"^aten::(gelu|silu|relu|relu6|tanh|sigmoid|mish|hardswish|glu|elu|selu|leaky_relu|softplus)_?$")
CORE_REACH = 3  # kernels between eager attention's softmax and its GEMMs (a mask, a position bias, a cast)
WINDOW = 8  # non-GEMM kernels looked at on each side (q/k norms, rotary and the KV-cache write sit between a QKV GEMM and attention)


def identical_signatures(k: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(name + launch configuration, name alone) codes per kernel: equal codes, identical kernels."""
    names = k["name"] if isinstance(k["name"].dtype, pd.CategoricalDtype) else k["name"].astype("category")
    name = names.cat.codes.to_numpy().astype(np.int64)
    full = combine([name, *(k[c].to_numpy() for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y"))])
    return full, name


def from_identical_kernels(labels: np.ndarray, blind: np.ndarray, signatures: tuple[np.ndarray, np.ndarray],
                           grid_known: np.ndarray, unset: str) -> np.ndarray:
    """`blind` kernels whose label is `unset` take the label that every identical kernel
    with context has, when they all have the same one. Identical means same name and
    launch configuration; a kernel whose configuration was not recorded (Kineto leaves it
    out for kernels launched before the capture) is compared by name."""
    todo = blind & (labels == unset)
    donors = ~blind & (labels != unset)
    if not todo.any() or not donors.any():
        return labels
    out = labels.copy()
    label_code, label_text = pd.factorize(labels)
    for sig, rows in ((signatures[0], todo & grid_known), (signatures[1], todo & ~grid_known)):
        if not rows.any():
            continue
        sig = sig - int(sig.min())  # name codes start at -1 (no name)
        # per signature: the smallest and largest donor label; one label when they agree
        lowest = np.full(int(sig.max()) + 1, len(label_text), dtype=np.int64)
        highest = np.full(int(sig.max()) + 1, -1, dtype=np.int64)
        np.minimum.at(lowest, sig[donors], label_code[donors])
        np.maximum.at(highest, sig[donors], label_code[donors])
        wanted = np.flatnonzero(rows)
        unanimous = (highest[sig[wanted]] >= 0) & (lowest[sig[wanted]] == highest[sig[wanted]])
        out[wanted[unanimous]] = np.asarray(label_text, dtype=object)[lowest[sig[wanted[unanimous]]]]
    return out


def convolutions(k: pd.DataFrame, op_names: pd.Series | None = None) -> np.ndarray:
    """Per kernel: is it a convolution, by its name or the name of the op that launched it."""
    names = k["name"].astype("category")
    by_code = np.r_[searches([u[:512] for u in category_text(names.cat.categories)], CONVOLUTION), False]
    conv = by_code[names.cat.codes.to_numpy()]
    if op_names is not None and len(op_names):
        ops = op_names.astype("category")
        op_conv = np.r_[searches([u[:512] for u in category_text(ops.cat.categories)], CONVOLUTION), False]
        op_code = ops.cat.codes.to_numpy()
        op = k["op"].to_numpy()
        conv |= np.where(op >= 0, op_conv[op_code[np.clip(op, 0, None)]], False)
    return conv


def op_activations(k: pd.DataFrame, op_names: pd.Series) -> np.ndarray:
    """Per kernel: launched by an activation op (aten::gelu, silu, relu, tanh, ...): the op tree
    says what a kernel named `vectorized_elementwise_kernel` computes."""
    op = k["op"].to_numpy()
    if not len(op_names) or not (op >= 0).any():
        return np.zeros(len(k), dtype=bool)
    ops = op_names.astype("category")
    by_code = np.r_[[bool(ACTIVATION_OPS.match(str(u)[:128])) for u in ops.cat.categories], False]
    return np.where(op >= 0, by_code[ops.cat.codes.to_numpy()[np.maximum(op, 0)]], False)


def attention_cores(kernel_class: np.ndarray, order: np.ndarray, lane: np.ndarray) -> np.ndarray:
    """Per kernel: a softmax with a GEMM at most CORE_REACH kernels before and after it on its
    stream: eager attention's QK^T, (mask / bias,) softmax, PV, whatever the kernels are named."""
    n = len(order)
    gemm = (kernel_class == "gemm")[order]
    softmax = (kernel_class == "softmax")[order]
    out = np.zeros(len(kernel_class), dtype=bool)
    if not softmax.any():
        return out
    near_before = np.zeros(n, dtype=bool)
    near_after = np.zeros(n, dtype=bool)
    for d in range(1, CORE_REACH + 1):
        same = np.r_[np.zeros(d, dtype=bool), lane[d:] == lane[:-d]]
        near_before |= same & np.r_[np.zeros(d, dtype=bool), gemm[:-d]]
        same_after = np.r_[lane[:-d] == lane[d:], np.zeros(d, dtype=bool)]
        near_after |= same_after & np.r_[gemm[d:], np.zeros(d, dtype=bool)]
    out[order] = softmax & near_before & near_after
    return out


def layer_pattern(k: pd.DataFrame, kernel_class: np.ndarray, block: np.ndarray, conv: np.ndarray | None = None,
                  op_activation: np.ndarray | None = None) -> np.ndarray:
    """Block of GEMMs left in `other`, from the activation / attention kernels next to them.
    Convolutions (`conv`, per kernel) are GEMM-class kernels that are never relabelled.
    `op_activation`: per kernel, launched by an activation op (op_activations)."""
    is_gemm = kernel_class == "gemm"
    todo = is_gemm & (block == DEFAULT_BLOCK)
    if conv is not None:
        todo &= ~conv
    if not todo.any():
        return block
    names = k["name"].astype("category")  # one search per distinct name
    act_by_code = np.array([bool(ACTIVATION.search(str(u)[:512])) for u in names.cat.categories] + [False], dtype=bool)
    activation = act_by_code[names.cat.codes.to_numpy()] & ~is_gemm
    if op_activation is not None:
        activation |= op_activation & ~is_gemm
    # Kernels in lane order (device, stream, start); a lane is a run of one (device, stream).
    order = np.lexsort((k["start"].to_numpy(), k["stream"].to_numpy(), k["device"].to_numpy()))
    lane = (k["device"].to_numpy()[order].astype(np.int64) << 32) ^ k["stream"].to_numpy()[order]
    attention = (kernel_class == "attention") | attention_cores(kernel_class, order, lane)
    args = (is_gemm[order], activation[order], attention[order], lane)
    positions = np.flatnonzero(todo[order])
    # a MoE router's GEMM is followed by the routing (top-k gating) kernels: ffn as well
    routing = (kernel_class == "routing") & ~is_gemm
    after = _signals(is_gemm[order], (activation | routing)[order], attention[order], lane, positions)
    n = len(order)
    before = _signals(*(a[::-1] for a in args), n - 1 - positions)  # the same walk, backwards
    out = block.copy()
    out[order[positions[(after == ACTIVATION_SEEN) | (before == ACTIVATION_SEEN)]]] = "ffn"
    out[order[positions[((after == ATTENTION_SEEN) | (before == ATTENTION_SEEN)) & (after != ACTIVATION_SEEN)
                        & (before != ACTIVATION_SEEN)]]] = "attention"
    return out


ACTIVATION_SEEN, ATTENTION_SEEN = 1, 2


def _next(flags: np.ndarray) -> np.ndarray:
    """Per position i (and one past the end): the first j >= i where flags[j], else len(flags)."""
    n = len(flags)
    index = np.where(flags, np.arange(n), n)
    return np.r_[np.minimum.accumulate(index[::-1])[::-1], n]


def _signals(gemm: np.ndarray, activation: np.ndarray, attention: np.ndarray, lane: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """For each GEMM at `positions` (kernels in lane order; `lane` changes value where a new
    lane begins): the first activation (ACTIVATION_SEEN)
    or attention kernel (ATTENTION_SEEN) after it within WINDOW non-GEMM kernels of its lane,
    skipping the GEMMs directly next to it but stopping at a GEMM further away; 0 for none."""
    n = len(gemm)
    run = np.r_[0, np.cumsum(np.diff(lane) != 0)]  # lanes numbered in this walk's order
    lane_end = np.r_[np.flatnonzero(np.diff(lane) != 0) + 1, n][run]  # one past each position's lane
    first = _next(~gemm)[positions + 1]  # past the GEMMs directly after it
    in_lane = first < lane_end[positions]
    first = np.where(in_lane, first, n)
    # the non-GEMM kernels from `first` on, up to the next GEMM, the lane's end or WINDOW of them
    limit = np.minimum(np.minimum(_next(gemm)[first], np.r_[lane_end, n][first]), first + WINDOW)
    signal = _next(activation | attention)[first]
    found = in_lane & (signal < limit)
    is_activation = np.r_[activation, False][np.where(found, signal, n)]
    return np.where(found, np.where(is_activation, ACTIVATION_SEEN, ATTENTION_SEEN), 0)


def infer_missing(trace: Trace, kernel_class: pd.Series, phase: np.ndarray, block: np.ndarray,
                  widths: Widths | None = None, conv: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Phase and block for kernels the rules left without one (see the module docstring), then
    the blocks the trace's structure gives (attribution.structure) to what is still `other`:
    GEMMs by their weight shape against `widths` (the model's, else inferred from the trace)."""
    k = trace.kernels
    if not len(k):
        return phase, block
    signatures = identical_signatures(k)
    blind = (k["launch"] < 0).to_numpy()
    grid_known = (k["grid_x"] >= 0).to_numpy()
    phase = from_identical_kernels(phase, blind, signatures, grid_known, UNKNOWN_PHASE)
    block = from_identical_kernels(block, blind, signatures, grid_known, DEFAULT_BLOCK)
    klass = np.asarray(kernel_class, dtype=object)
    conv = convolutions(k, trace.ops["name"]) if conv is None else conv  # (the caller's, made once)
    widths = widths if widths is not None else infer_widths(trace)
    # weight shapes first: they say what a GEMM is; the neighbours only what it sits next to
    block = structural_blocks(trace, klass, phase, block, conv, widths, gemms_only=True)
    block = layer_pattern(k, klass, block, conv, op_activations(k, trace.ops["name"]))
    block = structural_blocks(trace, klass, phase, block, conv, widths)
    return phase, block
