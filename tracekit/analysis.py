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
from tracekit.grouping import Key, group_rows, key_of, label_column
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


def rollup_columns(k: pd.DataFrame) -> dict[str, np.ndarray]:
    """The per-kernel values kernel_rollup sums, as plain arrays (taken once per table)."""
    return {
        "time": k["duration_ns"].to_numpy(dtype=np.float64), "flops": k["flops"].to_numpy(dtype=np.float64),
        "bytes": (k["bytes_read"] + k["bytes_written"]).to_numpy(dtype=np.float64),
        "t_min_ns": k["t_min_ns"].to_numpy(dtype=np.float64), "t_min_sustained_ns": k["t_min_sustained_ns"].to_numpy(dtype=np.float64),
        "bound": k["bound"].astype(object).to_numpy(),
    }


def kernel_rollup(columns: dict[str, np.ndarray], keys: dict[str, Key], extra: dict[str, Any] | None = None,
                  firsts: dict[str, np.ndarray] | None = None) -> pd.DataFrame:
    """Group kernels by `keys` (column name -> codes and labels, tracekit.grouping) and sum
    what rolls up (`columns`, from rollup_columns): time, FLOPs, bytes, t_min; derive
    coverage, achieved rates and efficiency over the time of the kernels with a cost, and
    the majority bound. Figures from less than half of a group's time are unknown
    (tracekit.unknown). Rows with a missing key are left out; groups come in order of first
    appearance. `extra`: more per-kernel values to sum; `firsts`: per-kernel values taken
    from each group's first kernel."""
    time, bound = columns["time"], columns["bound"]
    groups = group_rows(list(keys.values()), len(time))
    count, total = groups.size, groups.sum(time)
    flops, nbytes = groups.known_sum(columns["flops"]), groups.known_sum(columns["bytes"])
    t_min, t_min_sustained = groups.known_sum(columns["t_min_ns"]), groups.known_sum(columns["t_min_sustained_ns"])
    costed_ns, roofed_ns = groups.sum(time, ~np.isnan(columns["flops"])), groups.sum(time, ~np.isnan(columns["t_min_ns"]))
    by_bound = {b: groups.sum(time, bound == b) for b in BOUNDS}
    # Over the time of the kernels that have a cost: the FLOPs and bytes are theirs alone.
    costed_or_nan = np.where(costed_ns > 0, costed_ns, np.nan)
    roofed_or_nan = np.where(roofed_ns > 0, roofed_ns, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        g = pd.DataFrame({
            **{name: label_column(key, groups.first) for name, key in keys.items()},
            "count": count, "time_ns": total, "flops": flops, "bytes": nbytes, "t_min_ns": t_min, "t_min_sustained_ns": t_min_sustained,
            **{name: groups.sum(np.asarray(values)) for name, values in (extra or {}).items()},
            **{name: np.asarray(values)[groups.first] for name, values in (firsts or {}).items()},
            "coverage": covered(costed_ns, total),
            "achieved_tflops": flops / costed_or_nan / 1e3, "achieved_tbps": nbytes / costed_or_nan / 1e3,
            "intensity": flops / np.where(nbytes > 0, nbytes, np.nan),
            "efficiency": t_min / roofed_or_nan, "efficiency_sustained": t_min_sustained / roofed_or_nan,
            "bound": majority_bound(by_bound, roofed_ns),
        })
    return mask_unknown(g, g["coverage"], UNKNOWN_BELOW_COVERAGE)


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
    g = kernel_rollup(rollup_columns(k), {"phase": key_of(k["phase"]), "block": key_of(k["block"])},
                      extra={"gpu_time_ns": k["exclusive_ns"].to_numpy()})
    g = g.rename(columns={"time_ns": "kernel_time_ns"})
    busy = g["gpu_time_ns"].sum()
    g["share"] = g["gpu_time_ns"] / busy if busy else np.nan
    return g[BLOCK_COLUMNS].sort_values("gpu_time_ns", ascending=False).reset_index(drop=True)


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


OP_COLUMNS = ["op", "shapes", "calls", "kernels", "time_ns", "flops", "bytes", "t_min_ns", "efficiency", "bound", "coverage"]


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


def _ops_table(kernels: pd.DataFrame, trace: Trace) -> pd.DataFrame:
    linked = np.flatnonzero(kernels["op"].to_numpy() >= 0)
    if not len(linked):
        return pd.DataFrame(columns=OP_COLUMNS)
    op_rows = kernels["op"].to_numpy()[linked]
    names, name_labels = key_of(kernels["op_name"])
    keys = {"op": (names[linked], name_labels), "shapes": shape_key(trace.ops["input_dims"].to_numpy(), op_rows)}
    columns = {c: v[linked] for c, v in rollup_columns(kernels).items()}
    g = kernel_rollup(_op_work(columns, kernels["cost_source"].iloc[linked], op_rows), keys)
    g["calls"] = group_rows(list(keys.values()), len(linked)).nunique(op_rows)
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
    source = key_of(k["cost_source"])
    by_source = _summed_by(source, time, is_kernel & modeled)
    name, reason = key_of(k["name"]), key_of(k["unknown_reason"])
    unmodeled = is_kernel & ~modeled
    groups = group_rows([(name[0][unmodeled], name[1]), (reason[0][unmodeled], reason[1])], int(unmodeled.sum()))
    rows = np.flatnonzero(unmodeled)[groups.first]
    names, reasons = label_column(name, rows), label_column(reason, rows)
    # in the order groupby(sort=True) gives (by name, then reason), so ties sort as they always did
    order = sorted(range(len(rows)), key=lambda i: (names[i], reasons[i]))
    top_unmodeled = pd.DataFrame({"name": names[order], "reason": reasons[order],
                                  "time_ns": groups.sum(time[unmodeled])[order], "count": groups.size[order]})
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


def _summed_by(key: Key, values: np.ndarray, mask: np.ndarray) -> dict[str, float]:
    """{label: sum of values} over the masked rows with a known key, by label (groupby's order)."""
    codes, labels = key
    rows = mask & (codes >= 0)
    sums = np.bincount(codes[rows], weights=values[rows], minlength=len(labels) - 1)
    present = np.bincount(codes[rows], minlength=len(labels) - 1) > 0
    return dict(sorted((labels[c], sums[c]) for c in np.flatnonzero(present)))


def top_kernels(analysis: Analysis, n: int) -> pd.DataFrame:
    k = analysis.kernels
    g = kernel_rollup(rollup_columns(k), {"name": key_of(k["name"])},
                      extra={"over_peak": k["over_peak"].to_numpy().astype(np.int64)},
                      firsts={"kernel_class": text_of(k["kernel_class"])})
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
