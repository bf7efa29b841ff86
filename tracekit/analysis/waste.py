"""Waste an expert would remove, each found from the trace's structure (the op tree, the ops'
shapes, the costs, the autograd phases), not from kernel names: one cause row per kind of
waste, with its kernels, their time, the bytes they moved against the bytes the work needs,
the op chain and the host code that produced them, and the fix in one line.

The detectors (one module each) claim kernels; a kernel belongs to the first detector that
claims it, so the rows are disjoint slices of kernel time, and analysis.causes takes the
claimed kernels out of the "kernel time above the roofline" row: the running total still
never passes 100%. A row's time is the GPU time its kernels hold alone inside the steps
(the same time the recoverable row counts), so the rows compare with the idle rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tracekit.trace.grouping import key_of

if TYPE_CHECKING:
    from tracekit.analysis.measured import Measured

CHAIN_DEPTH = 4  # ops named in a row's op chain, innermost first


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
        return str(t.ranges["name"].iloc[int(codes[int(np.argmax(held))])])
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


def detect(a: Measured, time: np.ndarray, of_ns: float) -> list[dict[str, Any]]:
    """Every waste row, each claiming kernels no earlier row claimed. `time`: per kernel, the
    GPU time it holds alone inside the steps (analysis.fix.work)."""
    from tracekit.analysis import waste_attention, waste_copies, waste_gathers, waste_recompute

    if a.trace is None or not len(a.kernels):
        return []
    free = (a.kernels["kind"] == "kernel").to_numpy() & (a.kernels["block"] != "collective").to_numpy()
    out = []
    for detector in (waste_recompute.rows, waste_copies.rows, waste_gathers.rows, waste_attention.rows):
        for r in detector(a, free, time, of_ns):
            if r is not None:
                free &= ~r["kernel_rows"]
                out.append(r)
    return out
