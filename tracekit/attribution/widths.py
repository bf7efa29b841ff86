"""The model's widths, and which block a GEMM's weight belongs to by its shape.

A transformer's projections all share one dimension, the hidden size H; the other side of
each weight says what it is (per rank: tensor parallelism splits that side, never H):

- attention: q / k / v / fused qkv ([heads x head_dim, H], [kv_heads x head_dim, H], ...) and
  o ([H, heads x head_dim]);
- ffn: gate / up / fused gate_up ([I, H], [2I, H]) and down ([H, I]); a MoE router ([E, H]);
- lm_head: the vocabulary projection [V, H] (its logits' width is V).

The widths come from the model's config.json (`--model`), else from the trace itself: the
hidden size is the dimension most projection weights share; the intermediate width is the
one that leaves H in one projection and comes back in another, (down [H, I], up [I, H] or
gate_up [2I, H]), repeated per layer more than the query's; the vocabulary is a much wider
output that is not the FFN's. A GEMM's weight is found in its op's shapes: aten::linear names
it ([N, K]); an mm's operands [a, b] x [b, c] hold it as (b, c) in the forward and the input
gradient, as (a, c) in the weight gradient (A^T B), as (a, b) when the output is transposed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from tracekit.trace import Trace
from tracekit.trace.column_text import as_text, rows_in

# GEMM ops whose operands hold a weight: input positions of the two matrices (the weight in
# aten::linear is the second, as [out, in]).
MATRIX_INPUTS = {"aten::mm": (0, 1), "aten::addmm": (1, 2), "aten::matmul": (0, 1), "aten::bmm": (0, 1),
                 "aten::baddbmm": (1, 2), "aten::_scaled_mm": (0, 1)}
LINEAR_OPS = ("aten::linear",)
# the query's input (its last dim is the head dim, its head count precedes the sequence)
ATTENTION_OPS = ("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
                 "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention",
                 "aten::_flash_attention_forward", "aten::_efficient_attention_forward")
VOCAB_OVER_FFN = 2  # the vocabulary is at least this many times the widest FFN projection (inferred widths)


@dataclass(frozen=True)
class Widths:
    hidden: int
    attention: frozenset[int]  # the other side of attention projection weights (per rank)
    ffn: frozenset[int]  # the other side of FFN weights: I, 2I (gate_up), expert widths, router experts
    vocab: frozenset[int]  # the lm_head's output width (V, or V / tp)
    head_dim: int | None = None
    heads: frozenset[int] = frozenset()  # query and KV head counts per rank (rotary, attention reshapes)
    source: str = "trace"  # "model config" or "inferred from the trace's GEMM weight shapes"
    experts: frozenset[int] = frozenset()  # a mixture of experts' expert counts (the leading dim of its stacked weights)

    def block_of(self, pair: tuple[int, int]) -> str | None:
        """The block of a weight whose two dims are `pair`; None when it is not a projection."""
        a, b = pair
        if a != self.hidden and b != self.hidden:
            return None
        other = b if a == self.hidden else a
        for block, widths in (("lm_head", self.vocab), ("attention", self.attention), ("ffn", self.ffn)):
            if other in widths:
                return block
        return None

    def describe(self) -> str:
        def show(values):
            return "/".join(str(v) for v in sorted(values)) or "-"
        return (f"hidden {self.hidden}, attention {show(self.attention)}, ffn {show(self.ffn)}, "
                f"vocab {show(self.vocab)} ({self.source})")


def from_architecture(arch, tp: int = 1) -> Widths:
    """Per-rank widths of a tracekit.model.architecture.Architecture (read by attribute, so that
    attribution does not import the model stage): tensor parallelism splits every
    projection's non-hidden side."""
    tp = max(int(tp or 1), 1)
    heads, kv, hd, hidden = arch.heads, arch.kv_heads, arch.head_dim, arch.hidden
    q = heads * hd * (2 if getattr(arch, "attn_output_gate", False) else 1)
    attention = {q, heads * hd, kv * hd, q + 2 * kv * hd, heads * hd + 2 * kv * hd}
    ffn = {arch.intermediate, 2 * arch.intermediate}
    for width in (getattr(arch, "expert_intermediate", 0), getattr(arch, "shared_intermediate", 0)):
        if width:
            ffn |= {width, 2 * width}
    attention = {w // tp for w in attention if w and w % tp == 0}
    ffn = {w // tp for w in ffn if w and w % tp == 0} - attention
    if getattr(arch, "experts", 0):
        ffn.add(arch.experts)  # the router: replicated, never split
    vocab = {arch.vocab, -(-arch.vocab // tp)}
    experts = {arch.experts} if getattr(arch, "experts", 0) else set()
    return Widths(hidden, frozenset(attention), frozenset(ffn), frozenset(vocab), hd,
                  frozenset({max(heads // tp, 1), max(kv // tp, 1)}), "model config", frozenset(experts))


def _dims(value) -> list[int] | None:
    if isinstance(value, (list, tuple)) and value and all(isinstance(d, (int, np.integer)) for d in value):
        return [int(d) for d in value]
    return None


def weight_pairs(name: str, inputs) -> list[tuple[int, int]]:
    """Candidate weight shapes of one GEMM op, most likely first (see the module docstring)."""
    if not isinstance(inputs, (list, tuple)):
        return []
    if name in LINEAR_OPS:
        w = _dims(inputs[1]) if len(inputs) > 1 else None
        return [(w[0], w[1])] if w is not None and len(w) == 2 else []
    where = MATRIX_INPUTS.get(name)
    if where is None or len(inputs) <= max(where):
        return []
    x, y = _dims(inputs[where[0]]), _dims(inputs[where[1]])
    if x is None or y is None or len(x) < 2 or len(y) < 2:
        return []
    a, b, c = x[-2], x[-1], y[-1]
    return [(c, b), (c, a), (b, a)]


def gemm_weights(trace: Trace) -> Counter:
    """(out, in) weight shape -> number of ops: the forward projections, from aten::linear, or
    from the second operand of mm-like ops when the trace has no linear op (an mm's
    [K, N] operand is the weight transposed)."""
    ops = trace.ops
    if ops.empty:
        return Counter()
    names = as_text(ops["name"])  # (by category: astype(str) builds a string per row)
    dims = ops["input_dims"].to_numpy()
    linear = np.flatnonzero(rows_in(ops["name"], LINEAR_OPS))
    shapes = Counter()
    for row in linear:
        pairs = weight_pairs(names[row], dims[row])
        if pairs:
            shapes[pairs[0]] += 1
    if shapes:
        return shapes
    for row in np.flatnonzero(rows_in(ops["name"], MATRIX_INPUTS)):
        pairs = weight_pairs(names[row], dims[row])
        if pairs:
            shapes[pairs[0]] += 1
    return shapes


def attention_heads(trace: Trace) -> tuple[int | None, set[int]]:
    """(head dim, head counts) from the attention ops' query [B, heads, T, head_dim]."""
    ops = trace.ops
    if ops.empty:
        return None, set()
    names = as_text(ops["name"])
    dims = ops["input_dims"].to_numpy()
    head_dims, heads = Counter(), set()
    for row in np.flatnonzero(rows_in(ops["name"], ATTENTION_OPS))[:2000]:
        for operand in (dims[row] or [])[:3]:
            d = _dims(operand)
            if d is not None and len(d) == 4:
                head_dims[d[-1]] += 1
                # SDPA lays q out [B, heads, T, D]; the flash / efficient kernels [B, T, heads, D]
                heads.add(d[2] if "_flash_attention_forward" in names[row] or "_efficient_attention_forward" in names[row] else d[1])
    return (head_dims.most_common(1)[0][0] if head_dims else None), heads


def infer_widths(trace: Trace) -> Widths | None:
    """The model's widths from the trace's projection weights; None when it has too few."""
    shapes = gemm_weights(trace)
    if sum(shapes.values()) < 4:
        return None
    share = Counter()
    for (out, inn), n in shapes.items():
        for d in {out, inn}:
            share[d] += n
    hidden = max(share, key=lambda d: (share[d], d))
    into = Counter({o: n for (o, i), n in shapes.items() if i == hidden})  # [X, H]: reads the hidden state
    back = Counter({i: n for (o, i), n in shapes.items() if o == hidden and i != hidden})  # [H, X]: writes it
    head_dim, heads = attention_heads(trace)
    experts, expert_widths = stacked_experts(trace, hidden, shapes)
    if experts:
        # A mixture of experts: the FFN is its experts (and their router [E, H]); a dense
        # width that leaves H and comes back is then the attention's (q / o), unless more
        # projections go into it than come back (a shared expert's gate and up, or gate_up).
        back = Counter({x: n for x, n in back.items() if into.get(x, 0) + into.get(2 * x, 0) > n})
    # The FFN's width leaves H (up / gate_up) and comes back (down); the query's may too (o
    # from heads x head_dim != H): the FFN's is the one with more projections into it per layer.
    def ffn_score(x: int) -> tuple[int, int]:
        return into.get(x, 0) + into.get(2 * x, 0), x
    partners = [x for x in back if into.get(x) or into.get(2 * x)]
    intermediate = max(partners, key=ffn_score) if partners else None
    ffn = ({intermediate, 2 * intermediate} if intermediate else set()) | expert_widths | experts
    widest_ffn = max(ffn) if ffn else 2 * hidden
    vocab = {x for x in into if x >= VOCAB_OVER_FFN * widest_ffn and x not in ffn}
    vocab = {max(vocab)} if vocab else set()
    unit = head_dim or 64
    attention = {x for x, n in (into + back).items()
                 if x not in ffn and x not in vocab and x % unit == 0 and n >= 2}
    if not attention or not ffn:  # a transformer has both; square matmuls alone (an MLP, a benchmark) say nothing
        return None
    return Widths(hidden, frozenset(attention), frozenset(ffn), frozenset(vocab), head_dim,
                  frozenset(heads), "inferred from the trace's GEMM weight shapes", frozenset(experts))


# Ops that take a mixture of experts' stacked weights [E, X, Y] whole: the grouped GEMM
# (input 1), the gather of the routed experts' weights (input 0: HF's W[expert_ids]), and one
# expert's slice of them (input 0: HF's eager loop, W[expert_idx]).
STACKED_WEIGHT_INPUTS = {"aten::_grouped_mm": 1, "aten::_scaled_grouped_mm": 1, "aten::index": 0, "aten::index_select": 0,
                         "aten::select": 0}


def stacked_experts(trace: Trace, hidden: int, weights: Counter) -> tuple[set[int], set[int]]:
    """({E}, {expert widths}) of a mixture of experts: 3-D weights [E, X, Y] with H among X, Y,
    taken whole by a grouped GEMM, or gathered / sliced by index where a router weight [E, H]
    confirms E (a gather from any other 3-D tensor is not an expert's)."""
    ops = trace.ops
    experts, widths = set(), set()
    names, dims = as_text(ops["name"]), ops["input_dims"].to_numpy()
    routers = {out for (out, inn) in weights if inn == hidden}
    for row in np.flatnonzero(rows_in(ops["name"], STACKED_WEIGHT_INPUTS)):
        at = STACKED_WEIGHT_INPUTS[names[row]]
        w = _dims(dims[row][at]) if isinstance(dims[row], list) and len(dims[row]) > at else None
        if w is None or len(w) != 3 or hidden not in w[1:] or w[0] <= 1:
            continue
        if "grouped_mm" not in names[row] and w[0] not in routers:
            continue
        experts.add(w[0])
        widths.add(w[2] if w[1] == hidden else w[1])
    return experts, widths - {hidden}
