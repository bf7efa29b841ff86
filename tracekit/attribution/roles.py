"""Blocks by role: the last attribution pass, keyed on the op that launched each kernel.

The structure pass (attribution.structure, step 4) places a small kernel by its position
between kernels of certain block, so a residual add, an adaLN modulation or a gate that sits
beside a normalisation became `norm`, and such kernels with no anchor around them stayed
`other`. Position says where a kernel ran, not what it does. This pass reads what it does
from its launching aten op (its name, its tensors' shapes, the autograd node above it) and
keeps block `norm` for normalisation work only:

- certain normalisation: a block rule placed it in `norm` (an op named *_norm in its op tree,
  a Norm module's frame, a fused norm kernel by class: Inductor's fused rsqrt + mean);
- a normalisation written out in Python (HF's RMSNorm: pow, mean, add eps, rsqrt, mul, mul
  by the weight, casts to float32 and back), recognised by its ops and shapes: a statistic
  op (rsqrt, var, std, var_mean; or the autograd node of one in the backward), a reduction
  over the hidden width, the hidden state squared (pow), an elementwise op on per-row
  statistics (a tensor [..., 1]: adding eps, `x * rstd`, `x - mean`), the affine weight
  (a [..., H] tensor times a 1-D [H] one), and a dtype cast next to such a kernel.

A residual add (two tensors of one shape [..., H]), an adaLN modulation or a gate (a [..., T, H]
tensor with a broadcast [..., 1, H] one: `x * (1 + scale) + shift`, `x + y * gate`) is
elementwise wherever position put it (beside a norm, or between two GEMMs of one attention
or FFN), when its op is a module-level op (no aten op above it: a bias add inside
aten::linear is its GEMM's) and no block rule placed it (a module frame, a range, an op
name in its tree: those are the op tree saying whose it is).

A backward kernel takes the block of the forward op whose autograd node launched it (the
node carries that op's sequence number): the gradient of the RMSNorm's pow is norm, the
accumulated input gradient of the q / k / v projections attention.

Every other kernel this pass looks at (in `norm` by position only, or in `other`) that an op
launched and that does elementwise or copy work gets block `elementwise`: residual adds,
modulations and gates, activations and copies outside any layer part. Kernels the earlier
passes put in attention / ffn / lm_head (an activation between the FFN's GEMMs, rotary on
[B, heads, T, D] tensors) are left there: the op tree or the tensors already said so.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.attribution.inference import from_identical_kernels, identical_signatures
from tracekit.attribution.rules import DEFAULT_BLOCK
from tracekit.attribution.structure import AUTOGRAD_NODE, hidden_reductions, reduced_dims
from tracekit.trace.grouping import combine

ELEMENTWISE = "elementwise"
# ops that compute a normalisation's statistics, and the autograd nodes of their backward
STATISTIC_OPS = re.compile(r"^aten::(rsqrt|var|var_mean|std|std_mean|linalg_vector_norm|norm)_?$")
STATISTIC_NODES = re.compile(r"^(Rsqrt|Var|VarMean|Std|StdMean|LinalgVectorNorm|Norm)Backward\d*$")
# elementwise arithmetic that can combine a row with its statistics (a random fill of a
# [..., 1] tensor is no normalisation)
ARITHMETIC = re.compile(r"^aten::(add|sub|mul|div|rsqrt|sqrt|reciprocal|pow|addcmul|addcdiv)_?$")
# GEMMs and convolutions: the kernels they launch (a bias add, a cast of the weight) are theirs
GEMM_OPS = re.compile(r"^aten::(mm|addmm|bmm|baddbmm|matmul|linear|_scaled_mm|addmv|mv|\w*conv\w*)$")
CONV_OPS = re.compile(r"^aten::\w*conv\w*$")
POW = re.compile(r"^aten::pow_?$")
CASTS = re.compile(r"^aten::(_to_copy|to|copy_|type_as)$")
# kernel classes that are never elementwise work: a GEMM or convolution, an attention kernel,
# a collective or MoE routing keeps its block (an unplaced GEMM stays `other`)
NOT_ROLE_CLASSES = ("gemm", "attention", "collective", "routing")
MAX_DEPTH = 64


def _shapes(inputs) -> list[list[int]]:
    """The shapes of an op's tensor inputs (scalars and lists of tensors left out)."""
    out = []
    for value in (inputs if isinstance(inputs, (list, tuple)) else [])[:8]:
        if isinstance(value, (list, tuple)) and value and all(isinstance(d, (int, np.integer)) for d in value):
            out.append([int(d) for d in value])
    return out


def normalisation_form(name: str, node: str, inputs, hidden: int | None) -> bool:
    """Is an op (its name, the autograd node above it, its input shapes) a step of a
    normalisation written out in Python? See the module docstring."""
    if STATISTIC_OPS.match(name) or STATISTIC_NODES.match(node):
        return True
    shapes = _shapes(inputs)
    if not shapes:
        return False
    if hidden and POW.match(name) and shapes[0][-1] == hidden:
        return True  # the hidden state squared, for its mean
    if not ARITHMETIC.match(name):
        return False
    stats = [s for s in shapes if len(s) >= 2 and s[-1] == 1 and any(d > 1 for d in s[:-1])]
    rows = [s for s in shapes if len(s) >= 2 and s[-1] > 1]
    if stats and all(len(r) == len(stats[0]) and r[:-1] == stats[0][:-1] for r in rows):
        return True  # per-row statistics: mean + eps, rsqrt, x * rstd, x - mean
    if hidden and len(shapes) == 2 and name.startswith("aten::mul"):
        a, b = shapes
        weight = [hidden]
        return (a == weight and len(b) >= 2 and b[-1] == hidden) or (b == weight and len(a) >= 2 and a[-1] == hidden)
    return False


ROLE_OPS = re.compile(r"^aten::(add|sub|mul|addcmul|div)_?$")


def hidden_role_form(name: str, inputs, hidden: int | None) -> bool:
    """Is an op a residual add, a modulation or a gate on the hidden state? See the module docstring."""
    if not hidden or not ROLE_OPS.match(name):
        return False
    shapes = [s for s in _shapes(inputs) if len(s) >= 2 and s[-1] == hidden]
    if len(shapes) < 2 or any(len(s) != len(shapes[0]) for s in shapes):
        return False
    full = max(shapes, key=lambda s: int(np.prod(s)))
    # equal shapes (residual), or broadcast along the rows only (modulation, gate)
    return all(all(d == f or d == 1 for d, f in zip(s[:-1], full[:-1])) for s in shapes) and int(np.prod(full[:-1])) > 1


def _module_level(aten: np.ndarray, parent: np.ndarray, node: np.ndarray, transparent: np.ndarray | None = None) -> np.ndarray:
    """Per op row: no aten op (`aten`: per row, its name starts with `aten::`) encloses it
    below the nearest autograd node (or the top); `transparent` ops (per row) do not count
    as enclosing ones."""
    out = np.ones(len(aten), dtype=bool)
    cur = parent.copy()
    todo = np.arange(len(aten))
    aten = aten.copy()
    if transparent is not None:
        aten &= ~transparent
    for _ in range(MAX_DEPTH):
        live = cur[todo] >= 0
        todo = todo[live]
        if not len(todo):
            break
        up = cur[todo]
        stop = node[up]
        out[todo[~stop & aten[up]]] = False
        cont = ~stop & ~aten[up]
        todo = todo[cont]
        cur[todo] = parent[up[cont]]
    return out


def hidden_mean(name: str, inputs, concrete, hidden: int) -> bool:
    """A mean over the hidden width (an RMSNorm's or LayerNorm's statistics written out)."""
    if not name.startswith("aten::mean"):
        return False
    shapes = _shapes(inputs)
    if not shapes or len(shapes[0]) < 2 or shapes[0][-1] != hidden:
        return False
    reduced = reduced_dims(concrete)
    return reduced is None or -1 in reduced or len(shapes[0]) - 1 in reduced


_BACKWARD_NODE = re.compile(r"Backward\d*$")


def _autograd_nodes(names: np.ndarray, parent: np.ndarray, is_node: np.ndarray) -> np.ndarray:
    """Per op row: the name of the nearest enclosing op that is an autograd node ('' if none).
    `is_node`: per op row, its name (cut to 256 characters) matches _BACKWARD_NODE."""
    out = np.full(len(names), "", dtype=object)
    out[is_node] = names[is_node]
    cur = np.where(is_node, -1, parent)
    todo = np.flatnonzero(~is_node)
    for _ in range(MAX_DEPTH):
        live = cur[todo] >= 0
        todo, up = todo[live], cur[todo][live]
        if not len(todo):
            break
        hit = is_node[up]
        out[todo[hit]] = names[up[hit]]
        cur[todo[hit]] = -1
        cur[todo[~hit]] = parent[up[~hit]]
        todo = todo[~hit]
    return out


def _enclosing(flag: np.ndarray, parent: np.ndarray, node: np.ndarray) -> np.ndarray:
    """Per op row: `flag` on the op itself or on an op enclosing it, below the nearest autograd
    node (which encloses a whole recomputed layer, not one module's work)."""
    out = flag.copy()
    cur = np.where(node, -1, parent)
    todo = np.flatnonzero(~out & (cur >= 0))
    for _ in range(MAX_DEPTH):
        if not len(todo):
            break
        up = cur[todo]
        stop = node[up]
        out[todo[~stop & flag[up]]] = True
        go = ~stop & ~flag[up] & (parent[up] >= 0)
        todo = todo[go]
        cur[todo] = parent[up[go]]
    return out


def role_blocks(trace, kernel_class: np.ndarray, block: np.ndarray, rule_block: np.ndarray, hidden: int | None,
                phase: np.ndarray | None = None) -> np.ndarray:
    """`block` with `norm` kept for normalisation work, and the elementwise / copy kernels that
    position alone placed, or nobody placed, given the block of their role (module docstring)."""
    k = trace.kernels
    op = k["op"].to_numpy()
    candidate = (op >= 0) & (k["kind"].astype(str).to_numpy() == "kernel") & ~np.isin(kernel_class, NOT_ROLE_CLASSES)
    looked = candidate & np.isin(block, ["norm", DEFAULT_BLOCK]) & (rule_block != "norm")
    # in attention / ffn by position or shape only: no rule (frame, range, op name) placed it
    placed = candidate & np.isin(block, ["attention", "ffn"]) & (rule_block == DEFAULT_BLOCK)
    if not (looked | placed).any():
        return block
    ops = trace.ops
    cats = ops["name"] if isinstance(ops["name"].dtype, pd.CategoricalDtype) else ops["name"].astype("category")
    text = [str(c)[:256] for c in cats.cat.categories] + [""]
    codes = cats.cat.codes.to_numpy()
    names = np.array(text, dtype=object)[codes]
    node = np.array([bool(AUTOGRAD_NODE.search(t)) for t in text], dtype=bool)[codes]
    parent = ops["parent"].to_numpy() if "parent" in ops else np.full(len(ops), -1)
    # (each regex and prefix test once per distinct name, then spread to the op rows by code)
    nodes = _autograd_nodes(names, parent, np.array([bool(_BACKWARD_NODE.search(t)) for t in text], dtype=bool)[codes])
    aten = np.array([t.startswith("aten::") for t in text], dtype=bool)[codes]
    dims, concrete = ops["input_dims"].to_numpy(), ops["concrete_inputs"].to_numpy()
    gemm = np.array([bool(GEMM_OPS.match(t)) for t in text], dtype=bool)[codes]
    cast = np.array([bool(CASTS.match(t)) for t in text], dtype=bool)[codes]
    # the ops of the candidates and every op above them up to their autograd node
    wanted = np.zeros(len(ops), dtype=bool)
    cur = np.unique(op[looked | placed])
    for _ in range(MAX_DEPTH):
        cur = cur[(cur >= 0) & ~wanted[np.maximum(cur, 0)]]
        if not len(cur):
            break
        wanted[cur] = True
        cur = np.unique(np.where(node[cur], -1, parent[cur]))
    form = np.zeros(len(ops), dtype=bool)
    # an op's form depends only on its name, node and recorded inputs; the parser shares one
    # object per distinct inputs list, so layers repeating the same op are judged once
    # (grouped by name code, node and the identity of the two lists, with no Python step per op)
    rows = np.flatnonzero(wanted)
    group = combine([codes[rows], pd.factorize(nodes[rows])[0], *(np.fromiter(map(id, column[rows]), dtype=np.int64, count=len(rows))
                                                                 for column in (dims, concrete))])
    first = rows[np.unique(group, return_index=True)[1]].tolist()
    judged = np.array([normalisation_form(names[row], nodes[row], dims[row], hidden)
                       or (hidden is not None and hidden_mean(names[row], dims[row], concrete[row], hidden)) for row in first], dtype=bool)
    form[rows] = judged[group]
    norm_op = _enclosing(form, parent, node)[np.maximum(op, 0)]
    under_gemm = _enclosing(gemm, parent, node)[np.maximum(op, 0)]
    conv = np.array([bool(CONV_OPS.search(t)) for t in text], dtype=bool)[codes]
    under_conv = looked & _enclosing(conv, parent, node)[np.maximum(op, 0)]  # a convolution's own work
    looked &= ~under_gemm
    placed &= ~under_gemm
    normal = (looked | placed) & (norm_op | (kernel_class == "norm"))
    if hidden:
        normal |= looked & hidden_reductions(op, kernel_class, dims, concrete, hidden)
    # a dtype cast right before or after a normalisation kernel on its stream is the
    # normalisation's own (RMSNorm computes in float32 and casts back)
    certain = (rule_block == "norm") | (block == "norm") & ~looked | normal
    order = np.lexsort((k["start"].to_numpy(), k["stream"].to_numpy(), k["device"].to_numpy()))
    lane = (k["device"].to_numpy()[order].astype(np.int64) << 32) ^ k["stream"].to_numpy()[order]
    c = certain[order]
    beside = (np.r_[False, lane[1:] == lane[:-1]] & np.r_[False, c[:-1]]) | (np.r_[lane[1:] == lane[:-1], False] & np.r_[c[1:], False])
    near = np.zeros(len(k), dtype=bool)
    near[order] = beside
    # only a module-level cast of the hidden state: a scalar wrapped into a tensor for an add
    # is that add's, and its form decides
    top = _module_level(aten, parent, node)
    hidden_cast = np.zeros(len(ops), dtype=bool)
    for row in np.flatnonzero(wanted & cast & _module_level(aten, parent, node, cast)):
        shapes = _shapes(dims[row])
        hidden_cast[row] = bool(hidden) and bool(shapes) and len(shapes[0]) >= 2 and shapes[0][-1] == hidden
    normal |= (looked | placed) & hidden_cast[np.maximum(op, 0)] & near
    out = block.copy()
    out[normal] = "norm"
    out[looked & ~normal] = ELEMENTWISE
    # the backward of a forward op is that op's block (its autograd node's sequence number)
    backward = backward_blocks(ops, op, out, parent, node)
    # (backward kernels only: a checkpointed layer's recomputed forward runs inside the
    # autograd node that unpacked its saved tensor, and is not that node's gradient)
    in_backward = np.ones(len(k), dtype=bool) if phase is None else np.asarray(phase) == "backward"
    take = (looked | placed) & ~normal & in_backward & (backward != None)  # noqa: E711 (elementwise on an object array)
    out[take] = backward[take]
    normal |= take & (backward == "norm")
    out[under_conv] = "conv"
    # residual adds, modulations and gates that position put in attention / ffn
    if hidden and (placed & ~normal & ~take).any():
        role = np.zeros(len(ops), dtype=bool)
        for row in np.unique(op[placed & ~normal & ~take]):
            role[row] = top[row] and hidden_role_form(names[row], dims[row], hidden)
        out[placed & ~normal & ~take & role[np.maximum(op, 0)]] = ELEMENTWISE
    return _blind_again(k, kernel_class, out, rule_block)


FORWARD_BLOCKS = ("norm", "attention", "ffn", "lm_head", "logits", "embedding")


def backward_blocks(ops: pd.DataFrame, op: np.ndarray, block: np.ndarray, parent: np.ndarray, node: np.ndarray) -> np.ndarray:
    """Per kernel: the block of the forward op whose autograd node launched it (None where
    none, or where that op's kernels are of several blocks). The autograd engine gives a node
    the sequence number of the forward op that made it (Kineto's `Sequence number`), so the
    gradient of an RMSNorm's pow or of its casts is the norm's backward, the gradient
    accumulation of the q / k / v projections' inputs the attention's, whatever their shapes."""
    none = np.full(len(op), None, dtype=object)
    if "sequence" not in ops or not len(ops):
        return none
    seq, pid = ops["sequence"].to_numpy(), ops["pid"].to_numpy().astype(np.int64)
    # forward ops' blocks: a kernel's block goes to its op and the ops enclosing it below
    # module level (the sequence number is the outermost dispatched op's: aten::to for a
    # cast's aten::copy_, aten::linear for its mm)
    codes = {name: i for i, name in enumerate(FORWARD_BLOCKS)}
    seen = np.zeros((len(ops), len(FORWARD_BLOCKS)), dtype=bool)
    for name, code in codes.items():
        cur = np.unique(op[(block == name) & (op >= 0)])
        for _ in range(MAX_DEPTH):
            cur = cur[(cur >= 0)]
            cur = cur[~node[cur] & ~seen[cur, code]]
            if not len(cur):
                break
            seen[cur, code] = True
            cur = np.unique(parent[cur])
    one = seen.sum(axis=1) == 1
    forward = {}
    for row in np.flatnonzero(one & (seq >= 0) & ~node):
        forward[(int(pid[row]), int(seq[row]))] = FORWARD_BLOCKS[int(np.argmax(seen[row]))]
    if not forward:
        return none
    node_block = np.full(len(ops), None, dtype=object)
    for row in np.flatnonzero(node & (seq >= 0)):
        node_block[row] = forward.get((int(pid[row]), int(seq[row])))
    # the nearest enclosing autograd node of each op (PowBackward0 inside evaluate_function's:
    # both carry the sequence number)
    nearest = np.where(node, np.arange(len(ops)), -1)
    cur = parent.copy()
    todo = np.flatnonzero(~node)
    for _ in range(MAX_DEPTH):
        todo = todo[cur[todo] >= 0]
        if not len(todo):
            break
        up = cur[todo]
        hit = node[up]
        nearest[todo[hit]] = up[hit]
        todo = todo[~hit]
        cur[todo] = parent[up[~hit]]
    by_op = np.where(nearest >= 0, node_block[np.maximum(nearest, 0)], None)
    return np.where(op >= 0, by_op[np.maximum(op, 0)], None)


def _blind_again(k, kernel_class: np.ndarray, block: np.ndarray, rule_block: np.ndarray) -> np.ndarray:
    """Kernels with no launch (before the capture) in `norm` took it from identical kernels
    (attribution.inference) before this pass corrected those: they take their identical
    kernels' block again, where those now agree, else keep `norm`."""
    redo = (k["launch"].to_numpy() < 0) & (block == "norm") & (rule_block != "norm") & (kernel_class != "norm")
    if not redo.any():
        return block
    labels = block.copy()
    labels[redo] = DEFAULT_BLOCK
    blind = k["launch"].to_numpy() < 0
    again = from_identical_kernels(labels, blind, identical_signatures(k), (k["grid_x"] >= 0).to_numpy(), DEFAULT_BLOCK)
    out = block.copy()
    out[redo] = np.where(again[redo] != DEFAULT_BLOCK, again[redo], "norm")
    return out
