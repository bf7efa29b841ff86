"""Analysis: the per-kernel and per-op tables and the coverage summary, built from a linked
trace, its costs and the device's roofline. Reports render only this."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from tracekit.attribution import Rules, attribute
from tracekit.costs.assign import kernel_costs
from tracekit.steps import kernel_steps, step_table
from tracekit.timeline import device_time, exclusive_time
from tracekit.hardware import DEFAULT_SUSTAINED, Device
from tracekit.column_text import as_text as text_of
from tracekit.roofline import OVER_PEAK, group_efficiency, roofline
from tracekit.trace import Trace
from tracekit.unknown import MIN_COVERAGE, covered, known_sum, majority_bound, mask_unknown

SCHEMA_VERSION = 2


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
    findings: Any = None  # tracekit.findings.Findings: the headline and what to fix first
    model: Any = None  # tracekit.model.predict.Prediction with --model, else None

    @property
    def prediction(self) -> pd.DataFrame:
        """Predicted vs measured per step (tracekit.model.predict.STEP_COLUMNS); empty without --model."""
        return self.model.steps if self.model is not None else pd.DataFrame()

    def to_json(self, top: int = 15) -> str:
        from tracekit.strict_json import dumps

        return dumps(self.to_dict(top))

    def to_dict(self, top: int = 15) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "headline": list(self.findings.headline) if self.findings else [],
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
            # How long the full lists are, so a reader (tracekit diff) knows whether an item
            # missing from a top list is absent or only below the cut.
            "listed_of": {"top_kernels": int(self.kernels["name"].nunique()) if len(self.kernels) else 0, "top_ops": len(self.ops)},
            "what_to_fix_first": self.findings.to_dict(top) if self.findings else None,
            "warnings": self.warnings,
            **({"model": self.model.to_dict()} if self.model is not None else {}),
        }


def build(trace: Trace, device: Device | None, sustained: float = DEFAULT_SUSTAINED, rules: Rules | None = None,
          model: Any = None) -> Analysis:
    """`model`: tracekit.model.ModelOptions; its costs fill the kernels the op shapes leave uncosted."""
    costs = kernel_costs(trace)
    labels = attribute(trace, costs["kernel_class"], rules)
    owner = kernel_steps(trace, trace.kernels)  # row in trace.ranges of the step that owns each kernel, -1 for none
    run = None
    if model is not None:
        from tracekit.model import run_model

        run = run_model(trace, costs, labels, owner, model, device)
    exclusive = exclusive_time(trace.kernels)
    roof = roofline(trace.kernels, costs, device, sustained)
    k = trace.kernels
    op_names = text_of(trace.ops["name"])
    op_name = np.where(k["op"].to_numpy() >= 0, op_names[np.maximum(k["op"].to_numpy(), 0)] if len(op_names) else None, None)
    kernels = pd.concat([k, costs, roof, labels], axis=1).assign(
        duration_ns=k["end"] - k["start"], exclusive_ns=exclusive, op_name=pd.Categorical(op_name))
    ops = _ops_table(kernels, trace) if len(k) else _cpu_ops_table(trace)
    devices = device_time(k, exclusive, int(trace.meta.get("span_ns") or 0))
    kernels["step"] = owner
    steps = step_table(trace, kernels, exclusive, device.bandwidth if device else None, sustained, owner)
    analysis = Analysis(kernels, ops, _coverage(kernels), device, sustained, trace.meta, list(trace.warnings),
                        blocks=block_table(kernels), steps=steps, devices=devices, trace=trace)
    from tracekit.collectives import collective_table, overlap_table

    analysis.collectives = collective_table(analysis)
    analysis.overlap = overlap_table(kernels)
    from tracekit.findings import compute

    analysis.findings = compute(analysis)
    if run is not None:
        from tracekit.model.predict import predict

        analysis.model = predict(run, kernels, exclusive, device, trace.ranges, sustained)
        analysis.warnings += [f"model: {note}" for note in run.notes]
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


def kernel_rollup(k: pd.DataFrame, keys: dict[str, Any], extra: dict[str, Any] | None = None) -> pd.DataFrame:
    """Group kernels by `keys` (name -> per-kernel values) and sum what rolls up: time,
    FLOPs, bytes, t_min; derive coverage, achieved rates and efficiency over the time of the
    kernels with a cost, and the majority bound. Figures from less than half of a group's
    time are unknown (tracekit.unknown)."""
    time = k["duration_ns"].to_numpy(dtype=np.float64)
    costed = k["flops"].notna().to_numpy()
    roofed = k["t_min_ns"].notna().to_numpy()
    bound = k["bound"].astype(object).to_numpy()
    frame = pd.DataFrame({
        **keys, "time_ns": time, "flops": k["flops"].to_numpy(), "bytes": (k["bytes_read"] + k["bytes_written"]).to_numpy(),
        "t_min_ns": k["t_min_ns"].to_numpy(), "t_min_sustained_ns": k["t_min_sustained_ns"].to_numpy(),
        "costed_ns": np.where(costed, time, 0.0), "roofed_ns": np.where(roofed, time, 0.0),
        **{f"{b}_ns": np.where(bound == b, time, 0.0) for b in BOUNDS},
    })
    aggs: dict[str, tuple[str, Any]] = {
        "count": ("time_ns", "size"), "time_ns": ("time_ns", "sum"),
        "flops": ("flops", known_sum), "bytes": ("bytes", known_sum),
        "t_min_ns": ("t_min_ns", known_sum), "t_min_sustained_ns": ("t_min_sustained_ns", known_sum),
        "costed_ns": ("costed_ns", "sum"), "roofed_ns": ("roofed_ns", "sum"),
        **{f"{b}_ns": (f"{b}_ns", "sum") for b in BOUNDS},
    }
    for name, values in (extra or {}).items():  # more per-kernel values to sum per group
        frame[name] = values
        aggs[name] = (name, "sum")
    g = frame.groupby(list(keys), sort=False).agg(**aggs).reset_index()
    costed_ns = g["costed_ns"].where(g["costed_ns"] > 0)
    roofed_ns = g["roofed_ns"].where(g["roofed_ns"] > 0)
    g["coverage"] = covered(g["costed_ns"], g["time_ns"])
    # Over the time of the kernels that have a cost: the FLOPs and bytes are theirs alone.
    g["achieved_tflops"] = g["flops"] / costed_ns / 1e3
    g["achieved_tbps"] = g["bytes"] / costed_ns / 1e3
    g["intensity"] = g["flops"] / g["bytes"].where(g["bytes"] > 0)
    g["efficiency"] = g["t_min_ns"] / roofed_ns
    g["efficiency_sustained"] = g["t_min_sustained_ns"] / roofed_ns
    g["bound"] = majority_bound({b: g[f"{b}_ns"] for b in BOUNDS}, g["roofed_ns"])
    g = mask_unknown(g, g["coverage"], UNKNOWN_BELOW_COVERAGE)
    return g.drop(columns=["costed_ns", "roofed_ns", *(f"{b}_ns" for b in BOUNDS)])


BOUNDS = ("compute", "memory", "comm")
# The figures that describe a group's work: unknown when its costs cover < half its time.
UNKNOWN_BELOW_COVERAGE = ["flops", "bytes", "t_min_ns", "t_min_sustained_ns", "achieved_tflops", "achieved_tbps", "intensity",
                          "efficiency", "efficiency_sustained", "bound"]
BLOCK_COLUMNS = ["phase", "block", "gpu_time_ns", "share", "kernel_time_ns", "count", "flops", "bytes", "achieved_tflops",
                 "achieved_tbps", "efficiency", "efficiency_sustained", "bound", "coverage"]


def block_table(k: pd.DataFrame) -> pd.DataFrame:
    """Phase x block: GPU time (overlap counted once), share of busy time, kernels, FLOPs,
    bytes, achieved TFLOP/s and TB/s, roofline efficiency over modeled kernels, bound, coverage."""
    if k.empty:
        return pd.DataFrame(columns=BLOCK_COLUMNS)
    g = kernel_rollup(k, {"phase": text_of(k["phase"]), "block": text_of(k["block"])},
                      extra={"gpu_time_ns": k["exclusive_ns"].to_numpy()})
    g = g.rename(columns={"time_ns": "kernel_time_ns"})
    busy = g["gpu_time_ns"].sum()
    g["share"] = g["gpu_time_ns"] / busy if busy else np.nan
    return g[BLOCK_COLUMNS].sort_values("gpu_time_ns", ascending=False).reset_index(drop=True)


def _shapes(dims: Any) -> str:
    return "" if dims is None else str(dims)


OP_COLUMNS = ["op", "shapes", "calls", "kernels", "time_ns", "flops", "bytes", "t_min_ns", "efficiency", "bound", "coverage"]


def _op_work(linked: pd.DataFrame) -> pd.DataFrame:
    """An op's work is its own cost. When a call has a shape-derived cost, its other
    activities (workspace memsets, layout transposes) add time but no work of their own: a
    convolution's bytes are its tensors', not its tensors' plus cuDNN's workspace fills."""
    from_shapes = text_of(linked["cost_source"]) == "op shapes"
    call_has_cost = pd.Series(from_shapes).groupby(linked["op"].to_numpy()).transform("any").to_numpy()
    overhead = call_has_cost & ~from_shapes
    if not overhead.any():
        return linked
    work = linked.copy()
    for column in ("flops", "bytes_read", "bytes_written", "t_min_ns", "t_min_sustained_ns"):
        work[column] = work[column].to_numpy(dtype=np.float64)
        work.loc[overhead, column] = 0.0
    work["bound"] = work["bound"].astype(object).where(~overhead, None)
    return work


def _ops_table(kernels: pd.DataFrame, trace: Trace) -> pd.DataFrame:
    linked = kernels[kernels["op"] >= 0]
    if linked.empty:
        return pd.DataFrame(columns=OP_COLUMNS)
    dims = trace.ops["input_dims"].to_numpy()
    op_rows = linked["op"].to_numpy()
    shape_text = {row: _shapes(dims[row]) for row in np.unique(op_rows)}
    g = kernel_rollup(_op_work(linked), {"op": text_of(linked["op_name"]), "shapes": [shape_text[r] for r in op_rows]})
    calls = pd.DataFrame({"op": text_of(linked["op_name"]), "shapes": [shape_text[r] for r in op_rows], "row": op_rows})
    g["calls"] = calls.groupby(["op", "shapes"], sort=False)["row"].nunique().to_numpy()
    g = g.rename(columns={"count": "kernels"})
    return g[OP_COLUMNS].sort_values("time_ns", ascending=False).reset_index(drop=True)


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
        flops=("flops", known_sum), bytes=("bytes", known_sum),
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
    by_source = pd.Series(time[is_kernel & modeled]).groupby(text_of(k["cost_source"])[is_kernel & modeled]).sum()
    unmodeled = pd.DataFrame({"name": text_of(k["name"]), "reason": text_of(k["unknown_reason"]), "time_ns": time})[is_kernel & ~modeled]
    top_unmodeled = unmodeled.groupby(["name", "reason"]).agg(time_ns=("time_ns", "sum"), count=("time_ns", "size")).reset_index()
    top_unmodeled = top_unmodeled.sort_values("time_ns", ascending=False).head(10)
    top_unmodeled["share"] = top_unmodeled["time_ns"] / total if total else np.nan
    with_tmin = is_kernel & k["t_min_ns"].notna().to_numpy()
    over = with_tmin & (k["efficiency"].to_numpy() > OVER_PEAK)
    known = total > 0 and modeled_time / total >= MIN_COVERAGE
    return {
        "kernel_time_ns": total,
        "modeled_time_ns": modeled_time,
        "modeled_share": modeled_time / total if total else None,
        "modeled_share_by_source": {s: float(v) / total for s, v in by_source.items()} if total else {},
        "kernels": int(is_kernel.sum()),
        "kernels_modeled": int((is_kernel & modeled).sum()),
        "copies_time_ns": float(time[~is_kernel].sum()),
        "over_peak_share": float(time[over].sum() / time[with_tmin].sum()) if with_tmin.any() else None,
        "over_peak_kernels": int(over.sum()),
        # Efficiency of the whole capture is a measurement only when most kernel time is costed.
        "efficiency": group_efficiency(k["t_min_ns"][is_kernel], k["duration_ns"][is_kernel]) if known else None,
        "efficiency_sustained": group_efficiency(k["t_min_sustained_ns"][is_kernel], k["duration_ns"][is_kernel]) if known else None,
        "min_coverage": MIN_COVERAGE,
        "top_unmodeled": _records(top_unmodeled),
    }


def top_kernels(analysis: Analysis, n: int) -> pd.DataFrame:
    k = analysis.kernels
    g = kernel_rollup(k, {"name": text_of(k["name"])},
                      extra={"over_peak": k["over_peak"].to_numpy().astype(np.int64)})
    g["kernel_class"] = k.groupby(text_of(k["name"]), sort=False)["kernel_class"].first().astype(str).to_numpy()
    total = g["time_ns"].sum()
    g["share"] = g["time_ns"] / total if total else np.nan
    cols = ["name", "kernel_class", "count", "time_ns", "flops", "bytes", "t_min_ns", "t_min_sustained_ns", "over_peak", "share",
            "achieved_tflops", "achieved_tbps", "intensity", "efficiency", "efficiency_sustained", "bound", "coverage"]
    return g[cols].sort_values("time_ns", ascending=False).head(n).reset_index(drop=True)


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    out = []
    for row in frame.to_dict(orient="records"):
        out.append({k: (None if isinstance(v, float) and np.isnan(v) else (v.item() if hasattr(v, "item") else v)) for k, v in row.items()})
    return out
