"""Chains of small elementwise kernels a fusion would remove: eager PyTorch runs a written-out
activation (GPT-2's NewGELU: 8 kernels), a written-out RMSNorm (cast, pow, mean, add, rsqrt,
mul, mul), an adaLN modulate `x * (1 + scale) + shift` with its gate and residual add, as one
kernel per op, each reading its inputs from memory and writing its output back. A fused kernel
(torch.compile, or a hand-written one) reads the chain's external inputs once and writes its
final output once.

Found from structure, not kernel names (Triton's are generated):
- a link is the only kernel of its op, costed from the op's shapes as vector or memory work
  (no matmul: a GEMM with its activation in the epilogue is matrix work, and breaks a chain),
  whose tensor inputs broadcast to one shape and which writes that shape (pointwise) or that
  shape less its last axis of at most MAX_ROW (a row reduction: RMSNorm's mean(-1), which a
  fused kernel does in the same pass). A compiler's kernel (costed from its Inductor
  arguments) is already fused; an op on a transposed layout is waste_strided's (its fix is
  the layout), and ends a chain; an eager optimizer's steps are left to their own fix; a cast
  (copy_ between two dtypes) is a link too, so HF's RMSNorm (cast up, pow .. mul, cast down,
  mul(weight)) is one chain with one fix (analysis.waste offers repeated casts here before
  the casts row takes what no chain holds);
- a chain is links that follow each other on one stream, launched from one thread in one
  step, each taking as an input a tensor of the bytes its predecessor wrote (Kineto records
  no tensor ids: the sizes are the evidence that it consumes what the previous produced);
- a chain counts from MIN_LINKS kernels, and only when the same op sequence on the same
  shapes recurs (per layer or per step): structure, not a one-off.

Bytes moved: what the separate kernels' costs say they moved. Bytes needed: the first
kernel's reads, then each later kernel's reads less the tensor its predecessor handed it,
and the last kernel's writes, with an intermediate's writes where it may be read after the
chain (see bytes_needed). A tensor two kernels of the chain read (NewGELU reads x three
times) counts each time, as without tensor ids we cannot tell it from another of its shape:
the needed bytes are an upper bound and the waste a lower bound. These kernels are bound by
memory (one FLOP per element), so their time scales with their bytes: the time a fusion
saves is the chain's time x (1 - needed / moved), and that is the row's time.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from tracekit.analysis.waste_copies import copy_kind
from tracekit.analysis.waste_row import row
from tracekit.analysis.waste_strided import strided_input
from tracekit.costs.cost import CostError
from tracekit.costs.inputs import OpInputs
from tracekit.trace.grouping import combine

if TYPE_CHECKING:
    from tracekit.analysis.measured import Measured

# Three kernels, two hand-offs: fusing saves at least two writes and two reads of an
# intermediate (half the traffic of three unary ops). A pair (bias + activation, add + cast)
# is everywhere in eager code and saves one round trip: too small to name as a cause.
MIN_LINKS = 3
REPEATS = 2  # the same chain (ops and shapes) at least twice: per layer or per step
# a row reduction a fused kernel does in the same pass: over a hidden dimension (RMSNorm's
# mean(-1)), at most 16 Ki wide; an argmax over a 128 Ki vocabulary is a reduction of its own
MAX_ROW = 1 << 14
ELEMENT_SIZES = (1, 2, 4, 8)  # bytes per element an output may have (bool .. fp64)
FIX = "fuse the chain with torch.compile (or a fused kernel: one read of its inputs, one write of its output)"


def link_inputs(x: OpInputs, written: float) -> list[tuple[float, float]] | None:
    """(dense bytes, bytes read) of each tensor input when the op is pointwise or a row
    reduction writing `written` bytes; None otherwise."""
    tensors = []
    for i in x.tensor_indices():
        shape = x.shape(i)
        if len(shape) > 0:
            tensors.append((i, shape))
    if not tensors:
        return None
    try:
        out = np.broadcast_shapes(*(tuple(s) for _, s in tensors))
    except ValueError:  # shapes that do not broadcast: not elementwise (a batch norm's [C] against [N, C, H, W])
        return None
    n = math.prod(out)
    sizes = {n * e for e in ELEMENT_SIZES}
    if len(out) and 1 < out[-1] <= MAX_ROW:
        sizes |= {n // out[-1] * e for e in ELEMENT_SIZES}
    if written not in sizes:
        return None
    return [(x.dense_nbytes(i), x.nbytes(i)) for i, _ in tensors]


def link(dims: Any, types: Any, concrete: Any, strides: Any, written: float) -> list[tuple[float, float]] | None:
    """link_inputs of one op's recorded inputs; None for a strided layout (its own row, with
    its own fix) and for inputs that cannot be read."""
    if strided_input(dims, strides) is not None:
        return None
    try:
        return link_inputs(OpInputs(dims, types, concrete, None, strides), written)
    except CostError:
        return None


def candidates(a: Measured, free: np.ndarray) -> np.ndarray:
    """Kernels that may be links, before their op's shapes are read."""
    k = a.kernels
    op = k["op"].to_numpy()
    read, written = k["bytes_read"].to_numpy(np.float64), k["bytes_written"].to_numpy(np.float64)
    ok = free & (op >= 0) & k["cost_kind"].isin(["vector", "memory"]).to_numpy()
    ok &= ~k["kernel_class"].isin(["gemm", "attention"]).to_numpy()
    ok &= (k["cost_source"] != "Inductor kernel arguments").to_numpy()  # a compiler's kernel is fused already
    ok &= (read > 0) & (written > 0)
    # an eager optimizer's per-parameter mul_ / add_ chains are another fix (a foreach or fused
    # optimizer: one launch over all parameters), not a fusion of one tensor's ops
    ok &= (k["phase"] != "optimizer").to_numpy()
    kernels = (k["kind"] == "kernel").to_numpy() & (op >= 0)
    if not ok.any():  # no kernel with a costed op (an Nsight trace without shapes): nothing to chain
        return ok
    per_op = np.bincount(op[kernels], minlength=int(op.max()) + 1)
    return ok & (per_op[np.maximum(op, 0)] == 1)  # one kernel per op: eager's pattern


def chains(a: Measured, free: np.ndarray) -> tuple[list[list[int]], dict[int, list[tuple[float, float]]]]:
    """Runs of links (kernel rows, in stream order) of MIN_LINKS or more, and each link op's inputs."""
    k, ops = a.kernels, a.trace.ops
    op = k["op"].to_numpy()
    ok = candidates(a, free)
    if not ok.any():  # no link (an Nsight export has no ops to read)
        return [], {}
    written = k["bytes_written"].to_numpy(np.float64)
    inputs, dense = link_ops(a, ok, op, written)
    tid = ops["tid"].to_numpy()
    step = k["step"].to_numpy() if "step" in k else np.zeros(len(k), dtype=np.int64)
    stream = combine([k["device"].factorize()[0], k["stream"].factorize()[0]])  # any dtype, NaN included
    kernels = np.flatnonzero((k["kind"] == "kernel").to_numpy())
    # every stream's kernels in start order, one stream after the other (stable: by stream, then start)
    order = kernels[np.lexsort((k["start"].to_numpy()[kernels], stream[kernels]))]
    prev, cur = order[:-1], order[1:]
    # kernel `cur` continues the run of `prev`: both links, on one stream, thread and step, and
    # an input of `cur`'s op of exactly the bytes `prev` wrote (arrays, not a test per pair)
    goes_on = ok[prev] & ok[cur] & (stream[prev] == stream[cur]) & (step[prev] == step[cur])
    goes_on &= tid[np.maximum(op[prev], 0)] == tid[np.maximum(op[cur], 0)]
    goes_on &= (dense[cur] == written[prev][:, None]).any(axis=1)
    starts = np.flatnonzero(~np.concatenate([[False], goes_on]))  # where each run (or lone kernel) begins
    lengths = np.diff(np.append(starts, len(order)))
    out = [order[b:b + n].tolist() for b, n in zip(starts.tolist(), lengths.tolist()) if n >= MIN_LINKS and ok[order[b]]]
    return out, inputs


def link_ops(a: Measured, ok: np.ndarray, op: np.ndarray, written: np.ndarray
             ) -> tuple[dict[int, list[tuple[float, float]]], np.ndarray]:
    """Each link op's inputs (link(): (dense bytes, bytes read) per tensor input), and per
    kernel row its inputs' dense bytes (NaN-padded; all NaN where not a link). A candidate whose
    op is no link leaves `ok`. Judged once per distinct (inputs lists, bytes written): the
    parser shares one object per distinct inputs list."""
    columns = [a.trace.ops[c].to_numpy() for c in ("input_dims", "input_types", "concrete_inputs", "input_strides")]
    rows_ = np.flatnonzero(ok)
    of = op[rows_]
    ids = [np.fromiter(map(id, c[of]), dtype=np.int64, count=len(of)) for c in columns]
    group = combine(ids + [written[rows_].view(np.int64)]) if len(rows_) else np.zeros(0, dtype=np.int64)
    _, first, at = np.unique(group, return_index=True, return_inverse=True)
    dims, types, concrete, strides = columns
    judged = [link(dims[o], types[o], concrete[o], strides[o], float(written[r]))
              for o, r in zip(of[first].tolist(), rows_[first].tolist())]
    good = np.array([j is not None for j in judged], dtype=bool)
    widest = max((len(j) for j in judged if j is not None), default=1)
    sizes = np.full((len(judged), widest), np.nan)
    for g, j in enumerate(judged):
        if j is not None:
            sizes[g, :len(j)] = [d for d, _ in j]
    ok[rows_[~good[at]]] = False
    dense = np.full((len(ok), widest), np.nan)
    dense[rows_] = sizes[at]
    dense[~ok] = np.nan
    inputs = {o: judged[g] for o, g in zip(of.tolist(), at.tolist()) if good[g]}
    return inputs, dense


def bytes_needed(run: list[int], op: np.ndarray, read: np.ndarray, written: np.ndarray,
                 inputs: dict[int, list[tuple[float, float]]], casts: set[int] = frozenset()) -> float:
    """The first kernel's reads, each later kernel's reads less the input its predecessor
    handed it (as its cost counted it), and the last kernel's writes; plus the writes of a
    join: an intermediate that reads a second large tensor from outside after the chain read
    one (a residual add merges the block's output into the residual stream, and its sum is the
    stream the next layer reads again: a fused kernel writes it too; without tensor ids we
    cannot tell it from a temporary, so it counts). An intermediate reading the chain's first
    large input (adaLN's `mul(ln(x), 1 + scale)` after `add(scale, 1)`) merges nothing. Large:
    at least a quarter of the chain's largest write (an fp32 activation against its fp8 read;
    a [1, 1, H] shift against [1, S, H] is not). A later read of a tensor of exactly the size a
    cast in the chain wrote (`casts`: their ops), other than the hand-off, is that cast's output
    read again (HF's RMSNorm reads its fp32 copy of x in pow and in mul): inside a fused kernel,
    not read from memory."""
    large = float(written[run].max()) / 4
    needed = float(read[run[0]] + written[run[-1]])
    if len(run) > 1 and read[run[0]] >= 2 * written[run[0]]:  # a first link that merges two streams
        needed += float(written[run[0]])
    streams = 1 if read[run[0]] >= large else 0
    recast: set[float] = set()  # what the casts before the predecessor wrote
    for j, (prev, i) in enumerate(zip(run, run[1:]), start=1):
        if j >= 2 and int(op[run[j - 2]]) in casts:
            recast.add(float(written[run[j - 2]]))
        handed_read = max(r for dense, r in inputs[int(op[i])] if dense == written[prev])
        outside = max(float(read[i]) - handed_read, 0.0)
        if outside in recast:
            continue
        needed += outside
        if outside >= large:
            if streams and j < len(run) - 1:
                needed += float(written[i])
            streams += 1
    return needed


def cast_ops(a: Measured, found: list[list[int]]) -> set[int]:
    """The ops of the chains' links that are casts (waste_copies.copy_kind: a source and a
    destination of one shape and two dtypes, no arithmetic)."""
    ops, op = a.trace.ops, a.kernels["op"].to_numpy()
    flops = a.kernels["flops"].to_numpy(np.float64)
    dims, types, strides = (ops[c].to_numpy() for c in ("input_dims", "input_types", "input_strides"))
    out = set()
    seen: dict[tuple, bool] = {}  # the parser shares one object per distinct inputs list
    for o in {int(op[i]) for r in found for i in r if flops[i] == 0}:
        key = (id(dims[o]), id(types[o]), id(strides[o]))
        if key not in seen:
            kind = copy_kind(dims[o], types[o], strides[o])
            seen[key] = kind is not None and kind[0] == "cast"
        if seen[key]:
            out.add(o)
    return out


def signatures(found: list[list[int]], op: np.ndarray, names: np.ndarray, dims: np.ndarray) -> list[str]:
    """Per chain, its ops' names and input shapes as one line per link (a code per distinct
    (name, shapes), so equal chains have equal lines: the repr of each distinct shapes object
    once, not once per link)."""
    flat = op[np.concatenate(found)]
    ids = np.fromiter(map(id, dims[flat]), dtype=np.int64, count=len(flat))
    distinct, first, at = np.unique(ids, return_index=True, return_inverse=True)
    shapes = np.array([repr(d) for d in dims[flat[first]]], dtype=object)[at]
    code = combine([pd.factorize(names[flat])[0], pd.factorize(shapes)[0]])
    lines = code.astype(str)
    ends = np.cumsum([len(r) for r in found])
    return ["\n".join(lines[e - len(r):e]) for r, e in zip(found, ends.tolist())]


def within(part: str, whole: str) -> bool:
    """Whether chain signature `part` is a contiguous run of links of `whole`."""
    return f"\n{part}\n" in f"\n{whole}\n"


def rows(a: Measured, free: np.ndarray, time: np.ndarray, of_ns: float) -> list[dict[str, Any] | None]:
    k, ops = a.kernels, a.trace.ops
    found, inputs = chains(a, free)
    if not found:
        return []
    op = k["op"].to_numpy()
    names, dims = ops["name"].to_numpy(), ops["input_dims"].to_numpy()
    keys = signatures(found, op, names, dims)
    distinct, counts = np.unique(keys, return_counts=True)
    kept = set(distinct[counts >= REPEATS])
    # a chain that is a run of links inside a repeated one recurs too (the first layer's norm,
    # with no residual add before it, is the later layers' add + norm less the add)
    inside = {key for key in set(keys) - kept if any(within(key, k) for k in kept)}
    found = [r for r, key in zip(found, keys) if key in kept | inside]
    if not found:
        return []
    read, written = k["bytes_read"].to_numpy(np.float64), k["bytes_written"].to_numpy(np.float64)
    mine = np.zeros(len(k), dtype=bool)
    saved = np.zeros(len(k))
    moved = needed = 0.0
    casts = cast_ops(a, found)
    for r in found:
        m = float(read[r].sum() + written[r].sum())
        n = min(bytes_needed(r, op, read, written, inputs, casts), m)
        mine[r] = True
        saved[r] = time[r] * (1 - n / m)  # memory-bound kernels: time scales with bytes
        moved, needed = moved + m, needed + n
    steps = max(len(np.unique(k["step"].to_numpy()[mine])), 1) if len(a.steps) else 1
    lengths = [len(r) for r in found]
    top = max(found, key=lambda r: saved[r].sum())
    evidence = {"chains": len(found), "per_step": len(found) / steps, "kernels_per_chain": [min(lengths), max(lengths)],
                "bytes_moved": moved, "bytes_needed": needed, "chain_time_ns": float(time[mine].sum()),
                "top_chain": [str(names[op[i]]) for i in top], "top_chain_kernels": len(top)}
    per_step = evidence["per_step"]
    sizes = "-".join(str(n) for n in sorted(set(evidence["kernels_per_chain"])))
    return [row(a, "waste_unfused_elementwise", f"chains of small elementwise kernels a fusion would remove: "
                f"{per_step:,.{0 if float(per_step).is_integer() else 1}f} per step of {sizes} kernels, "
                f"{moved / max(needed, 1.0):,.1f}x the bytes a fused kernel needs", mine, saved, of_ns, FIX, evidence)]
