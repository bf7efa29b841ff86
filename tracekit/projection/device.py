"""The same run on another GPU: per kernel, keep the achieved fraction of its binding roof.

    efficiency   e  = t_min(source) / measured          (tracekit.hardware.roofline)
    projected    t' = t_min(target) / e = measured * t_min(target) / t_min(source)

t_min on each device is max(flops / peak(kind, dtype), bytes / bandwidth) with that device's
matrix or vector peak for the kernel's dtype, HBM bandwidth, interconnect (collectives) or
host link (host copies), so a kernel can change roof (memory-bound here, compute-bound
there). A kernel without a cost, or whose dtype the target has no peak for, gets a range:
unchanged ... scaled by the bandwidth ratio of its link (point: the middle of the two).
Step times are GPU windows (as in `analyze`: the step's GPU-side annotation or its kernels'
span) moved with the step's kernels replayed at their projected durations
(tracekit.projection.replay): host time, launch overhead and host-bound gaps do not move.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from tracekit.hardware import Device
from tracekit.hardware.roofline import roofline
from tracekit.projection.replay import launch_starts, replay
from tracekit.strict_json import dumps, records
from tracekit.trace.column_text import as_text
from tracekit.trace.step_ownership import gpu_windows, step_rows
from tracekit.reports.format import UNKNOWN  # a kernel without a phase or block label

HOST_COPIES = ["HtoD", "DtoH", "HtoH", "Pageable", "Pinned"]
PROJECTED_BLOCK_COLUMNS = ["phase", "block", "kernels", "measured_ns", "projected_ns", "low_ns", "high_ns", "ratio", "roof", "costed_share"]
PROJECTED_STEP_COLUMNS = ["step", "measured_ns", "host_ns", "projected_ns", "low_ns", "high_ns", "busy_ns", "busy_projected_ns", "ratio",
                "host_bound", "items", "unit", "throughput", "throughput_projected", "throughput_low", "throughput_high"]


@dataclass
class Projection:
    source: Device
    target: Device
    kernels: pd.DataFrame  # per kernel: ratio, low, high, roof label
    blocks: pd.DataFrame
    stages: pd.DataFrame
    steps: pd.DataFrame
    totals: dict[str, Any]
    assumptions: list[str] = field(default_factory=list)
    path: str | None = None
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "trace": self.path,
            "source": {"key": self.source.key, "name": self.source.name},
            "target": {"key": self.target.key, "name": self.target.name},
            "totals": self.totals, "steps": records(self.steps), "stages": records(self.stages),
            "blocks": records(self.blocks), "assumptions": self.assumptions,
        }

    def to_json(self) -> str:
        return dumps(self.to_dict())


def target_device(to: str, device_file: str | None = None, source: str = "trace") -> Device:
    """The GPU named by --to (built-in table plus --device-file); an unknown one is a TraceError
    that names --to and `tracekit devices` (not --device: that flag names the source GPU)."""
    from tracekit.errors import TraceError
    from tracekit.hardware import builtin_devices, closest, find_device, load_device_file

    devices = builtin_devices()
    if device_file:
        devices.update(load_device_file(device_file))
    found = find_device(to, devices)
    if found is None:
        near = closest(to, devices)
        hint = f"closest known: {', '.join(near)}" if near else "no known device of the same product line"
        raise TraceError(source, f"unknown target GPU {to[:80]!r} for --to ({hint}); pass --to with a key or name from "
                                 "`tracekit devices`, or describe the GPU in --device-file FILE.toml")
    return found


def _ratio_of(a: float | None, b: float | None) -> float:
    return float(a / b) if a and b else float("nan")


def kernel_ratios(kernels: pd.DataFrame, source: Device, target: Device) -> pd.DataFrame:
    """Per kernel: projected / measured time (point, low, high) and the roof it rests on."""
    n = len(kernels)
    t_src = kernels["t_min_ns"].to_numpy(dtype=np.float64) if source is not None else np.full(n, np.nan)
    roof_t = roofline(kernels, kernels, target)
    t_dst = roof_t["t_min_ns"].to_numpy(dtype=np.float64)
    kind = kernels["cost_kind"].astype(object).to_numpy()
    dtype = kernels["dtype"].astype(object).to_numpy()
    host = kernels["copy_kind"].isin(HOST_COPIES).to_numpy()
    comm = (kind == "comm") | kernels["collective"].notna().to_numpy()
    link_ratio = np.full(n, _ratio_of(source.bandwidth, target.bandwidth))
    link_ratio[comm] = _ratio_of(source.interconnect, target.interconnect)
    link_ratio[host] = _ratio_of(source.host_link_gbps, target.host_link_gbps)
    link_ratio = np.where(np.isnan(link_ratio), 1.0, link_ratio)

    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(t_src > 0, t_dst / t_src, np.where(t_src == 0, 1.0, np.nan))
    known = ~np.isnan(ratio)
    low = np.where(known, ratio, np.minimum(1.0, link_ratio))
    high = np.where(known, ratio, np.maximum(1.0, link_ratio))
    point = np.where(known, ratio, (low + high) / 2)

    bound = roof_t["bound"].astype(object).to_numpy()
    link = np.where(host, "host link", np.where(comm, "interconnect", "HBM"))
    roof = np.where(~known, np.char.add("no cost: 1x…", link.astype(str)),
                    np.where(bound == "compute", np.char.add(np.where(kind == "matrix", "matrix ", "vector ").astype(str),
                                                             pd.Series(dtype).fillna("?").astype(str).to_numpy()),
                             np.where(bound == "comm", "interconnect", link.astype(str))))
    return pd.DataFrame({"ratio": point, "low": low, "high": high, "roof": roof, "costed": known}, index=kernels.index)


def aggregate(kernels: pd.DataFrame, r: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    excl = kernels["exclusive_ns"].to_numpy(dtype=np.float64)
    frame = pd.DataFrame({**{c: kernels[c].astype(object).fillna(UNKNOWN).to_numpy() for c in by},
                          "measured_ns": excl, "projected_ns": excl * r["ratio"].to_numpy(),
                          "low_ns": excl * r["low"].to_numpy(), "high_ns": excl * r["high"].to_numpy(),
                          "costed_ns": np.where(r["costed"].to_numpy(), excl, 0.0), "roof": r["roof"].to_numpy()})
    grouped = frame.groupby(by, sort=False)
    out = grouped[["measured_ns", "projected_ns", "low_ns", "high_ns", "costed_ns"]].sum()
    out["kernels"] = grouped.size()
    # the roof most of the group's time rests on
    roof_time = frame.groupby(by + ["roof"], sort=False)["measured_ns"].sum().reset_index()
    top = roof_time.sort_values("measured_ns", ascending=False).drop_duplicates(by).set_index(by)["roof"]
    out["roof"] = top.reindex(out.index)
    out = out.reset_index()
    with np.errstate(divide="ignore", invalid="ignore"):
        out["ratio"] = np.where(out["measured_ns"] > 0, out["projected_ns"] / out["measured_ns"], np.nan)
        out["costed_share"] = np.where(out["measured_ns"] > 0, out["costed_ns"] / out["measured_ns"], np.nan)
    return out.sort_values("measured_ns", ascending=False).reset_index(drop=True)


def _step_times(a, new_start: np.ndarray, new_end: np.ndarray) -> tuple[list, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per step: (name, measured, projected GPU window, host-bound, host range) from the replayed kernels.

    A step's time is its GPU window (tracekit.trace.step_ownership: its GPU-side annotation
    widened to its kernels, else its kernels' span), the figure `analyze` reports. The
    projected window keeps its margins around the step's kernels and moves with them:
        start' = start + (first start' - first start),   end' = end + (last end' - last end)
    of the kernels the step owns, replayed (tracekit.projection.replay): a kernel never
    starts before its launch, so a step whose GPU waited for the host barely moves. A step
    with no kernel keeps its window (its host range). The host range is measured only."""
    trace = a.trace
    rows = step_rows(trace) if trace is not None else np.zeros(0, dtype=np.int64)
    if not len(rows):
        return [], np.zeros(0), np.zeros(0), np.zeros(0, dtype=bool), np.zeros(0)
    r = trace.ranges
    names = as_text(r["name"])
    k = a.kernels
    owner = k["step"].to_numpy()
    lo, hi, _ = gpu_windows(trace.ranges, k, rows, owner)
    start, end = k["start"].to_numpy(dtype=np.float64), k["end"].to_numpy(dtype=np.float64)
    excl = k["exclusive_ns"].to_numpy(dtype=np.float64)
    measured, projected, host_bound = [], [], []
    for i, s in enumerate(rows):
        mine = owner == s
        wall = float(hi[i] - lo[i])
        measured.append(wall)
        if not mine.any():
            projected.append(wall), host_bound.append(True)
            continue
        first, last = start[mine].min(), end[mine].max()
        new_lo = lo[i] + new_start[mine].min() - first
        new_hi = hi[i] + new_end[mine].max() - last
        projected.append(float(new_hi - new_lo))
        # host-bound: the GPU was idle, waiting for launches, most of its kernels' window
        host_bound.append(bool(excl[mine].sum() < 0.5 * (last - first)))
    host = (r["end"].to_numpy()[rows] - r["start"].to_numpy()[rows]).astype(np.float64)
    return [names[s] for s in rows], np.array(measured), np.array(projected), np.array(host_bound), host


def project_device(a, target: Device, items: pd.DataFrame | None = None) -> Projection:
    """Project Analysis `a` (measured on a.device) onto `target`. `items`: per step name, the
    work it did (columns step, items, unit) for throughput; default one step per step."""
    source = a.device
    k = a.kernels
    r = kernel_ratios(k, source, target)
    launched = launch_starts(k, a.trace.launches if a.trace is not None else None)
    duration = k["duration_ns"].to_numpy(dtype=np.float64)
    ends = {col: replay(k, launched, duration * r[col].to_numpy()) for col in ("ratio", "low", "high")}
    steps = steps_frame(a, r, ends, items)
    blocks = aggregate(k, r, ["phase", "block"])[PROJECTED_BLOCK_COLUMNS]
    stage_col = "stage" if "stage" in k.columns else "phase"
    stages = aggregate(k, r, [stage_col]).rename(columns={stage_col: "stage"})[["stage"] + PROJECTED_BLOCK_COLUMNS[2:]]
    excl = k["exclusive_ns"].to_numpy(dtype=np.float64)
    busy = float(excl.sum())
    costed = float(excl[r["costed"].to_numpy()].sum())
    start = k["start"].to_numpy(dtype=np.float64)
    totals = {
        "busy_ns": busy,
        "busy_projected_ns": float((excl * r["ratio"]).sum()),
        "busy_low_ns": float((excl * r["low"]).sum()), "busy_high_ns": float((excl * r["high"]).sum()),
        "active_ns": float(k["end"].max() - start.min()) if len(k) else 0.0,
        "active_projected_ns": float(ends["ratio"][1].max() - start.min()) if len(k) else 0.0,
        "costed_share": costed / busy if busy > 0 else None,
        "steps": len(steps),
        "step_measured_ns": float(steps["measured_ns"].sum()) if len(steps) else None,
        "step_projected_ns": float(steps["projected_ns"].sum()) if len(steps) else None,
        "step_low_ns": float(steps["low_ns"].sum()) if len(steps) else None,
        "step_high_ns": float(steps["high_ns"].sum()) if len(steps) else None,
    }
    totals["busy_ratio"] = totals["busy_projected_ns"] / busy if busy > 0 else None
    if len(steps):
        totals["step_ratio"] = totals["step_projected_ns"] / totals["step_measured_ns"] if totals["step_measured_ns"] else None
    return Projection(source, target, r, blocks, stages, steps, totals, _assumptions(a, source, target, totals, steps),
                      path=a.meta.get("path"))


def steps_frame(a, r: pd.DataFrame, ends: dict, items: pd.DataFrame | None) -> pd.DataFrame:
    """`ends`: per "ratio" / "low" / "high", the replayed (start', end') of every kernel."""
    names, measured, projected, host_bound, host = _step_times(a, *ends["ratio"])
    if not names:
        return pd.DataFrame(columns=PROJECTED_STEP_COLUMNS)
    low = _step_times(a, *ends["low"])[2]
    high = _step_times(a, *ends["high"])[2]
    owner = a.kernels["step"].to_numpy()
    rows = step_rows(a.trace)
    excl = a.kernels["exclusive_ns"].to_numpy(dtype=np.float64)
    per = {} if items is None or not len(items) else {row["step"]: row for row in items.to_dict(orient="records")}
    out = []
    for i, name in enumerate(names):
        mine = owner == rows[i]
        busy = float(excl[mine].sum())
        got = per.get(name, {})
        n_items = got.get("items")
        n_items = float(n_items) if n_items is not None and n_items == n_items else 1.0
        unit = got.get("unit") or "steps"
        lo, hi = min(low[i], high[i]), max(low[i], high[i])
        out.append({"step": name, "measured_ns": measured[i], "host_ns": float(host[i]), "projected_ns": projected[i], "low_ns": lo, "high_ns": hi,
                    "busy_ns": busy, "busy_projected_ns": float((excl[mine] * r["ratio"].to_numpy()[mine]).sum()),
                    "ratio": projected[i] / measured[i] if measured[i] > 0 else None, "host_bound": bool(host_bound[i]),
                    "items": n_items, "unit": unit,
                    "throughput": n_items / measured[i] * 1e9 if measured[i] > 0 else None,
                    "throughput_projected": n_items / projected[i] * 1e9 if projected[i] > 0 else None,
                    "throughput_low": n_items / hi * 1e9 if hi > 0 else None,
                    "throughput_high": n_items / lo * 1e9 if lo > 0 else None})
    return pd.DataFrame(out, columns=PROJECTED_STEP_COLUMNS)


# A kernel below this fraction of its binding roof is not limited by that roof (see far_from_roof).
FAR_FROM_ROOF = 0.05


def far_from_roof(a) -> dict[str, Any] | None:
    """The costed kernels below FAR_FROM_ROOF of their roof on the source, when they hold at
    least FAR_FROM_ROOF of the busy time: their share, and the (op, shapes) group with the
    most of their time (its kernels, time, and time-weighted efficiency), else None."""
    k = a.kernels
    eff = k["efficiency"].to_numpy(dtype=np.float64)
    excl = k["exclusive_ns"].to_numpy(dtype=np.float64)
    busy = float(excl.sum())
    slow = eff < FAR_FROM_ROOF  # NaN (no cost) is not slow
    if busy <= 0 or excl[slow].sum() < FAR_FROM_ROOF * busy:
        return None
    ops = a.trace.ops if a.trace is not None else None
    op = k["op"].to_numpy()
    dims = ops["input_dims"].to_numpy() if ops is not None and len(ops) else np.zeros(0, dtype=object)
    shapes = np.array([str(dims[o]) if 0 <= o < len(dims) else "" for o in op], dtype=object)
    frame = pd.DataFrame({"op": k["op_name"].astype(object).fillna(k["name"].astype(object)).to_numpy(), "shapes": shapes,
                          "t": excl, "t_min": eff * k["duration_ns"].to_numpy(dtype=np.float64), "d": k["duration_ns"].to_numpy(dtype=np.float64)})[slow]
    g = frame.groupby(["op", "shapes"], sort=False).agg(kernels=("t", "size"), time_ns=("t", "sum"), t_min=("t_min", "sum"), d=("d", "sum"))
    top = g.sort_values("time_ns", ascending=False).iloc[0]
    return {"share": float(excl[slow].sum() / busy), "op": str(top.name[0]), "shapes": str(top.name[1]), "kernels": int(top["kernels"]),
            "time_ns": float(top["time_ns"]), "efficiency": float(top["t_min"] / top["d"]) if top["d"] > 0 else float("nan")}


def _assumptions(a, source: Device, target: Device, totals: dict, steps: pd.DataFrame) -> list[str]:
    share = totals["costed_share"]
    out = [
        f"costed kernels ({share:.0%} of busy time) keep their measured efficiency against their binding roof; "
        f"roofs: HBM {source.memory_gbps:,.0f}→{target.memory_gbps:,.0f} GB/s, interconnect {source.interconnect_gbps:,.0f}→"
        f"{target.interconnect_gbps:,.0f} GB/s, host link {source.host_link_gbps:,.0f}→{target.host_link_gbps:,.0f} GB/s, "
        "matrix/vector peaks per dtype from the device table" if share is not None else "the trace has no kernel time",
        "kernels without a cost (or without a target peak for their dtype): range from unchanged to scaled by the "
        "bandwidth ratio of their link; the point figure is the middle",
        "host time, launch overhead and host-bound gaps are as measured; each stream is replayed alone (kernels wait "
        "for their launch and their predecessor), dependencies across streams are not modelled",
        "a step's time is its GPU window (its GPU-side annotation or its kernels' span, as `tracekit analyze` reports it); "
        "the projected window keeps its margins around the step's kernels and moves with them; the host range is shown "
        "as measured; host time on another machine (CPU, driver) is not projected",
        "same software: kernels, libraries and their tuning on the target behave like those measured (a different "
        "attention or GEMM library, or another precision, is not projected)",
    ]
    slow = far_from_roof(a)
    if slow is not None:
        out.append(f"{slow['share']:.0%} of busy time is in costed kernels below {FAR_FROM_ROOF:.0%} of their roof on "
                   f"{source.key} (largest: {slow['op']} {slow['shapes']}, {slow['kernels']} kernels, {slow['time_ns'] / 1e6:,.2f} ms "
                   f"at {slow['efficiency']:.1%}): a roof does not set their time (a library's kernel choice, latency, "
                   "occupancy do), so scaling them by the roof ratio is the least certain part of this projection; "
                   "the target's library may choose a faster or slower kernel for the same shapes")
    if len(steps) and steps["host_bound"].any():
        out.append(f"{int(steps['host_bound'].sum())} of {len(steps)} steps are host-bound (their GPU was idle, waiting for "
                   "launches, most of its kernels' window): their time barely moves with the GPU")
    return out
