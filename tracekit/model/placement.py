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
  and down. Each kernel takes its part's per-layer cost.
- a group holding one block of fixed matrices (attention q, k, v, o; a dense FFN's gate,
  up, down: tracekit.model.parts.projection_parts), none of whose GEMMs has op shapes:
  L layers x p kernels, p = one per matrix, or p = 2 with the input matrices fused into
  one GEMM (qkv, gate_up) and the output matrix.
Any other pattern is left to the time share, as are the blocks these rules do not place.
"""

from __future__ import annotations

import numpy as np

ROLES = {4: ("router", "gate_up", "down", "combine"), 2: ("gate_up", "down")}


def place(names: list[str], members: np.ndarray, start: np.ndarray, klass: np.ndarray, kernel_name: np.ndarray,
          empty: np.ndarray, totals: dict[str, dict], parts: dict) -> tuple[dict[int, tuple], list[str]]:
    """(kernel row -> (flops, read, written, kind, dtype), the block names fully placed).
    `members`: the group's kernel rows; `empty`: per kernel row, no cost yet; `parts`: the
    step's {"moe": moe_parts(...), "projections": projection_parts(...)}."""
    moe = parts.get("moe")
    gemm = members[klass[members] == "gemm"]
    gemm = gemm[np.argsort(start[gemm], kind="stable")]
    placed: dict[int, tuple] = {}
    done: list[str] = []
    if "lm head" in names and len(gemm) and empty[gemm[-1]]:
        head = totals["lm head"]
        placed[int(gemm[-1])] = (head["flops"], head["bytes_read"], head["bytes_written"], head["kind"], head["dtype"])
        done.append("lm head")
        gemm = gemm[:-1]
    if "ffn" in names and moe is not None:
        layers, parts = moe
        costed = int((~empty[gemm]).sum())
        open_rows = gemm[empty[gemm]]
        roles = _roles(len(open_rows), layers, costed)
        if roles and _same_name_per_position(kernel_name[open_rows], len(roles)):
            dtype = totals["ffn"]["dtype"]
            for i, row in enumerate(open_rows.tolist()):
                role = roles[i % len(roles)]
                f, r, w = parts[role]
                placed[row] = (f, r, w, "vector" if role == "combine" else "matrix", dtype)
            done.append("ffn")
    left = [n for n in names if n not in done]
    projections = parts.get("projections") or {}
    if len(left) == 1 and left[0] in projections and not (~empty[gemm]).any():
        layers, matrices = projections[left[0]]
        open_rows = gemm[~np.isin(gemm, list(placed))]
        per_kernel = _matrices_per_kernel(len(open_rows), layers, matrices)
        if per_kernel and _same_name_per_position(kernel_name[open_rows], len(per_kernel)):
            dtype, kind = totals[left[0]]["dtype"], totals[left[0]]["kind"]
            for i, row in enumerate(open_rows.tolist()):
                f, r, w, _ = per_kernel[i % len(per_kernel)]
                placed[row] = (f, r, w, kind, dtype)
            done.append(left[0])
    return placed, done


def _matrices_per_kernel(count: int, layers: int, matrices: list[tuple]) -> list[tuple] | None:
    """One GEMM per matrix, or (p = 2) the input matrices fused into one GEMM (qkv, gate_up:
    same input, weights side by side, outputs summed) and the output matrix. Entries: (FLOPs, bytes read, bytes written, input bytes)."""
    if not count or not layers or count % layers:
        return None
    p = count // layers
    if p == len(matrices):
        return list(matrices)
    if p == 2 and len(matrices) > 2:
        fused = matrices[:-1]  # their input is read once, not once per matrix
        return [(sum(m[0] for m in fused), sum(m[1] for m in fused) - (len(fused) - 1) * fused[0][3],
                 sum(m[2] for m in fused), fused[0][3]), matrices[-1]]
    return None


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
