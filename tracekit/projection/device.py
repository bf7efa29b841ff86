"""The same run on another GPU, each kernel by what bounds it on the source.

    roof share   s  = min(1, t_sus / t)                     (tracekit.projection.bounds)
    projected    t' = t · (s · t_sus(target) / t_sus(source) + (1 − s))

The roof part follows the target's roof for its work (compute peak for its dtype, HBM,
interconnect, host link); the rest (latency, launch, tails) keeps its time. Ranges come from
the method's own error on the pairs it can check (tracekit.projection.ranges). The host
timeline is projected apart from GPU time: each stream is replayed with its kernels at their
projected durations (tracekit.projection.replay), so a kernel waits for its launch and a
launch-bound step stays launch-bound. Steps are the Analysis' GPU windows moved with their
kernels (tracekit.projection.projected_steps).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from tracekit.hardware import Device
from tracekit.projection import ranges
from tracekit.projection.bounds import kernel_rules, rule_time
from tracekit.projection.notes import device_assumptions, throughput_why
from tracekit.projection.replay import launch_starts, replay
from tracekit.projection.projected_steps import step_totals, steps_frame, throughput
from tracekit.strict_json import dumps, records

if TYPE_CHECKING:
    from tracekit.analysis.result import Analysis

PROJECTED_BLOCK_COLUMNS = ["phase", "block", "kernels", "measured_ns", "projected_ns", "low_ns", "high_ns", "ratio", "roof", "costed_share"]


@dataclass
class Projection:
    source: Device
    target: Device
    kernels: pd.DataFrame  # per kernel: ratio, low, high, roof, rule
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


def target_device(to: str, device_file: str | None = None, source: str = "trace", flag: str = "--to") -> Device:
    """The GPU named by --to, through hardware.resolve (built-in table plus --device-file); an
    unknown one is a TraceError that names --to and `tracekit devices` (not --device: that
    flag names the source GPU)."""
    from tracekit.errors import TraceError
    from tracekit.hardware import builtin_devices, closest, load_device_file, resolve

    try:
        found, _ = resolve(None, to, device_file, source=source)
    except TraceError as exc:
        if "unknown device" not in exc.reason:
            raise
        devices = builtin_devices()
        if device_file:
            devices.update(load_device_file(device_file))
        near = closest(to, devices)
        hint = f"closest known: {', '.join(near)}" if near else "no known device of the same product line"
        raise TraceError(source, f"unknown target GPU {to[:80]!r} for {flag} ({hint}); pass {flag} with a key or name from "
                                 "`tracekit devices`, or describe the GPU in --device-file FILE.toml") from None
    return found


def device_ratios(a: Analysis, target: Device) -> pd.DataFrame:
    """Per kernel: the rule table (tracekit.projection.bounds) with `low` / `high` widened by
    the error bands (tracekit.projection.ranges)."""
    r = kernel_rules(a.kernels, a.device, target, a.sustained)
    r["low"], r["high"] = ranges.banded(r)
    return r


def replayed(a: Analysis, r: pd.DataFrame, same_machine: bool = False) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per "ratio" / "low" / "high": every kernel's replayed (start', end'), the host at its
    measured pace for the point and, on another machine, at the range's paces for low and high."""
    k = a.kernels
    launched = launch_starts(k, a.trace.launches if a.trace is not None else None)
    duration = k["duration_ns"].to_numpy(dtype=np.float64)
    pace = {"ratio": 1.0, "low": 1.0 if same_machine else ranges.HOST[0], "high": 1.0 if same_machine else ranges.HOST[1]}
    return {col: replay(k, launched, duration * r[col].to_numpy(), pace[col]) for col in ("ratio", "low", "high")}


def aggregate(kernels: pd.DataFrame, r: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Per group of `by` (a kernel without a label: None): times measured and projected, the
    roof most of the group's time rests on, and the costed share."""
    excl = kernels["exclusive_ns"].to_numpy(dtype=np.float64)
    frame = pd.DataFrame({**{c: kernels[c].astype(object).to_numpy() for c in by},
                          "measured_ns": excl, "projected_ns": excl * r["ratio"].to_numpy(),
                          "low_ns": excl * r["low"].to_numpy(), "high_ns": excl * r["high"].to_numpy(),
                          "costed_ns": np.where(r["costed"].to_numpy(), excl, 0.0), "roof": r["roof"].to_numpy()})
    grouped = frame.groupby(by, sort=False, dropna=False)
    out = grouped[["measured_ns", "projected_ns", "low_ns", "high_ns", "costed_ns"]].sum()
    out["kernels"] = grouped.size()
    roof_time = frame.groupby(by + ["roof"], sort=False, dropna=False)["measured_ns"].sum().reset_index()
    top = roof_time.sort_values("measured_ns", ascending=False).drop_duplicates(by).set_index(by)["roof"]
    out["roof"] = top.reindex(out.index)
    out = out.reset_index()
    with np.errstate(divide="ignore", invalid="ignore"):
        out["ratio"] = np.where(out["measured_ns"] > 0, out["projected_ns"] / out["measured_ns"], np.nan)
        out["costed_share"] = np.where(out["measured_ns"] > 0, out["costed_ns"] / out["measured_ns"], np.nan)
    out = out.sort_values("measured_ns", ascending=False).reset_index(drop=True)
    for c in by:  # unknown is null (JSON) and the unknown marker in reports, not a made-up label
        out[c] = out[c].astype(object).where(out[c].notna(), None)
    return out


def kernel_totals(k: pd.DataFrame, r: pd.DataFrame, ends: dict) -> dict[str, Any]:
    excl = k["exclusive_ns"].to_numpy(dtype=np.float64)
    busy = float(excl.sum())
    start = k["start"].to_numpy(dtype=np.float64)
    return {
        "busy_ns": busy, "busy_projected_ns": float((excl * r["ratio"]).sum()),
        "busy_low_ns": float((excl * r["low"]).sum()), "busy_high_ns": float((excl * r["high"]).sum()),
        "busy_ratio": float((excl * r["ratio"]).sum()) / busy if busy > 0 else None,
        "active_ns": float(k["end"].max() - start.min()) if len(k) else 0.0,
        "active_projected_ns": float(ends["ratio"][1].max() - start.min()) if len(k) else 0.0,
        "costed_share": float(excl[r["costed"].to_numpy()].sum()) / busy if busy > 0 else None,
    }


def project_device(a: Analysis, target: Device, items: pd.DataFrame | None = None) -> Projection:
    """Project Analysis `a` (measured on a.device) onto `target`. `items`: per step name, the
    work it did (columns step, items, unit) for throughput; default one step per step."""
    source, k = a.device, a.kernels
    r = device_ratios(a, target)
    ends = replayed(a, r)
    steps = steps_frame(a, r["ratio"].to_numpy(dtype=np.float64), ends, items)
    blocks = aggregate(k, r, ["phase", "block"])[PROJECTED_BLOCK_COLUMNS]
    stage_col = "stage" if "stage" in k.columns else "phase"
    stages = aggregate(k, r, [stage_col]).rename(columns={stage_col: "stage"})[["stage"] + PROJECTED_BLOCK_COLUMNS[2:]]
    totals = {**kernel_totals(k, r, ends), **step_totals(steps), "rules": rule_time(k, r),
              "host_bound_steps": int(steps["host_bound"].sum()) if len(steps) else 0, "throughput": throughput(steps)}
    totals["throughput_why"] = throughput_why(totals, source, target)
    return Projection(source, target, r, blocks, stages, steps, totals, device_assumptions(a, source, target, totals, steps),
                      path=a.meta.get("path"))
