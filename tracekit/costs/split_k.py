"""Split-K GEMMs: the cost of one GEMM op launched as a partial-product kernel plus a reduce.

cuBLAS (and CUTLASS) split the K dimension of a skinny GEMM over s thread blocks per output
tile: the GEMM kernel writes s fp32 partial sums per output element, and a second kernel
(`splitKreduce_kernel`) reads them and writes the output in its dtype. Each kernel is costed
on what it moves, not on a share of the op's time:
- GEMM kernel: every FLOP of the op, reads A and B (the op's bytes read), writes s · M·N · 4 B;
- reduce kernel: (s − 1) · M·N FLOPs, reads s · M·N · 4 B, writes M·N in the output dtype
  (the op's bytes written).
s is read from the GEMM kernel's launch grid: grid blocks / output tiles, the tile being the
first `AxB` of an nvjet / cuBLAS kernel name, when that ratio is a whole number ≥ 2 for one
orientation of the tile. Otherwise s = 2, the fewest partial sums a split-K GEMM has (a
lower bound on the traffic).
"""

from __future__ import annotations

import math
import re

REDUCE = re.compile(r"splitKreduce|ReduceSplitK|split_k_reduce|splitk_reduce", re.I)
_TILE = re.compile(r"_(\d+)x(\d+)_")
FP32 = 4.0


def is_split_k_reduce(name: str) -> bool:
    return bool(REDUCE.search(name[:512]))


def output_dims(op_name: str, dims) -> tuple[int, int, int] | None:
    """(batch, M, N) of a GEMM op's output from its input dims, None when not a GEMM form."""
    try:
        if op_name in ("aten::mm", "aten::matmul") and len(dims[0]) == 2 and len(dims[1]) == 2:
            return 1, dims[0][0], dims[1][1]
        if op_name == "aten::addmm":
            return 1, dims[1][0], dims[2][1]
        if op_name in ("aten::bmm", "aten::baddbmm"):
            a, b = (dims[0], dims[1]) if op_name == "aten::bmm" else (dims[1], dims[2])
            return a[0], a[1], b[2]
        if op_name == "aten::linear":
            return 1, math.prod(dims[0][:-1]), dims[1][0]
    except (IndexError, TypeError, KeyError):
        return None
    return None


def splits(kernel_name: str, grid_blocks: int, batch: int, m: int, n: int) -> tuple[int, bool]:
    """(s, measured): the number of K splits from the grid (see the module docstring)."""
    tile = _TILE.search(kernel_name[:512])
    if tile and grid_blocks > 0:
        a, b = int(tile.group(1)), int(tile.group(2))
        for rows, cols in ((m, n), (n, m)):
            tiles = batch * math.ceil(rows / a) * math.ceil(cols / b)
            if tiles and grid_blocks % tiles == 0 and grid_blocks // tiles >= 2:
                return grid_blocks // tiles, True
    return 2, False


def pair_costs(flops: float, read: float, written: float, elements: float, s: int) -> tuple[tuple, tuple]:
    """((FLOPs, read, written) of the GEMM kernel, of the reduce kernel) for a split-K GEMM
    whose unsplit cost is (flops, read, written), with `elements` outputs and s splits: the
    GEMM kernel does every FLOP, reads A and B and writes s fp32 partial sums per output; the
    reduce adds them ((s - 1) per output), reads them and writes the output."""
    partial = s * elements * FP32
    return (flops, read, partial), ((s - 1) * elements, partial, written)


def apply_split_k(k, ops, out: dict, source: str) -> None:
    """Re-cost, in `out` (the per-kernel cost arrays), each op whose kernels costed from
    its shapes (`source`) are one GEMM kernel and one split-K reduce kernel."""
    import numpy as np
    import pandas as pd

    from tracekit.common.text_match import searches
    from tracekit.trace.column_text import as_text, category_text

    names = k["name"] if isinstance(k["name"].dtype, pd.CategoricalDtype) else k["name"].astype("category")
    reduce_code = np.r_[searches([n[:512] for n in category_text(names.cat.categories)], REDUCE), False]  # as is_split_k_reduce
    is_reduce = reduce_code[names.cat.codes.to_numpy()]
    op = k["op"].to_numpy()
    costed = (out["cost_source"] == source) & (op >= 0)
    wanted_ops = np.unique(op[is_reduce & costed])
    if not len(wanted_ops):
        return
    rows = np.flatnonzero(costed & np.isin(op, wanted_ops))
    op_names, dims = as_text(ops["name"]), ops["input_dims"].to_numpy()
    kernel_names = as_text(k["name"])
    grid = (np.maximum(k["grid_x"].to_numpy(), 0) * np.maximum(k["grid_y"].to_numpy(), 0)
            * np.maximum(k["grid_z"].to_numpy(), 0))
    for o, members in pd.Series(rows).groupby(op[rows]):
        members = members.to_numpy()
        reduce_rows, gemm_rows = members[is_reduce[members]], members[~is_reduce[members]]
        if len(reduce_rows) != 1 or len(gemm_rows) != 1 or out["cost_kind"][gemm_rows[0]] != "matrix":
            continue
        shape = output_dims(str(op_names[o]), dims[o])
        if shape is None:
            continue
        r, g = int(reduce_rows[0]), int(gemm_rows[0])
        elements = float(math.prod(shape))
        s, _ = splits(str(kernel_names[g]), int(grid[g]), *shape)
        flops, read, written = (out[f][r] + out[f][g] for f in ("flops", "bytes_read", "bytes_written"))
        (out["flops"][g], out["bytes_read"][g], out["bytes_written"][g]), \
            (out["flops"][r], out["bytes_read"][r], out["bytes_written"][r]) = pair_costs(flops, read, written, elements, s)
        out["cost_kind"][r], out["dtype"][r] = "vector", "fp32"
