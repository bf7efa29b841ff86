"""One waste cause row (analysis.waste): its kernels' time, the op chain and host code of the
op holding most of it, the bytes its kernels' costs say they moved, and the fix."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tracekit.trace.column_text import without_address
from tracekit.trace.grouping import key_of

if TYPE_CHECKING:
    from tracekit.analysis.measured import Measured

CHAIN_DEPTH = 5  # ops named in a row's op chain, innermost first


def host_code(a: Measured, rows: np.ndarray, time: np.ndarray) -> str:
    """The Python frame (or, without one, the user range) under which `rows` hold the most time."""
    t = a.trace
    if t is None or not len(t.ranges):
        return ""
    for column in ("frame", "range"):
        if column not in a.kernels:
            continue
        where = a.kernels[column].to_numpy()
        sel = rows & (where >= 0)
        if not sel.any():
            continue
        codes, first = np.unique(where[sel], return_inverse=True)
        held = np.bincount(first, weights=time[sel])
        return without_address(str(t.ranges["name"].iloc[int(codes[int(np.argmax(held))])]))
    return ""


def op_chain(a: Measured, op: int) -> str:
    """The op and its enclosing ops, innermost first: `aten::copy_ < aten::contiguous < aten::layer_norm`."""
    t = a.trace
    if t is None or op < 0 or op >= len(t.ops):
        return ""
    names, parent = t.ops["name"], t.ops["parent"].to_numpy()
    chain = []
    while op >= 0 and len(chain) < CHAIN_DEPTH:
        chain.append(str(names.iloc[op]))
        op = int(parent[op])
    return " < ".join(chain)


def top_op(a: Measured, rows: np.ndarray, time: np.ndarray) -> int:
    """The op (row in trace.ops) whose kernels in `rows` hold the most time, -1 without one."""
    op = a.kernels["op"].to_numpy()
    sel = rows & (op >= 0)
    if not sel.any():
        return -1
    codes, first = np.unique(op[sel], return_inverse=True)
    return int(codes[int(np.argmax(np.bincount(first, weights=time[sel])))])


def group_sums(values: np.ndarray, labels: np.ndarray, rows: np.ndarray) -> dict[Any, float]:
    """Per label among `labels[rows]`: `values[rows & (labels == label)].sum()`, the same float
    (the same elements summed in the same order by the same numpy sum), in one sort instead
    of one pass over every row per label (quadratic with many labels, issue 39)."""
    at = np.flatnonzero(rows)
    distinct, group = np.unique(labels[at], return_inverse=True)
    order = np.argsort(group, kind="stable")  # within a label, rows stay in index order
    picked, cuts = values[at[order]], np.searchsorted(group[order], np.arange(len(distinct) + 1))
    return {label: picked[lo:hi].sum() for label, lo, hi in zip(distinct.tolist(), cuts[:-1].tolist(), cuts[1:].tolist())}


def top_kernel(a: Measured, rows: np.ndarray, time: np.ndarray) -> str:
    names = key_of(a.kernels["name"], missing="nan")
    sel = rows & (names[0] >= 0)
    if not sel.any():
        return ""
    held = np.bincount(names[0][sel], weights=time[sel], minlength=len(names[1]))
    return str(names[1][int(np.argmax(held))])


def row(a: Measured, cause: str, what: str, rows: np.ndarray, time: np.ndarray, of_ns: float,
        fix: str, evidence: dict[str, Any]) -> dict[str, Any] | None:
    """One waste row: its kernels' time alone inside the steps, the op chain and host code of
    the op holding most of it, the fix; None when its kernels hold no time."""
    held = float(time[rows].sum())
    if not held > 0:
        return None
    op = top_op(a, rows, time)
    chain = op_chain(a, op)
    kernel = top_kernel(a, rows, time)
    host = host_code(a, rows, time)
    costed = rows & ~np.isnan(a.kernels["bytes_read"].to_numpy(np.float64))
    moved = float(np.nansum(a.kernels["bytes_read"].to_numpy(np.float64)[costed])
                  + np.nansum(a.kernels["bytes_written"].to_numpy(np.float64)[costed]))
    evidence = {"kernels": int(np.count_nonzero(rows)), "kernel": kernel, "ops": chain, "host": host,
                "costed_bytes": moved if costed.any() else None, **evidence}
    evidence.setdefault("bytes_moved", evidence["costed_bytes"])
    where = chain or kernel
    return {"cause": cause, "what": what, "where": f"{where} ({host})" if host else where, "time_ns": held,
            "share": held / of_ns if of_ns else None, "fix": fix, "evidence": evidence, "kernel_rows": rows}
