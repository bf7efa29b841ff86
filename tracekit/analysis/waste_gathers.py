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


def gathered(t: dict, o: int, followers: np.ndarray) -> tuple[int, float] | None:
    """(matrices gathered, bytes gathered) when op `o` gathers matrices its successor reads.
    `t`: the ops' columns as arrays (a pandas lookup per access costs more than the search);
    `followers`: the ops after `o` (at most LOOKAHEAD, in order) on its thread that start
    after it ends, the ones that can read its output."""
    dims, types = t["dims"][o], t["types"][o]
    if not _is_table(dims):
        return None
    table = dims[0]
    dtype = canonical(types[0]) if isinstance(types, list) and types else None
    if dtype is None:
        return None
    tail, counts = (len(table), tuple(table[1:])), None
    for j in followers:
        for lead in shape_tails(t, int(j)).get(tail, ()):
            if 0 < lead != table[0]:
                counts = index_counts(t, o) if counts is None else counts  # searched once, only on a shape match
                if lead in counts:
                    return lead, float(lead * math.prod(table[1:]) * element_bytes(dtype))
    return None


def _is_table(dims: Any) -> bool:
    """Whether an op's first input is a stack of matrices: three or more integer sizes."""
    return (isinstance(dims, list) and bool(dims) and isinstance(dims[0], list) and len(dims[0]) >= 3
            and all(isinstance(x, int) for x in dims[0]))


def shape_tails(t: dict, j: int) -> dict[tuple, list[int]]:
    """Op j's integer-sized inputs by (rank, sizes after the first) -> their first sizes, in
    input order; computed once per op (consecutive gathers share their followers)."""
    tails = t["tails"].get(j)
    if tails is None:
        tails = {}
        for d in t["dims"][j] or []:
            if isinstance(d, list) and len(d) >= 3 and all(isinstance(x, int) for x in d):
                tails.setdefault((len(d), tuple(d[1:])), []).append(d[0])
        t["tails"][j] = tails
    return tails


def followers_of(t: dict, calls: np.ndarray) -> np.ndarray:
    """Per op in `calls`: the next LOOKAHEAD ops (a row of op indices), -1 where an op is not
    a follower: past the end, on another thread, or starting before the call ends (one array
    comparison for every call at once, not a Python test per pair)."""
    n = len(t["tid"])
    after = calls[:, None] + np.arange(1, LOOKAHEAD + 1)[None, :]
    inside = after < n
    after = np.minimum(after, max(n - 1, 0))
    ok = inside & (t["tid"][after] == t["tid"][calls][:, None]) & (t["start"][after] >= t["end"][calls][:, None])
    return np.where(ok, after, -1)


def readers(t: dict, calls: np.ndarray) -> list[np.ndarray]:
    """Per op in `calls` (each with a table input): its followers that take an input of the
    table's rank and sizes after the first with another positive first size, the only ones
    `gathered` needs to look at. Each op near a call is read once; the (call, follower)
    pairs are matched as integers."""
    keys: dict[tuple, int] = {}
    key_of = np.array([keys.setdefault((len(t["dims"][o][0]), tuple(t["dims"][o][0][1:])), len(keys)) for o in calls],
                      dtype=np.int64)
    lead_of = np.array([t["dims"][o][0][0] for o in calls], dtype=np.int64)
    after = followers_of(t, calls)
    leads: dict[int, set] = {}  # (follower, key) as one integer -> the first sizes it takes with that key
    for j in np.unique(after[after >= 0]).tolist():
        for d in t["dims"][j] or []:
            if isinstance(d, list) and len(d) >= 3 and isinstance(d[0], int) and d[0] > 0:
                try:
                    key = keys.get((len(d), tuple(d[1:])))
                except TypeError:  # a list inside: not a tensor's sizes
                    continue
                if key is not None:
                    leads.setdefault(j * len(keys) + key, set()).add(d[0])
    codes = np.array(sorted(leads), dtype=np.int64)
    one = np.array([next(iter(leads[c])) if len(leads[c]) == 1 else -1 for c in codes.tolist()], dtype=np.int64)
    wanted = after * len(keys) + key_of[:, None]
    at = np.minimum(np.searchsorted(codes, wanted), max(len(codes) - 1, 0))
    hit = (after >= 0) & (codes[at] == wanted) & (one[at] != lead_of[:, None]) if len(codes) else np.zeros(after.shape, bool)
    return [row[keep] for row, keep in zip(after, hit)]


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
         "start": ops["start"].to_numpy(), "end": ops["end"].to_numpy(), "tails": {}}
    rows_ = np.flatnonzero(candidate)
    calls, at = np.unique(op[rows_], return_inverse=True)
    # once per distinct shapes object (the parser shares one per distinct inputs list)
    judged: dict[int, bool] = {}
    tables = np.array([judged.setdefault(id(d), _is_table(d)) if id(d) not in judged else judged[id(d)]
                       for d in t["dims"][calls]], dtype=bool)
    for o in calls[~tables]:
        cache[int(o)] = None
    for o, after in zip(calls[tables], readers(t, calls[tables])):
        cache[int(o)] = gathered(t, int(o), after) if len(after) else None
    # judged once per op, spread to its kernels by index (no Python loop per kernel)
    gathers = [cache[int(o)] for o in calls]
    mine[rows_] = np.array([g is not None and g[1] >= MIN_BYTES for g in gathers], dtype=bool)[at]
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
