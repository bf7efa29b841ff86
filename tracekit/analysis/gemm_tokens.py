"""Tokens of a token model's step read from its GEMMs, where no token embedding is in the trace.

A compiled or fused model launches its embedding inside a generated kernel (Inductor fuses the
lookup with the first norm), so the embedding's [B, T] indices are not recorded; its GEMMs
still are (Inductor calls cuBLAS through `aten::mm`). A step is a token model's when it runs
the LM head (attribution's `lm_head` block: a GEMM onto the vocabulary width, found from the
weights' shapes): each LM head call ends one forward, and the forward's tokens are the rows
of its first GEMM (the QKV projection over B x T rows at prefill, B at decode; an LM head
applied to the last position only has B rows, so it is not the count).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tracekit.trace.column_text import as_text
from tracekit.trace.step_ownership import step_rows

MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::linear", "aten::matmul")


def gemm_tokens(trace, kernels: pd.DataFrame, owner_rows: list[int | None]) -> list[tuple[float, str] | None]:
    """Per step (its range row in `owner_rows`): (tokens, source), or None where the step runs
    no LM head or its GEMMs have no recorded shapes."""
    out: list[tuple[float, str] | None] = [None] * len(owner_rows)
    if trace is None or not len(kernels) or "block" not in kernels or "step" not in kernels or not len(trace.ops):
        return out
    op_names = np.array(as_text(trace.ops["name"]), dtype=object)
    dims, op_start = trace.ops["input_dims"].to_numpy(), trace.ops["start"].to_numpy()
    owner, op = kernels["step"].to_numpy(), kernels["op"].to_numpy()
    head = (kernels["block"].astype(str) == "lm_head").to_numpy()
    for i, row in enumerate(owner_rows):
        if row is None:
            continue
        mine = owner == row
        gemms = np.unique(op[mine & (op >= 0)])
        gemms = gemms[np.isin(op_names[gemms], MATMUL_OPS)]
        heads = np.intersect1d(gemms, op[mine & head])  # the LM head's GEMM calls, one per forward
        if not len(heads):
            continue
        first = gemms[np.argmin(op_start[gemms])]
        rows = _rows(dims[first])
        if rows:
            out[i] = (float(rows * len(heads)), f"rows of the first GEMM of each of {len(heads)} forward pass(es) "
                                                 "(one LM head call each; no token embedding recorded)")
    return out


def _rows(d) -> int | None:
    x = d[0] if isinstance(d, (list, tuple)) and d else None
    if not isinstance(x, (list, tuple)) or len(x) < 2 or not all(isinstance(v, int) and v > 0 for v in x):
        return None
    return math.prod(x[:-1])


def step_range_rows(trace, steps: pd.DataFrame) -> list[int | None]:
    """Each step-table row's range row (the kernels' `step` column), by name and host start."""
    r = trace.ranges if trace is not None else None
    rows = step_rows(trace) if r is not None and len(r) else np.zeros(0, dtype=np.int64)
    names = as_text(r["name"]) if len(rows) else []
    row_of = {(names[i], int(r["start"].iat[i])): int(i) for i in rows}
    return [row_of.get((str(s["step"]), int(s["host_start_ns"]))) if "host_start_ns" in s else None
            for s in steps.to_dict(orient="records")]


def tokens_from_gemms(trace, kernels: pd.DataFrame, steps: pd.DataFrame, per_step: pd.DataFrame) -> None:
    """A token model's steps whose work is otherwise unknown (no embedding recorded: a compiled
    model) count the tokens their GEMMs took (tracekit.analysis.gemm_tokens)."""
    unknown = (per_step["unit"] == "steps").to_numpy()
    if not unknown.any():
        return
    found = gemm_tokens(trace, kernels, step_range_rows(trace, steps))
    for i in np.flatnonzero(unknown):
        if found[i] is not None:
            items, source = found[i]
            duration = float(per_step.at[i, "duration_ns"])
            per_step.loc[i, ["items", "unit", "source"]] = [items, "tokens", source]
            per_step.at[i, "throughput"] = items / duration * 1e9 if duration > 0 else None
