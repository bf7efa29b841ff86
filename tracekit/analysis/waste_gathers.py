"""Gathers of weights: an op that takes a stack of matrices (a tensor of three or more
dimensions: the experts' weights [E, N, K]) and whose output, n of those matrices, is an
operand of an op that follows it on the same thread ([n, N, K] into a batched GEMM), n being
the size of an integer tensor the op (or an op inside it) takes: the indices. That is
HF's batched MoE path: per (token, expert) pair a copy of the expert's weight matrix is
gathered, then multiplied. A grouped GEMM reads each expert's weights in place, so the
gather's whole time and traffic (n matrices read and written) is waste; the bytes the work
needs beyond the GEMM's own reads are none. Found from the shapes, not the op's name."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

import numpy as np

from tracekit.analysis.waste_row import row
from tracekit.costs.dtypes import canonical, element_bytes

if TYPE_CHECKING:
    from tracekit.analysis.measured import Measured

MIN_BYTES = 1 << 20  # gathered bytes below 1 MiB per call: not worth a row
INTEGER = re.compile(r"\b(long|int|short)\b|^int\d+$", re.I)  # recorded integer tensor types ('long int', 'int')
LOOKAHEAD = 32  # ops after the gather (same thread) searched for the one that reads its output
FIX = ("multiply by the experts' weights in place with a grouped GEMM (torch._grouped_mm, the path the prefill "
       "uses) instead of gathering a weight copy per (token, expert) pair")


def gathered(t: dict, o: int) -> tuple[int, float] | None:
    """(matrices gathered, bytes gathered) when op `o` gathers matrices its successor reads.
    `t`: the ops' columns as arrays (a pandas lookup per access costs more than the search)."""
    dims, types = t["dims"][o], t["types"][o]
    if not _gathers_a_table(dims):
        return None
    table = dims[0]
    dtype = canonical(types[0]) if isinstance(types, list) and types else None
    if dtype is None:
        return None
    for j in range(o + 1, min(o + 1 + LOOKAHEAD, len(t["tid"]))):
        if t["tid"][j] != t["tid"][o] or t["start"][j] < t["end"][o]:
            continue
        for d in t["dims"][j] or []:
            if (isinstance(d, list) and len(d) == len(table) and d[1:] == table[1:] and 0 < d[0] != table[0]
                    and d[0] in index_counts(t, o)):
                return d[0], float(d[0] * math.prod(table[1:]) * element_bytes(dtype))
    return None


def _gathers_a_table(dims: Any) -> bool:
    """The op's first input is a table of matrices (3 or more known dimensions)."""
    return (isinstance(dims, list) and bool(dims) and isinstance(dims[0], list) and len(dims[0]) >= 3
            and all(isinstance(x, int) for x in dims[0]))


def index_counts(t: dict, o: int) -> set[int]:
    """The sizes of the integer tensors op `o` or the ops it encloses take: the indices of a
    gather (aten::index records its index list without shapes; its children reshape it)."""
    out = set()
    for j in range(o, min(o + LOOKAHEAD, len(t["tid"]))):  # the op and the ops it encloses follow it
        if t["tid"][j] != t["tid"][o] or t["start"][j] > t["end"][o]:
            continue
        for d, kind in zip(t["dims"][j] or [], t["types"][j] or []):
            if isinstance(d, list) and d and isinstance(kind, str) and INTEGER.search(kind):
                out.add(math.prod(d))
    return out


def rows(a: Measured, free: np.ndarray, time: np.ndarray, of_ns: float) -> list[dict[str, Any] | None]:
    k, ops = a.kernels, a.trace.ops
    op = k["op"].to_numpy()
    candidate = free & (op >= 0) & (k["cost_kind"] != "matrix").to_numpy()
    mine = np.zeros(len(k), dtype=bool)
    cache: dict[int, tuple | None] = {}
    t = {"dims": ops["input_dims"].to_numpy(), "types": ops["input_types"].to_numpy(), "tid": ops["tid"].to_numpy(),
         "start": ops["start"].to_numpy(), "end": ops["end"].to_numpy()}
    rows_ = np.flatnonzero(candidate)
    calls, at = np.unique(op[rows_], return_inverse=True)
    table: dict[int, bool] = {}  # per distinct inputs object (the parser shares one per distinct list)
    for o in calls.tolist():
        key = id(t["dims"][o])
        if key not in table:
            table[key] = _gathers_a_table(t["dims"][o])
        cache[o] = gathered(t, o) if table[key] else None
    mine[rows_] = np.array([g is not None and g[1] >= MIN_BYTES for g in map(cache.get, calls.tolist())], dtype=bool)[at]
    if not mine.any():
        return []
    calls = np.unique(op[mine])
    moved = sum(2 * cache[int(o)][1] for o in calls)  # read n matrices, write their copy
    steps = max(len(np.unique(k["step"].to_numpy()[mine])), 1) if len(a.steps) else 1
    evidence = {"gathers": int(len(calls)), "bytes_moved": float(moved), "bytes_needed": 0.0,
                "bytes_gathered_per_step": float(moved / 2 / steps),
                "matrices_per_gather": float(np.mean([cache[int(o)][0] for o in calls]))}
    return [row(a, "waste_weight_gathers", f"weight gathers into batched GEMMs ({len(calls) / steps:,.0f} per step, "
                f"{moved / 2 / steps / 1e6:,.0f} MB gathered per step)", mine, time, of_ns, FIX, evidence)]
