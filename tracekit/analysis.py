"""Analysis: the per-kernel and per-op tables and the coverage summary, built from a linked
trace, its costs and the device's roofline. Reports render only this."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from tracekit.attribution import Rules, attribute
from tracekit.costs.assign import kernel_costs
from tracekit.steps import step_table
from tracekit.timeline import device_time, exclusive_time
from tracekit.hardware import DEFAULT_SUSTAINED, Device
from tracekit.roofline import OVER_PEAK, group_efficiency, roofline
from tracekit.trace import Trace

SCHEMA_VERSION = 1


@dataclass
class Analysis:
    kernels: pd.DataFrame  # one row per GPU activity: trace columns + costs + roofline + op name
    ops: pd.DataFrame  # one row per (op name, input shapes) that launched GPU work
    coverage: dict[str, Any]
    device: Device | None  # None for a CPU-only profile
    sustained: float
    meta: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    blocks: pd.DataFrame = field(default_factory=pd.DataFrame)  # phase x block
    steps: pd.DataFrame = field(default_factory=pd.DataFrame)
    devices: pd.DataFrame = field(default_factory=pd.DataFrame)  # busy / idle per device
    trace: Trace | None = field(default=None, repr=False)  # the linked trace it was built from
    collectives: pd.DataFrame = field(default_factory=pd.DataFrame)  # one row per collective kernel
    overlap: pd.DataFrame = field(default_factory=pd.DataFrame)  # comm hidden by compute, per device

    def to_json(self, top: int = 15) -> str:
        from tracekit.strict_json import dumps

        return dumps(self.to_dict(top))

    def to_dict(self, top: int = 15) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "trace": {k: self.meta.get(k) for k in ("path", "format", "schema", "rank", "world_size", "span_ns", "tool_versions")},
            "device": {"key": self.device.key, "name": self.device.name, "memory_gbps": self.device.memory_gbps,
                       "sustained_bandwidth_factor": self.sustained, "source": self.device.source} if self.device else None,
            "coverage": self.coverage,
            "blocks": _records(self.blocks),
            "devices": _records(self.devices),
            "steps": _records(self.steps),
            "overlap": _records(self.overlap),
            "collectives": _collective_summary(self.collectives),
            "top_kernels": _records(top_kernels(self, top)),
            "top_ops": _records(self.ops.head(top)),
            "warnings": self.warnings,
        }


def build(trace: Trace, device: Device | None, sustained: float = DEFAULT_SUSTAINED, rules: Rules | None = None) -> Analysis:
    costs = kernel_costs(trace)
    labels = attribute(trace, costs["kernel_class"], rules)
    exclusive = exclusive_time(trace.kernels)
    roof = roofline(trace.kernels, costs, device, sustained)
    k = trace.kernels
    op_names = trace.ops["name"].astype(str).to_numpy()
    op_name = np.where(k["op"].to_numpy() >= 0, op_names[np.maximum(k["op"].to_numpy(), 0)] if len(op_names) else None, None)
    kernels = pd.concat([k, costs, roof, labels], axis=1).assign(
        duration_ns=k["end"] - k["start"], exclusive_ns=exclusive, op_name=pd.Categorical(op_name))
    ops = _ops_table(kernels, trace) if len(k) else _cpu_ops_table(trace)
    devices = device_time(k, exclusive, int(trace.meta.get("span_ns") or 0))
    steps = step_table(trace, kernels, exclusive, device.bandwidth if device else None, sustained)
    analysis = Analysis(kernels, ops, _coverage(kernels), device, sustained, trace.meta, list(trace.warnings),
                        blocks=block_table(kernels), steps=steps, devices=devices, trace=trace)
    from tracekit.collectives import collective_table, overlap_table

    analysis.collectives = collective_table(analysis)
    analysis.overlap = overlap_table(kernels)
    return analysis


def _collective_summary(c: pd.DataFrame) -> list[dict[str, Any]]:
    """Per (collective, group, message size): count, time, mean bus bandwidth, link efficiency."""
    if c.empty:
        return []
    g = c.fillna({"collective": "unknown", "group": ""}).groupby(["collective", "group", "message_bytes"], dropna=False).agg(
        count=("row", "size"), time_ns=("duration_ns", "sum"), busbw_gbps=("busbw_gbps", "mean"),
        algbw_gbps=("algbw_gbps", "mean"), link_efficiency=("link_efficiency", "mean"), group_size=("group_size", "first"),
        size_source=("size_source", "first"), group_source=("group_source", "first"),
    ).reset_index().sort_values("time_ns", ascending=False)
    return _records(g)


def block_table(k: pd.DataFrame) -> pd.DataFrame:
    """Phase x block: GPU time (overlap counted once), share of busy time, kernels, FLOPs,
    bytes, achieved TFLOP/s and TB/s, roofline efficiency over modeled kernels, bound, coverage."""
    if k.empty:
        return pd.DataFrame(columns=["phase", "block", "gpu_time_ns", "share", "kernel_time_ns", "count", "flops", "bytes",
                                     "achieved_tflops", "achieved_tbps", "efficiency", "efficiency_sustained", "bound", "coverage"])
    modeled = k["t_min_ns"].notna()
    frame = pd.DataFrame({
        "phase": k["phase"].astype(str), "block": k["block"].astype(str), "gpu_time_ns": k["exclusive_ns"],
        "kernel_time_ns": k["duration_ns"], "flops": k["flops"], "bytes": k["bytes_read"] + k["bytes_written"],
        "t_min_ns": k["t_min_ns"], "t_min_sustained_ns": k["t_min_sustained_ns"],
        "modeled_ns": k["duration_ns"].where(modeled, 0), "compute_ns": k["duration_ns"].where(k["bound"] == "compute", 0),
    })
    g = frame.groupby(["phase", "block"]).agg(
        gpu_time_ns=("gpu_time_ns", "sum"), kernel_time_ns=("kernel_time_ns", "sum"), count=("kernel_time_ns", "size"),
        flops=("flops", _known_sum), bytes=("bytes", _known_sum),
        t_min_ns=("t_min_ns", _known_sum), t_min_sustained_ns=("t_min_sustained_ns", _known_sum),
        modeled_ns=("modeled_ns", "sum"), compute_ns=("compute_ns", "sum"),
    ).reset_index()
    busy = g["gpu_time_ns"].sum()
    g["share"] = g["gpu_time_ns"] / busy if busy else 0.0
    # Over the time of the kernels that have a cost: the FLOPs and bytes are theirs alone.
    modeled = g["modeled_ns"].where(g["modeled_ns"] > 0)
    g["achieved_tflops"] = g["flops"] / modeled / 1e3
    g["achieved_tbps"] = g["bytes"] / modeled / 1e3
    g["efficiency"] = g["t_min_ns"] / g["modeled_ns"].where(g["modeled_ns"] > 0)
    g["efficiency_sustained"] = g["t_min_sustained_ns"] / g["modeled_ns"].where(g["modeled_ns"] > 0)
    g["bound"] = majority_bound(g["t_min_ns"], g["compute_ns"], g["modeled_ns"])
    g["coverage"] = g["modeled_ns"] / g["kernel_time_ns"].where(g["kernel_time_ns"] > 0)
    cols = ["phase", "block", "gpu_time_ns", "share", "kernel_time_ns", "count", "flops", "bytes", "achieved_tflops",
            "achieved_tbps", "efficiency", "efficiency_sustained", "bound", "coverage"]
    return g[cols].sort_values("gpu_time_ns", ascending=False).reset_index(drop=True)


def majority_bound(t_min: pd.Series, compute_ns: pd.Series, time_ns: pd.Series) -> np.ndarray:
    """A group's bound: compute when compute-bound kernels take at least half its time;
    None when none of its kernels has a roofline."""
    return np.where(t_min.isna(), None, np.where(compute_ns * 2 >= time_ns, "compute", "memory"))


def _known_sum(values: pd.Series) -> float:
    """Sum of the known values; NaN (unknown) when none is known, not 0."""
    return values.sum(min_count=1)


def _shapes(dims: Any) -> str:
    return "" if dims is None else str(dims)


def _ops_table(kernels: pd.DataFrame, trace: Trace) -> pd.DataFrame:
    linked = kernels[kernels["op"] >= 0]
    if linked.empty:
        return pd.DataFrame(columns=["op", "shapes", "calls", "kernels", "time_ns", "flops", "bytes", "t_min_ns", "efficiency", "bound"])
    dims = trace.ops["input_dims"].to_numpy()
    frame = pd.DataFrame({
        "op": linked["op_name"].astype(str).to_numpy(),
        "shapes": [_shapes(dims[i]) for i in linked["op"].to_numpy()],
        "op_row": linked["op"].to_numpy(),
        "time_ns": linked["duration_ns"].to_numpy(),
        "flops": linked["flops"].to_numpy(), "bytes": (linked["bytes_read"] + linked["bytes_written"]).to_numpy(),
        "t_min_ns": linked["t_min_ns"].to_numpy(),
        "compute": (linked["bound"] == "compute").to_numpy() * linked["duration_ns"].to_numpy(),
    })
    grouped = frame.groupby(["op", "shapes"], sort=False).agg(
        calls=("op_row", "nunique"), kernels=("op_row", "size"), time_ns=("time_ns", "sum"),
        flops=("flops", _known_sum), bytes=("bytes", _known_sum),
        t_min_ns=("t_min_ns", _known_sum), compute_ns=("compute", "sum"),
    ).reset_index()
    grouped["efficiency"] = grouped["t_min_ns"] / grouped["time_ns"]
    grouped["bound"] = majority_bound(grouped["t_min_ns"], grouped["compute_ns"], grouped["time_ns"])
    return grouped.drop(columns="compute_ns").sort_values("time_ns", ascending=False).reset_index(drop=True)


def _cpu_ops_table(trace: Trace) -> pd.DataFrame:
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
        flops=("flops", _known_sum), bytes=("bytes", _known_sum),
    ).reset_index()
    grouped["kernels"] = 0
    grouped["t_min_ns"] = np.nan
    grouped["efficiency"] = np.nan
    grouped["bound"] = None
    return grouped.sort_values("time_ns", ascending=False).reset_index(drop=True)


def _coverage(k: pd.DataFrame) -> dict[str, Any]:
    is_kernel = (k["kind"] == "kernel").to_numpy()
    time = k["duration_ns"].to_numpy(dtype=np.float64)
    modeled = k["flops"].notna().to_numpy()
    total = float(time[is_kernel].sum())
    modeled_time = float(time[is_kernel & modeled].sum())
    by_source = pd.Series(time[is_kernel & modeled]).groupby(k["cost_source"].astype(str).to_numpy()[is_kernel & modeled]).sum()
    unmodeled = pd.DataFrame({"name": k["name"].astype(str), "reason": k["unknown_reason"].astype(str), "time_ns": time})[is_kernel & ~modeled]
    top_unmodeled = unmodeled.groupby(["name", "reason"]).agg(time_ns=("time_ns", "sum"), count=("time_ns", "size")).reset_index()
    top_unmodeled = top_unmodeled.sort_values("time_ns", ascending=False).head(10)
    top_unmodeled["share"] = top_unmodeled["time_ns"] / total if total else 0.0
    with_tmin = is_kernel & k["t_min_ns"].notna().to_numpy()
    over = with_tmin & (k["efficiency"].to_numpy() > OVER_PEAK)
    return {
        "kernel_time_ns": total,
        "modeled_time_ns": modeled_time,
        "modeled_share": modeled_time / total if total else 0.0,
        "modeled_share_by_source": {s: float(v) / total for s, v in by_source.items()} if total else {},
        "kernels": int(is_kernel.sum()),
        "kernels_modeled": int((is_kernel & modeled).sum()),
        "copies_time_ns": float(time[~is_kernel].sum()),
        "over_peak_share": float(time[over].sum() / time[with_tmin].sum()) if with_tmin.any() else 0.0,
        "over_peak_kernels": int(over.sum()),
        "efficiency": group_efficiency(k["t_min_ns"][is_kernel], k["duration_ns"][is_kernel]),
        "efficiency_sustained": group_efficiency(k["t_min_sustained_ns"][is_kernel], k["duration_ns"][is_kernel]),
        "top_unmodeled": _records(top_unmodeled),
    }


def top_kernels(analysis: Analysis, n: int) -> pd.DataFrame:
    k = analysis.kernels
    frame = pd.DataFrame({
        "name": k["name"].astype(str), "class": k["kernel_class"].astype(str), "time_ns": k["duration_ns"],
        "flops": k["flops"], "bytes": k["bytes_read"] + k["bytes_written"], "t_min_ns": k["t_min_ns"],
        "t_min_sustained_ns": k["t_min_sustained_ns"], "compute": (k["bound"] == "compute") * k["duration_ns"],
        "over_peak": k["over_peak"],
    })
    g = frame.groupby("name", sort=False).agg(
        kernel_class=("class", "first"), count=("time_ns", "size"), time_ns=("time_ns", "sum"),
        flops=("flops", _known_sum), bytes=("bytes", _known_sum),
        t_min_ns=("t_min_ns", _known_sum), t_min_sustained_ns=("t_min_sustained_ns", _known_sum),
        compute_ns=("compute", "sum"), over_peak=("over_peak", "sum"),
    ).reset_index()
    total = frame["time_ns"].sum()
    g["share"] = g["time_ns"] / total if total else 0.0
    g["achieved_tflops"] = g["flops"] / g["time_ns"] / 1e3
    g["achieved_tbps"] = g["bytes"] / g["time_ns"] / 1e3
    g["intensity"] = g["flops"] / g["bytes"]
    g["efficiency"] = g["t_min_ns"] / g["time_ns"]
    g["efficiency_sustained"] = g["t_min_sustained_ns"] / g["time_ns"]
    g["bound"] = majority_bound(g["t_min_ns"], g["compute_ns"], g["time_ns"])
    return g.drop(columns="compute_ns").sort_values("time_ns", ascending=False).head(n).reset_index(drop=True)


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    out = []
    for row in frame.to_dict(orient="records"):
        out.append({k: (None if isinstance(v, float) and np.isnan(v) else (v.item() if hasattr(v, "item") else v)) for k, v in row.items()})
    return out
