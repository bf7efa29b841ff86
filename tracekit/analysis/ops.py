"""The op table: GPU work per (op name, input shapes) that launched it, or, for a profile
without GPU work, the outermost costed CPU ops against their CPU time."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis.rollup import kernel_rollup, rollup_columns
from tracekit.costs.unknown import known_sum
from tracekit.trace.frames import Trace
from tracekit.trace.grouping import Key, group_rows, key_of


def _shapes(dims: Any) -> str:
    return "" if dims is None else str(dims)


def shape_key(dims: np.ndarray, op_rows: np.ndarray, text=_shapes) -> Key:
    """Per kernel (given its op's row): a code for the text of the op's input shapes.
    Made once per distinct op row, and once per distinct input list: parsers intern equal
    inputs, so calls with the same shapes share one list object."""
    distinct, inverse = np.unique(op_rows, return_inverse=True)
    objects = dims[distinct]
    ids, first, per_row = np.unique(np.fromiter(map(id, objects), dtype=np.int64, count=len(objects)),
                                    return_index=True, return_inverse=True)
    codes, labels = key_of([text(d) for d in objects[first]])
    return codes[per_row.reshape(-1)][inverse.reshape(-1)], labels


OP_SUMMARY_COLUMNS = ["op", "shapes", "calls", "kernels", "time_ns", "flops", "bytes", "t_min_ns", "efficiency", "bound", "coverage"]


def _op_work(columns: dict[str, np.ndarray], cost_source: pd.Series, op: np.ndarray) -> dict[str, np.ndarray]:
    """An op's work is its own cost. When a call has a shape-derived cost, its other
    activities (workspace memsets, layout transposes) add time but no work of their own: a
    convolution's bytes are its tensors', not its tensors' plus cuDNN's workspace fills."""
    from_shapes = (cost_source == "op shapes").to_numpy()
    call_has_cost = (np.bincount(op, weights=from_shapes, minlength=int(op.max()) + 1) > 0)[op]
    overhead = call_has_cost & ~from_shapes
    if not overhead.any():
        return columns
    work = dict(columns)
    for column in ("flops", "bytes", "t_min_ns", "t_min_sustained_ns"):
        work[column] = np.where(overhead, 0.0, columns[column])
    work["bound"] = np.where(overhead, None, columns["bound"])
    return work


def ops_table(kernels: pd.DataFrame, trace: Trace) -> pd.DataFrame:
    linked = np.flatnonzero(kernels["op"].to_numpy() >= 0)
    if not len(linked):
        return pd.DataFrame(columns=OP_SUMMARY_COLUMNS)
    op_rows = kernels["op"].to_numpy()[linked]
    names, name_labels = key_of(kernels["op_name"])
    keys = {"op": (names[linked], name_labels), "shapes": shape_key(trace.ops["input_dims"].to_numpy(), op_rows)}
    columns = {c: v[linked] for c, v in rollup_columns(kernels).items()}
    g = kernel_rollup(_op_work(columns, kernels["cost_source"].iloc[linked], op_rows), keys)
    g["calls"] = group_rows(list(keys.values()), len(linked)).nunique(op_rows)
    g = g.rename(columns={"count": "kernels"})
    return g[OP_SUMMARY_COLUMNS].sort_values("time_ns", ascending=False).reset_index(drop=True)


def cpu_ops_table(trace: Trace) -> pd.DataFrame:
    """A profile without GPU work: the outermost ops with a cost model (so `linear` and the
    `addmm` inside it are not counted twice), costed, against their CPU time."""
    from tracekit.attribution.match import with_ancestors
    from tracekit.costs import Cost, known_ops, op_cost

    ops = trace.ops
    if ops.empty:
        return pd.DataFrame(columns=["op", "shapes", "calls", "time_ns", "flops", "bytes"])
    costed = ops["name"].astype(str).isin(set(known_ops())).to_numpy()
    parent = ops["parent"].to_numpy()
    below_costed = np.zeros(len(ops), dtype=bool)
    has_parent = parent >= 0
    below_costed[has_parent] = with_ancestors(costed, parent, ops["depth"].to_numpy())[parent[has_parent]]
    rows = ops[costed & ~below_costed]
    costs = [op_cost(n, d, t, c) for n, d, t, c in zip(rows["name"].astype(str), rows["input_dims"], rows["input_types"], rows["concrete_inputs"])]
    frame = pd.DataFrame({
        "op": rows["name"].astype(str).to_numpy(), "shapes": [_shapes(d) for d in rows["input_dims"]],
        "time_ns": (rows["end"] - rows["start"]).to_numpy(),
        "flops": [c.flops if isinstance(c, Cost) else np.nan for c in costs],
        "bytes": [c.bytes if isinstance(c, Cost) else np.nan for c in costs],
    })
    grouped = frame.groupby(["op", "shapes"], sort=False).agg(
        calls=("time_ns", "size"), time_ns=("time_ns", "sum"),
        flops=("flops", known_sum), bytes=("bytes", known_sum),
    ).reset_index()
    grouped["kernels"] = 0
    grouped["t_min_ns"] = np.nan
    grouped["efficiency"] = np.nan
    grouped["bound"] = None
    return grouped.sort_values("time_ns", ascending=False).reset_index(drop=True)




def call_sketches(kernels: pd.DataFrame, trace: Trace, wanted: set[tuple[str, str]] | None = None,
                  points: int = 20) -> dict[tuple[str, str], list[float]]:
    """Per (op, input shapes) in `wanted` (None: every one): a sketch of its calls' GPU time
    (the kernel time each call launched; tracekit.common.sketch), for telling a change from noise."""
    linked = np.flatnonzero(kernels["op"].to_numpy() >= 0) if len(kernels) else np.array([], dtype=np.int64)
    if not len(linked) or wanted is not None and not wanted:
        return {}
    from tracekit.common.sketch import sketch
    from tracekit.trace.column_text import as_text

    op_rows = kernels["op"].to_numpy()[linked]
    per_call = np.bincount(op_rows, weights=kernels["duration_ns"].to_numpy(dtype=np.float64)[linked])
    calls = np.unique(op_rows)
    # one code per call for its (op name, input shapes), the shapes' text made once per distinct list
    shape_codes, shape_labels = shape_key(trace.ops["input_dims"].to_numpy(), calls)
    name_codes, name_labels = pd.factorize(np.array([str(n) for n in as_text(trace.ops["name"])[calls]], dtype=object))
    pair, inverse = np.unique(name_codes.astype(np.int64) * max(len(shape_labels), 1) + shape_codes, return_inverse=True)
    order = np.argsort(inverse.reshape(-1), kind="stable")
    cuts = np.r_[0, np.flatnonzero(np.diff(inverse.reshape(-1)[order])) + 1, len(order)]
    out: dict[tuple[str, str], list[float]] = {}
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        first = order[lo]
        key = (str(name_labels[name_codes[first]]), str(shape_labels[shape_codes[first]]))
        if wanted is None or key in wanted:
            out[key] = sketch(per_call[calls[order[lo:hi]]], points)
    return out
