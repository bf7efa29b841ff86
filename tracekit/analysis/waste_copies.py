"""Copies of a whole tensor, repeated: a kernel whose op takes the same large tensor shape as
two of its arguments (a source and a destination: `aten::copy_(dst, src)`, or an Inductor
kernel whose arguments are its input and output buffers) and iterates over all of it, seen
at least twice per step (per layer) or, without steps, twice in the trace. The two arguments
say which copy it is, from the record alone:

- same dtype, same strides: the tensor rewritten whole. Under torch.compile this is an
  in-place update (a static KV cache's `index_copy_`, `cache[:, pos] = kv`) functionalized
  into "copy the whole buffer, change a slice, copy it back", once per layer;
- different dtypes: a cast of the whole tensor (autocast's per-step weight casts, and its
  casts of activations into a matmul; an activation's cast inside an elementwise chain, HF's
  RMSNorm's fp32 upcast and its cast back, is a link of that chain: analysis.waste offers
  the casts to waste_fusion first);
- same dtype, different strides: a layout copy (`.contiguous()`, `.reshape` of a
  transposed view), the layout of its source is what caused it.

A kernel iterates over all of a tensor when the cost says it does (an Inductor kernel's
elements are its launch size, costs.inductor); any other op is a copy only when its cost has
no arithmetic (copy_, clone, contiguous, a cast: a binary elementwise op also takes two
tensors of one shape). A rewrite is of state (a cache, a buffer), not of an activation: a
tensor with as many elements as some matmul's operand is an activation, left to the others.
The bytes the work needs: an update needs its slice, which the copy does not show (null);
a cast or a layout copy needs nothing when its consumer reads the source as it is. A row's
sentence names each shape it counts (most time first), activations and weights apart (a
weight: a 2-D shape a matmul takes after its first matrix), so it is true of every copy in it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from tracekit.analysis.waste_row import group_sums, row
from tracekit.costs.dtypes import canonical, element_bytes
from tracekit.trace.grouping import combine

if TYPE_CHECKING:
    from tracekit.analysis.measured import Measured

MIN_BYTES = 1 << 20  # a tensor below 1 MiB copies in a few microseconds: not worth a row
REPEATS = 2  # per step (or in a trace without steps): a copy that recurs is structural
KINDS = {
    "rewrite": ("whole-tensor rewrites (in-place update copied whole)",
                "update the tensor in place at a static address (index_copy_ / slice assignment on a buffer "
                "torch.compile does not functionalize, as HF StaticCache does) instead of copying all of it"),
    "cast": ("whole-tensor dtype casts, repeated",
             "cast once and keep the tensor in the dtype its consumers read (weights: store them in the compute "
             "dtype; activations: fuse the cast into its neighbour, e.g. torch.compile)"),
    "layout": ("layout copies of whole tensors (.contiguous / reshape of a strided view)",
               "make the producer's output contiguous once (e.g. .contiguous() right after the transpose that "
               "made it strided), so the consumers stop copying it"),
}


def copy_kind(dims: Any, types: Any, strides: Any) -> tuple[str, tuple, float, float] | None:
    """(kind, shape, bytes, bytes moved) of the largest tensor shape an op takes twice, None
    without one. bytes: the tensor in its wider dtype; moved: one read of it and one write, each
    in its own dtype (a bf16 -> fp32 cast of n elements moves 2n + 4n bytes, not 2 x 4n)."""
    if not isinstance(dims, list):
        return None
    tensors = [(tuple(d), i) for i, d in enumerate(dims) if isinstance(d, list) and len(d) > 0
               and all(isinstance(x, int) for x in d)]
    if len(tensors) < 2:
        return None
    by_shape: dict[tuple, list[int]] = {}
    for shape, i in tensors:
        by_shape.setdefault(shape, []).append(i)
    largest = max((s for s, _ in tensors), key=math.prod)
    pair = by_shape[largest]
    if len(pair) < 2:  # the largest tensor is read (or written) once: not a copy of it
        return None
    types = types if isinstance(types, list) else []
    strides = strides if isinstance(strides, list) else []
    dtypes = [canonical(types[i]) if i < len(types) else None for i in pair]
    if any(d is None for d in dtypes):
        return None
    sizes = [element_bytes(d) for d in dtypes]
    nbytes, moved = math.prod(largest) * max(sizes), math.prod(largest) * (max(sizes) + min(sizes))
    if len(set(dtypes)) > 1:
        return "cast", largest, nbytes, moved
    layouts = {repr(strides[i]) if i < len(strides) else None for i in pair}
    if len(layouts) > 1 and None not in layouts:
        return "layout", largest, nbytes, moved
    return "rewrite", largest, nbytes, moved


def _distinct_inputs(calls: np.ndarray, columns: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Per call: a group number for the identity of its input lists in `columns` (the same
    objects, the same group), and per group its first call (an index into `calls`)."""
    group = combine([np.fromiter(map(id, column[calls]), dtype=np.int64, count=len(calls)) for column in columns])
    return group, np.unique(group, return_index=True)[1]


class Copies(NamedTuple):
    """Per kernel: its kind of copy ('' if none), the tensor it copies, its bytes and the bytes
    the copy moves (copy_kind); and the weights' shapes. Judged once per analysis
    (waste.detect asks for copies in three passes)."""
    kind: np.ndarray
    shape: np.ndarray
    nbytes: np.ndarray
    moved: np.ndarray
    weights: set


def classify(a: Measured, free: np.ndarray) -> Copies:
    """Every copy among the kernels `free` (each later pass asks about a subset of them)."""
    k, ops = a.kernels, a.trace.ops
    op = k["op"].to_numpy()
    flops = k["flops"].to_numpy(np.float64)
    candidate = free & (op >= 0) & (k["cost_kind"] != "matrix").to_numpy() & ~k["kernel_class"].isin(["gemm", "attention"]).to_numpy()
    candidate &= (k["phase"] != "optimizer").to_numpy()  # an optimizer rewrites every weight by design
    inductor = (k["cost_source"] == "Inductor kernel arguments").to_numpy()
    kind = np.full(len(k), "", dtype=object)
    shape = np.full(len(k), None, dtype=object)
    nbytes, moved = np.zeros(len(k)), np.zeros(len(k))
    dims, types, strides = ops["input_dims"].to_numpy(), ops["input_types"].to_numpy(), ops["input_strides"].to_numpy()
    matmuls = np.unique(op[(op >= 0) & (k["cost_kind"] == "matrix").to_numpy()])
    operand_sizes = {math.prod(d) for o in matmuls for d in (dims[o] or []) if isinstance(d, list) and d
                     and all(isinstance(x, int) for x in d)}
    # once per distinct inputs (the parser shares one object per distinct list): the calls
    # grouped by the identity of their three input lists, without a Python step per call
    calls = np.unique(op[candidate])
    group, first = _distinct_inputs(calls, (dims, types, strides))
    judged = [copy_kind(dims[o], types[o], strides[o]) for o in calls[first].tolist()]
    worth = np.array([c is not None and c[2] >= MIN_BYTES for c in judged], dtype=bool)[group]
    cache = {o: judged[g] for o, g in zip(calls[worth].tolist(), group[worth].tolist())}
    for i in np.flatnonzero(candidate & np.isin(op, calls[worth])):
        c = cache[int(op[i])]
        # an Inductor kernel's cost counts its launch size as its elements: the whole tensor or a part
        # of it; any other op copies only when it computes nothing (a binary elementwise op takes
        # two tensors of one shape too, but does arithmetic on them)
        if (not flops[i] >= math.prod(c[1])) if inductor[i] else flops[i] != 0:
            continue
        # a rewrite is of state, not of an activation: a tensor of as many elements is no matmul's operand
        if c[0] == "rewrite" and math.prod(c[1]) in operand_sizes:
            continue
        kind[i], shape[i], nbytes[i], moved[i] = c
    return Copies(kind, shape, nbytes, moved, weight_shapes(dims[matmuls]))


def rows(a: Measured, free: np.ndarray, time: np.ndarray, of_ns: float, kinds: tuple[str, ...] = tuple(KINDS),
         copies: Copies | None = None) -> list[dict[str, Any] | None]:
    """One row per kind of copy in `kinds` among the kernels `free` (analysis.waste offers the
    casts to the elementwise chains before it rows them). `copies`: classify() of a superset
    of `free`, made once by the caller (made here when not given)."""
    k = a.kernels
    if copies is None:
        copies = classify(a, free)
    kind = np.where(free, copies.kind, "")
    shape, nbytes, weights = copies.shape, copies.nbytes, copies.weights
    step = k["step"].to_numpy() if len(a.steps) else np.zeros(len(k), dtype=np.int64)
    steps = max(len(np.unique(step[kind != ""])), 1)
    keys = np.full(len(k), "", dtype=object)
    copied_rows = np.flatnonzero(kind != "")
    keys[copied_rows] = [repr(shape[i]) for i in copied_rows]  # (only the copies have a shape)
    out = []
    for name in kinds:
        what, fix = KINDS[name]
        mine = kind == name
        if not mine.any():
            continue
        # repeated: the same shape copied REPEATS times per step (or more)
        distinct, counts = np.unique(keys[mine], return_counts=True)
        kept = list(distinct[counts >= REPEATS * steps])
        mine &= np.isin(keys, kept)
        if not mine.any():
            continue
        held = group_sums(time, keys, mine)
        top = max(kept, key=lambda s: held[s])
        evidence = {"tensor": top, "tensor_bytes": float(nbytes[mine & (keys == top)][0]),
                    "per_step": float(np.count_nonzero(mine)) / steps,
                    "tensors": breakdown(mine, keys, nbytes, time, steps, weights),
                    # a copy reads its source and writes its destination, each in its own dtype
                    "bytes_moved": float(copies.moved[mine].sum()), "bytes_needed": None if name == "rewrite" else 0.0}
        out.append(row(a, f"waste_copies_{name}", f"{what}: {sentence(evidence['per_step'], evidence['tensors'])}",
                       mine, time, of_ns, fix, evidence))
    return out


def weight_shapes(matmul_dims: np.ndarray) -> set[tuple]:
    """Shapes of weights: the 2-D operands a matmul takes after its first matrix (linear's
    weight, mm's and addmm's second matrix), in both orientations (mm(x, w.t())). A 2-D
    activation that a backward mm takes second (grad_w = grad.t() @ x) is weight-shaped too;
    a cast of one is named a weight's."""
    out: set[tuple] = set()
    for d in matmul_dims:
        mats = [tuple(x) for x in (d or []) if isinstance(x, list) and len(x) >= 2 and all(isinstance(v, int) for v in x)]
        for m in mats[1:]:
            if len(m) == 2:
                out |= {m, m[::-1]}
    return out


def breakdown(mine: np.ndarray, keys: np.ndarray, nbytes: np.ndarray, time: np.ndarray, steps: int,
              weights: set[tuple]) -> list[dict[str, Any]]:
    """Per tensor shape the row copies, most time first: its shape, bytes, copies per step and
    whether it is a weight's shape (a row counts several shapes: the sentence names each, not
    only the largest)."""
    out = []
    for s in np.unique(keys[mine]):
        of = mine & (keys == s)
        shape = [int(x) for x in s.strip("()").split(",") if x.strip()]
        out.append({"shape": shape, "bytes": float(nbytes[of][0]), "weight": tuple(shape) in weights,
                    "per_step": float(np.count_nonzero(of)) / steps, "time_ns": float(time[of].sum())})
    return sorted(out, key=lambda t: -t["time_ns"])


SHAPES_NAMED = 2  # shapes a row's sentence names per kind (activations, weights); the rest are counted together


def count(n: float) -> str:
    return f"{n:,.{0 if float(n).is_integer() else 1}f}"


def size(b: float) -> str:
    return f"{b / 1e6:,.{0 if b >= 1e7 else 1}f} MB"


def shapes(tensors: list[dict[str, Any]]) -> str:
    """`222 of [8, 2048, 2048] (134 MB), 88 of [8, 32, 2048, 64] (134 MB) and 90 of 2 other shapes (up to 2,097 MB)`."""
    named = [f"{count(t['per_step'])} of {t['shape']} ({size(t['bytes'])})" for t in tensors[:SHAPES_NAMED]]
    rest = tensors[SHAPES_NAMED:]
    if rest:
        named.append(f"{count(sum(t['per_step'] for t in rest))} of {len(rest)} other shape{'s' if len(rest) > 1 else ''} "
                     f"(up to {size(max(t['bytes'] for t in rest))})")
    return ", ".join(named[:-1]) + " and " + named[-1] if len(named) > 1 else named[0]


def sentence(per_step: float, tensors: list[dict[str, Any]]) -> str:
    """What the row counts, true of every copy in it: `98 per step of a 37 MB tensor [16, 559, 1024]`
    or, with several shapes, `710 per step: 400 of activations (222 of [8, 2048, 2048] (134 MB), ...);
    310 of weights (88 of [5632, 2048] (46 MB), ...)`."""
    if len(tensors) == 1:
        t = tensors[0]
        kind = "weight" if t["weight"] else "tensor"
        return f"{count(per_step)} per step of a {size(t['bytes'])} {kind} {t['shape']}"
    groups = [(label, group) for label, group in (("activations", [t for t in tensors if not t["weight"]]),
                                                  ("weights", [t for t in tensors if t["weight"]])) if group]
    if len(groups) == 1:
        return f"{count(per_step)} per step ({groups[0][0]}): {shapes(groups[0][1])}"
    def part(label: str, group: list[dict[str, Any]]) -> str:
        if len(group) == 1:  # `3 of weights [512, 512] (2.1 MB)`
            return f"{count(group[0]['per_step'])} of {label} {group[0]['shape']} ({size(group[0]['bytes'])})"
        return f"{count(sum(t['per_step'] for t in group))} of {label} ({shapes(group)})"

    return f"{count(per_step)} per step: " + "; ".join(part(label, group) for label, group in groups)
