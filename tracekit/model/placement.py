"""Model costs placed on the very kernels that do each part, not spread by time.

A group's cost spread over its kernels by their time share gives every kernel the group's
efficiency, whatever it reads. Two parts of a step are launched as kernels of their own,
in an order the model knows, so each is placed on its kernel by position:

- the LM head: the vocabulary GEMM is the last GEMM of a step (after the final norm). It
  takes the whole `lm head` block (its [vocab, hidden] matrix and the logits), when the
  group's last GEMM-class kernel is one no op shape costed.
- an MoE FFN without shared experts launches, per layer and in this order, the router GEMM,
  the grouped gate/up GEMM, the grouped down GEMM and the combine of the k expert outputs
  (tracekit.model.parts.moe_parts). The group's uncosted GEMM-class kernels, in time order,
  must then be L layers x p kernels with the same kernel name at each position of every
  layer: p = 4 is all four parts; p = 3 is gate/up, down, combine when the router already
  has op shapes (L costed GEMMs in the group), else router, gate/up, down; p = 2 is gate/up
  and down. Each kernel takes its part's per-layer cost. A router placed nowhere (p = 2,
  none costed) is looked for among the step's unattributed GEMMs, after the LM head: L
  kernels of one name there are the routers.
- the blocks of fixed matrices left in a group (attention q, k, v, o; Gated DeltaNet in/out
  projections; a dense FFN's gate, up, down: tracekit.model.parts.projection_parts), when
  none of the group's GEMMs has op shapes: walking the layers in order, each layer launches
  its block's GEMMs, one per matrix or with the input matrices fused into one (qkv,
  gate_up, in_proj) before the output matrix. Placed when exactly one such reading matches
  the kernel count and gives one kernel name per slot in every layer.
Any other pattern is left to the time share, as are the blocks these rules do not place.

A split-K GEMM launches two GEMM-class kernels, the partial products and a reduce
(tracekit.costs.split_k): the reduce is no part of the step of its own. The patterns above
are matched on the GEMMs without the reduces; a reduce that follows a placed GEMM then
takes what it moves from that GEMM's part (s fp32 partial sums of the part's output, s from
the GEMM's grid), and the GEMM writes the partial sums instead of the output.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from tracekit.costs.dtypes import ELEMENT_BYTES
from tracekit.costs.split_k import is_split_k_reduce, pair_costs, splits
from tracekit.model.parts import MOE_PARTS

ROLES = {4: MOE_PARTS, 2: ("gate_up", "down")}


def place(names: list[str], members: np.ndarray, start: np.ndarray, klass: np.ndarray, kernel_name: np.ndarray,
          empty: np.ndarray, totals: dict[str, dict], parts: dict,
          grid_blocks: np.ndarray | None = None) -> tuple[dict[int, tuple], list[str]]:
    """(kernel row -> (flops, read, written, kind, dtype), the block names fully placed).
    `members`: the group's kernel rows; `empty`: per kernel row, no cost yet; `parts`: the
    step's {"moe": moe_parts(...), "projections": projection_parts(...)}; `grid_blocks`:
    per kernel row, its launch grid's blocks (the splits of a split-K GEMM; None: unknown)."""
    moe = parts.get("moe")
    gemm = members[klass[members] == "gemm"]
    gemm = gemm[np.argsort(start[gemm], kind="stable")]
    reduce_of, gemm = split_k_reduces(gemm, kernel_name)
    placed: dict[int, tuple] = {}
    shape_of: dict[int, tuple] = {}  # placed row -> its part's output (rows, columns), where the part says
    done: list[str] = []
    if "lm head" in names and len(gemm) and empty[gemm[-1]]:
        head = totals["lm head"]
        placed[int(gemm[-1])] = (head["flops"], head["bytes_read"], head["bytes_written"], head["kind"], head["dtype"])
        done.append("lm head")
        gemm = gemm[:-1]
    if "ffn" in names and moe is not None:
        layers, moe_costs = moe
        costed = int((~empty[gemm]).sum())
        open_rows = gemm[empty[gemm]]
        roles = _roles(len(open_rows), layers, costed)
        if roles and _same_name_per_position(kernel_name[open_rows], len(roles)):
            dtype = totals["ffn"]["dtype"]
            for i, row in enumerate(open_rows.tolist()):
                role = roles[i % len(roles)]
                f, r, w, shape_of[row] = moe_costs[role]
                placed[row] = (f, r, w, "vector" if role == "combine" else "matrix", dtype)
            done.append("ffn")
            # the router GEMM ran outside the FFN's kernels (attribution left it unplaced):
            # the step's unattributed GEMMs may hold it (see below)
            parts["router open"] = "router" not in roles and not costed
    if "lm head" in done and parts.get("router open") and moe is not None:
        layers, moe_costs = moe
        open_rows = gemm[empty[gemm] & ~np.isin(gemm, list(placed))]
        if len(open_rows) == layers and _same_name_per_position(kernel_name[open_rows], 1):
            f, r, w, shape = moe_costs["router"]
            for row in open_rows.tolist():
                placed[row], shape_of[row] = (f, r, w, "matrix", totals["lm head"]["dtype"]), shape
            parts["router open"] = False
    left = [n for n in names if n not in done]
    projections = parts.get("projections") or {}
    if left and all(n in projections for n in left) and not (~empty[gemm]).any():
        open_rows = gemm[~np.isin(gemm, list(placed))]
        plan = _plan(kernel_name[open_rows], [projections[n] for n in left])
        for row, (block, (f, r, w, _, shape)) in zip(open_rows.tolist(), plan or []):
            placed[row], shape_of[row] = (f, r, w, totals[left[block]]["kind"], totals[left[block]]["dtype"]), shape
        if plan:
            done += left
    _split(placed, shape_of, reduce_of, empty, kernel_name, grid_blocks, totals)
    return placed, done


def split_k_reduces(gemm: np.ndarray, kernel_name: np.ndarray) -> tuple[dict[int, int], np.ndarray]:
    """({GEMM row: the split-K reduce row launched right after it}, the GEMM rows without
    the reduces), from GEMM-class rows in launch order."""
    reduce = np.array([is_split_k_reduce(str(n)) for n in kernel_name[gemm]], dtype=bool)
    reduce_of = {int(gemm[i - 1]): int(gemm[i]) for i in np.flatnonzero(reduce).tolist() if i > 0 and not reduce[i - 1]}
    return reduce_of, gemm[~reduce]


def _split(placed: dict, shape_of: dict, reduce_of: dict, empty: np.ndarray, kernel_name: np.ndarray,
           grid_blocks: np.ndarray | None, totals: dict) -> None:
    """A placed GEMM followed by a split-K reduce: the pair's costs (tracekit.costs.split_k).
    The outputs are the part's (rows x columns), else its bytes written over the element
    size of the block's activations (the LM head's dtype is its logits')."""
    for gemm, reduce in reduce_of.items():
        if gemm not in placed or not empty[reduce]:
            continue
        f, r, w, kind, dtype = placed[gemm]
        shape = shape_of.get(gemm)
        if shape is not None:
            elements = float(shape[0]) * float(shape[1])
            blocks = int(grid_blocks[gemm]) if grid_blocks is not None else 0
            s, _ = splits(str(kernel_name[gemm]), blocks, 1, int(math.ceil(shape[0])), int(math.ceil(shape[1])))
        else:
            size = ELEMENT_BYTES.get(dtype)
            if not size or kind != "matrix":
                continue
            elements, s = w / size, 2  # s = 2: the fewest splits, a lower bound on the partial sums
        (gf, gr, gw), (rf, rr, rw) = pair_costs(f, r, w, elements, s)
        placed[gemm] = (gf, gr, gw, kind, dtype)
        placed[reduce] = (rf, rr, rw, "vector", "fp32")


def _plan(names: np.ndarray, blocks: list[tuple[list[int], list[tuple]]]) -> list[tuple[int, tuple]] | None:
    """Per kernel (in time order): (which block, its matrix entry), walking the layers in
    order, each layer launching its block's GEMMs; None unless the count and the kernel
    names (one name per slot of each block's pattern, in every layer) agree with exactly
    one choice of fused / unfused inputs per block."""
    found = None
    for choice in itertools.product(*[_patterns(matrices) for _, matrices in blocks]):
        if sum(len(layers) * len(pattern) for (layers, _), pattern in zip(blocks, choice)) != len(names):
            continue
        owner = {layer: b for b, (layers, _) in enumerate(blocks) for layer in layers}
        plan = [(owner[layer], slot, entry) for layer in sorted(owner) for slot, entry in enumerate(choice[owner[layer]])]
        slots: dict[tuple[int, int], set] = {}
        for (b, slot, _), name in zip(plan, names.tolist()):
            slots.setdefault((b, slot), set()).add(name)
        if all(len(v) == 1 for v in slots.values()):
            if found is not None:
                return None  # two readings fit: place neither
            found = [(b, entry) for b, _, entry in plan]
    return found


def _patterns(matrices: list[tuple]) -> list[list[tuple]]:
    """One GEMM per matrix, and (when there are more than two) the input matrices fused into
    one GEMM (qkv, gate_up, in_proj: same input, weights side by side) and the output matrix.
    Entries: (FLOPs, bytes read, bytes written, input bytes, output (rows, columns)); a fused
    GEMM reads its input once and writes the outputs side by side."""
    out = [list(matrices)]
    if len(matrices) > 2:
        fused = matrices[:-1]
        out.append([(sum(m[0] for m in fused), sum(m[1] for m in fused) - (len(fused) - 1) * fused[0][3],
                     sum(m[2] for m in fused), fused[0][3], (fused[0][4][0], sum(m[4][1] for m in fused))), matrices[-1]])
    return out


def _roles(count: int, layers: int, costed: int) -> tuple[str, ...] | None:
    if not count or not layers or count % layers:
        return None
    p = count // layers
    if p == 3:
        return ("gate_up", "down", "combine") if costed >= layers else ("router", "gate_up", "down")
    return ROLES.get(p)


def _same_name_per_position(names: np.ndarray, p: int) -> bool:
    """Each position of the per-layer pattern is one kernel in every layer."""
    return all(len(set(names[i::p].tolist())) == 1 for i in range(p))
