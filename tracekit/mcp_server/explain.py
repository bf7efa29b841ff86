"""The `explain` tool's body: one kernel, op, block or step, with where its figures come from.

For a kernel or an op: its calls grouped by the op and input shapes that were costed (the
shapes and dtypes as the trace recorded them), each group's FLOPs and bytes per call with
the cost family's formula, the cost source, and the roofline arithmetic: the device's peak
for the cost kind and dtype, its memory bandwidth, t_min = max(FLOPs / peak, bytes /
bandwidth), the measured time, efficiency = t_min / time and the bound. For a block or a
step: its row of the report and the kernels that fill it. Names from the trace go out as
data fields only (fields.clean); a name not found is NotInTrace, whose text holds none.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tracekit.attribution.rules import phased
from tracekit.mcp_server.fields import NotInTrace, clean, table_rows
from tracekit.reports.text import mcp_text

KINDS = ("kernel", "op", "block", "step")
SHAPE_GROUPS = 10  # the most (op, shapes) groups one answer lists


def explain(a, kind: str, name: str, limit: int = SHAPE_GROUPS) -> dict[str, Any]:
    if kind == "kernel":
        return _calls_answer(a, "kernel", name, _matching(a.kernels["name"], name), limit)
    if kind == "op":
        return _calls_answer(a, "op", name, _matching(a.kernels["op_name"], name), limit)
    if kind == "block":
        return _block(a, name, limit)
    if kind == "step":
        return _step(a, name, limit)
    raise NotInTrace(f"kind must be one of {', '.join(KINDS)}")


def _matching(column: pd.Series, name: str) -> np.ndarray:
    """Rows whose text is `name` as the trace wrote it, or as this server showed it (escaped):
    the names are compared once each (the column's categories), not once per kernel."""
    names = column.cat.categories if isinstance(column.dtype, pd.CategoricalDtype) else pd.unique(column.dropna())
    hits = [t for t in names if isinstance(t, str) and (t == name or mcp_text(t) == name)]
    return column.isin(hits).to_numpy()


def _calls_answer(a, kind: str, name: str, rows: np.ndarray, limit: int) -> dict[str, Any]:
    k = a.kernels[rows & (a.kernels["kind"] == "kernel").to_numpy()]
    if not len(k):
        raise NotInTrace(f"no {kind} of that name ran a kernel in this trace; `top` lists the names")
    time = float(k["duration_ns"].sum())
    t_min = float(k["t_min_ns"].sum(min_count=1)) if k["t_min_ns"].notna().any() else None
    costed = k["flops"].notna()
    out = {
        "kind": kind, "name": name, "kernels": int(len(k)), "time_ns": time,
        "costed_time_share": float(k.loc[costed, "duration_ns"].sum() / time) if time else None,
        "flops": float(k.loc[costed, "flops"].sum()) if costed.any() else None,
        "bytes_read": float(k.loc[costed, "bytes_read"].sum()) if costed.any() else None,
        "bytes_written": float(k.loc[costed, "bytes_written"].sum()) if costed.any() else None,
        "t_min_ns": t_min, "efficiency": (t_min / time) if t_min is not None and time else None,
        "roofline": _roofline_terms(a),
        "by_shape": _by_shape(a, k, limit),
        "where": _where(k),
        "flags": [f.to_dict() for f in a.flags if name in (f.where, mcp_text(f.where))],
    }
    return clean(out)


def _roofline_terms(a) -> dict[str, Any]:
    dev = a.device
    if dev is None:
        return {"device": None, "why": "unknown GPU: pass device (see `tracekit devices`) for roofline figures"}
    return {"device": dev.name, "key": dev.key, "memory_bandwidth_bytes_per_s": dev.bandwidth,
            "sustained_bandwidth_factor": a.sustained,
            "matrix_peak_tflops": dict(dev.matrix_tflops), "vector_peak_tflops": dict(dev.vector_tflops),
            "t_min": "max(flops / peak_flops(cost_kind, dtype), bytes / memory_bandwidth)",
            "efficiency": "t_min / measured time (sustained: bandwidth x sustained_bandwidth_factor)"}


def _by_shape(a, k: pd.DataFrame, limit: int) -> list[dict[str, Any]]:
    """The calls grouped by (op, input shapes, input dtypes, cost): what each was costed from."""
    from tracekit.costs.registry import cost_formula

    ops = a.trace.ops
    op_index = k["op"].to_numpy()
    valid = (op_index >= 0) & (op_index < len(ops))
    dims = np.full(len(k), None, dtype=object)
    types = np.full(len(k), None, dtype=object)
    dims[valid] = ops["input_dims"].to_numpy(dtype=object)[op_index[valid]]
    types[valid] = ops["input_types"].to_numpy(dtype=object)[op_index[valid]]
    frame = pd.DataFrame({
        "op": k["op_name"].astype(object).to_numpy(), "kernel": k["name"].astype(object).to_numpy(),
        "dims": [repr(_plain(d)) for d in dims], "types": [repr(_plain(t)) for t in types],
        "cost_kind": k["cost_kind"].astype(object).to_numpy(), "dtype": k["dtype"].astype(object).to_numpy(),
        "cost_source": k["cost_source"].astype(object).to_numpy(), "unknown_reason": k["unknown_reason"].astype(object).to_numpy(),
        "time": k["duration_ns"].to_numpy(np.float64), "flops": k["flops"].to_numpy(np.float64),
        "read": k["bytes_read"].to_numpy(np.float64), "written": k["bytes_written"].to_numpy(np.float64),
        "t_min": k["t_min_ns"].to_numpy(np.float64), "t_min_sustained": k["t_min_sustained_ns"].to_numpy(np.float64),
        "bound": k["bound"].astype(object).to_numpy(),
    })
    first_dims = {key: (_plain(d), _plain(t)) for key, d, t in zip(zip(frame["op"], frame["dims"], frame["types"]), dims, types)}
    keys = ["op", "dims", "types", "cost_kind", "dtype", "cost_source"]
    groups = []
    for key, g in frame.fillna({"cost_kind": "", "dtype": "", "cost_source": ""}).groupby(keys, sort=False, dropna=False):
        op, dims_text, types_text, cost_kind, dtype, source = key
        calls, time = len(g), float(g["time"].sum())
        shape, dtypes = first_dims.get((op, dims_text, types_text), (None, None))
        t_min = float(g["t_min"].sum()) if g["t_min"].notna().all() else None
        groups.append({
            "op": op, "input_dims": shape, "input_types": dtypes, "kernels": calls, "time_ns": time,
            "kernel_names": sorted(set(g["kernel"]))[:5],
            "cost_kind": cost_kind or None, "dtype": dtype or None, "cost_source": source or None,
            "formula": cost_formula(op) if isinstance(op, str) else None,
            "flops_per_kernel": _per_call(g["flops"]), "bytes_read_per_kernel": _per_call(g["read"]),
            "bytes_written_per_kernel": _per_call(g["written"]),
            "t_min_ns": t_min, "efficiency": (t_min / time) if t_min is not None and time else None,
            "efficiency_sustained": (float(g["t_min_sustained"].sum()) / time) if g["t_min_sustained"].notna().all() and time else None,
            "bound": _one(g["bound"]),
            "unknown_reason": _one(g["unknown_reason"]),
        })
    groups.sort(key=lambda r: -r["time_ns"])
    return groups[:max(1, int(limit))]


def _per_call(values: pd.Series) -> float | list[float] | None:
    """One value when every call of the group costs the same (the usual case), else the spread."""
    v = values.dropna()
    if not len(v):
        return None
    lo, hi = float(v.min()), float(v.max())
    return lo if lo == hi else [lo, hi]


def _one(values: pd.Series):
    v = values.dropna().unique()
    return v[0] if len(v) == 1 else (list(v[:5]) if len(v) else None)


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _where(k: pd.DataFrame) -> list[dict[str, Any]]:
    g = k.groupby([k["phase"].astype(object), k["block"].astype(object)], dropna=False)["duration_ns"].agg(["count", "sum"])
    rows = [{"phase_block": phased(p, b), "kernels": int(r["count"]), "time_ns": float(r["sum"])} for (p, b), r in g.iterrows()]
    return sorted(rows, key=lambda r: -r["time_ns"])[:10]


def _block(a, name: str, limit: int) -> dict[str, Any]:
    b = a.blocks
    label = [phased(p, blk) for p, blk in zip(b["phase"], b["block"])]
    hit = [i for i, (text, blk) in enumerate(zip(label, b["block"])) if name in (text, mcp_text(text), blk, mcp_text(blk))]
    if not hit:
        raise NotInTrace("no block of that name in this trace; `top` with table 'blocks' lists them (as 'phase / block')")
    rows = b.iloc[hit]
    k = a.kernels[a.kernels["kind"] == "kernel"]
    inside = np.zeros(len(k), dtype=bool)
    for p, blk in zip(rows["phase"], rows["block"]):
        inside |= (k["phase"].astype(object) == p).to_numpy() & (k["block"].astype(object) == blk).to_numpy()
    from tracekit.analysis.rollup import kernel_summary

    return clean({"kind": "block", "name": name, "rows": rows.to_dict(orient="records"),
                  "kernels": table_rows(kernel_summary(k[inside]), limit), "roofline": _roofline_terms(a)})


def _step(a, name: str, limit: int) -> dict[str, Any]:
    s = a.steps
    if not len(s):
        raise NotInTrace("this trace has no steps (no step ranges, and no repeating structure stood in for them)")
    text = [str(v) for v in s["step"]]
    hit = [i for i, t in enumerate(text) if name in (t, mcp_text(t))]
    if not hit:
        raise NotInTrace(f"no step of that name; this trace has {len(s)} steps (`top` with table 'steps' lists them)")
    row = s.iloc[hit[0]].to_dict()
    k = a.kernels[(a.kernels["kind"] == "kernel").to_numpy()]
    start, end = float(row["start_ns"]), float(row["start_ns"]) + float(row["duration_ns"])
    inside = ((k["start"] >= start) & (k["start"] < end)).to_numpy()  # the kernels that started in its GPU window
    from tracekit.analysis.rollup import kernel_summary

    rates = a.throughput.steps if a.throughput is not None and len(a.throughput.steps) else None
    rate = rates[rates["step"].astype(str) == text[hit[0]]].to_dict(orient="records") if rates is not None else []
    return clean({"kind": "step", "name": name, "row": row, "kernels": table_rows(kernel_summary(k[inside]), limit),
                  "throughput": rate})
