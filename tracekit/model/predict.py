"""The roofline step model, beside the measured steps.

    predicted step time = Σ over blocks and layers of max(FLOPs / (peak · e_matrix),
                                                           bytes / (bandwidth · e_bandwidth))

(collectives: bytes / interconnect bandwidth). This is the model LLM serving simulators use
(e.g. inference-sim's `roofline_step`). Measured: the step's GPU busy time (its kernels'
union) and its wall time. Error = predicted / busy - 1, per step and per block group;
MAPE = mean |error| over the steps with a prediction. At e = 1 the prediction is the
step's roofline time, and its ratio to the busy time is the step's roofline efficiency.
The step's wall time is its GPU window (tracekit.trace.step_ownership), as in the step table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from tracekit.hardware import Device
from tracekit.trace.step_ownership import gpu_windows
from tracekit.strict_json import records

# lower_bound: the step's flops, bytes and predicted times are lower bounds (its batch, token
# counts or KV lengths are unknown; `missing` says which, `complete_with` the options that would
# complete it); error and roofline efficiency are then None: a bound is not a prediction to score.
PREDICTED_STEP_COLUMNS = ["step", "batch", "batch_source", "kind", "requests", "tokens", "kv_tokens", "kernels", "busy_ns", "wall_ns",
                "coverage", "flops", "bytes", "weight_bytes", "kv_bytes", "predicted_ns", "predicted_peak_ns", "error",
                "achieved_tbps", "bandwidth_share_peak", "roofline_efficiency", "lower_bound", "missing", "complete_with"]
PREDICTED_BLOCK_COLUMNS = ["step", "step_row", "group", "blocks", "kernels", "measured_ns", "predicted_ns", "error", "flops", "bytes", "filled_share", "note"]


@dataclass(frozen=True)
class Prediction:
    steps: pd.DataFrame  # PREDICTED_STEP_COLUMNS
    blocks: pd.DataFrame  # PREDICTED_BLOCK_COLUMNS: per step x block group
    terms: pd.DataFrame  # per step x block x layer: compute and memory time at peak (for calibrate)
    costs: pd.DataFrame = field(default_factory=pd.DataFrame)  # per step x model block: FLOPs, bytes, weights, KV
    summary: dict[str, Any] = field(default_factory=dict)
    # per phase x block group, the trace's own costs against the model's (model/agreement.py, AGREEMENT_COLUMNS)
    agreement: pd.DataFrame = field(default_factory=pd.DataFrame)

    def to_dict(self) -> dict[str, Any]:
        return {**self.summary, "steps": records(self.steps), "blocks": records(self.blocks), "agreement": records(self.agreement)}


TERM_COLUMNS = ("block", "layer", "comm", "t_compute_ns", "t_memory_ns")


def step_terms(costs, device: Device) -> dict[str, np.ndarray]:
    """Per (block, layer) of a step (tracekit.model.blocks.StepCosts): the time at peak of its
    compute and of its memory (or link) traffic, as arrays named by TERM_COLUMNS."""
    kinds, dtypes = costs["kind"], costs["dtype"]
    peak = np.full(len(kinds), np.nan)
    for kind, dtype in set(zip(kinds, dtypes)):
        if kind != "comm":
            unit = "vector" if kind == "vector" else "matrix"
            peak[(kinds == kind) & (dtypes == dtype)] = device.peak_flops(unit, dtype) or device.peak_flops(unit, "bf16") or np.nan
    comm = kinds == "comm"
    flops = costs["flops"]
    bandwidth = np.where(comm, device.interconnect or np.nan, device.bandwidth)
    with np.errstate(invalid="ignore"):
        compute = np.where(comm | ~(flops > 0), 0.0, flops / peak * 1e9)
    compute[np.isnan(flops)] = np.nan
    return {"block": costs["block"], "layer": costs["layer"], "comm": comm, "t_compute_ns": compute,
            "t_memory_ns": (costs["bytes_read"] + costs["bytes_written"]) / bandwidth * 1e9}


def select(terms, mask: np.ndarray) -> dict[str, np.ndarray]:
    return {c: np.asarray(terms[c])[mask] for c in TERM_COLUMNS}


def predicted_ns(terms, matrix_eff: float, bandwidth_eff: float) -> float:
    """Σ max(compute / e_matrix, memory / e_bandwidth) over the terms (a dict of arrays or a
    DataFrame); links are not scaled. NaN if any term is unknown."""
    comm, memory = np.asarray(terms["comm"], dtype=bool), np.asarray(terms["t_memory_ns"], dtype=np.float64)
    t = np.maximum(np.asarray(terms["t_compute_ns"], dtype=np.float64) / matrix_eff, np.where(comm, memory, memory / bandwidth_eff))
    return float(t.sum()) if len(t) and not np.isnan(t).any() else float("nan")


def lower_bound_ns(terms, matrix_eff: float, bandwidth_eff: float) -> float:
    """predicted_ns with the unknown terms left out (each term's known part, NaN as 0): a lower bound."""
    comm, memory = np.asarray(terms["comm"], dtype=bool), np.asarray(terms["t_memory_ns"], dtype=np.float64)
    t = np.fmax(np.asarray(terms["t_compute_ns"], dtype=np.float64) / matrix_eff, np.where(comm, memory, memory / bandwidth_eff))
    return float(np.nansum(t))


def predict(run, kernels: pd.DataFrame, exclusive: np.ndarray, device: Device | None, trace_ranges: pd.DataFrame,
            bandwidth_eff: float, matrix_eff: float = 1.0) -> Prediction:
    """Predicted vs measured per step and per block group of `run` (tracekit.model.ModelRun)."""
    duration = (kernels["end"] - kernels["start"]).to_numpy(dtype=np.float64)
    costed = kernels["flops"].notna().to_numpy()
    is_kernel = (kernels["kind"].astype(str) == "kernel").to_numpy()
    # per owning range row, in one pass over the kernels
    owned = run.owner >= 0
    size = int(max(run.owner.max(initial=-1), max((s.row for s in run.steps), default=-1))) + 1
    per_row = {name: np.bincount(run.owner[owned], weights=w[owned], minlength=size) for name, w in (
        ("busy", np.asarray(exclusive, dtype=np.float64)), ("kernel", duration * is_kernel), ("costed", duration * (is_kernel & costed)),
        ("count", np.ones(len(duration))))}
    group_time = np.bincount(run.group_of[run.group_of >= 0], weights=duration[run.group_of >= 0], minlength=len(run.groups))
    # a step's wall time is its GPU window (its GPU-side annotation or its kernels' span), as in the step table
    rows = np.array([s.row for s in run.steps], dtype=np.int64)
    w_lo, w_hi, _ = gpu_windows(trace_ranges, kernels, rows, run.owner)
    window = {int(row): float(hi - lo) for row, lo, hi in zip(rows, w_lo, w_hi)}
    groups_of_step = run.groups.groupby("step_row").groups if len(run.groups) else {}
    step_records, block_rows, all_terms, all_costs = [], [], [], []
    for step in run.steps:
        busy, ktime = float(per_row["busy"][step.row]), float(per_row["kernel"][step.row])
        wall = window[int(step.row)]
        b, blocks = step.batch, step.blocks
        known = b.batch_known
        row = {"step": step.name, "batch": b.describe(), "batch_source": b.source if known else None, "kind": b.kind if known else None,
               "requests": b.requests if known else None, "tokens": b.tokens if b.tokens_known else None, "kv_tokens": b.kv_tokens if known else None,
               "kernels": int(per_row["count"][step.row]), "busy_ns": busy, "wall_ns": wall,
               "coverage": float(per_row["costed"][step.row] / ktime) if ktime else None,
               "lower_bound": not b.complete, "missing": "; ".join(b.missing()) or None, "complete_with": b.complete_with()}
        if blocks is not None:
            for name, t in blocks.totals().items():
                all_costs.append({"step": step.name, "step_row": step.row, "block": name, "kind": t["kind"], "flops": t["flops"],
                                  "bytes": t["bytes_read"] + t["bytes_written"], "weight_bytes": t["weight_bytes"], "kv_bytes": t["kv_bytes"]})
            # unknown parts (KV reads without KV lengths) left out: with lower_bound set, these are lower bounds
            row.update(flops=float(np.nansum(blocks["flops"])), bytes=float(np.nansum(blocks["bytes_read"] + blocks["bytes_written"])),
                       weight_bytes=float(blocks["weight_bytes"].sum()), kv_bytes=_sum(blocks["kv_bytes"]))
            if step.terms is not None:
                terms = step.terms
                exact = b.complete
                if exact:
                    all_terms.append((step, busy, terms))
                rate = predicted_ns if exact else lower_bound_ns
                pred, peak = rate(terms, matrix_eff, bandwidth_eff), rate(terms, 1.0, 1.0)
                tbps = row["bytes"] / busy / 1e3 if busy else None
                row.update(predicted_ns=pred, predicted_peak_ns=peak, error=pred / busy - 1 if busy and exact else None, achieved_tbps=tbps,
                           bandwidth_share_peak=tbps * 1e12 / device.bandwidth if tbps is not None else None,
                           roofline_efficiency=peak / busy if busy and exact else None)
                block_rows += _groups(run.groups.loc[groups_of_step.get(step.row, [])], step, terms, group_time, matrix_eff, bandwidth_eff)
        step_records.append(row)
    steps = pd.DataFrame(step_records, columns=PREDICTED_STEP_COLUMNS)
    errors = steps["error"].dropna().abs() if len(steps) else pd.Series(dtype=float)
    terms = _terms_frame(all_terms)
    summary = {
        "config": run.arch.path, "architecture": run.arch.describe(), "tp": run.parallel.tp, "ep": run.parallel.ep,
        "parallel_source": run.parallel.source, "bandwidth_efficiency": bandwidth_eff, "matrix_efficiency": matrix_eff,
        "steps_predicted": int(steps["predicted_ns"].notna().sum()) if len(steps) else 0,
        "steps_lower_bound": int((steps["lower_bound"].astype(bool) & steps["predicted_ns"].notna()).sum()) if len(steps) else 0,
        "steps": len(steps),
        "mape": float(errors.mean()) if len(errors) else None, "notes": list(run.notes),
    }
    costs = pd.DataFrame(all_costs, columns=["step", "step_row", "block", "kind", "flops", "bytes", "weight_bytes", "kv_bytes"])
    return Prediction(steps, pd.DataFrame(block_rows, columns=PREDICTED_BLOCK_COLUMNS), terms, costs=costs, summary=summary,
                      agreement=run.agreement)


def _sum(values: np.ndarray) -> float | None:
    return None if np.isnan(values).any() else float(values.sum())


def _terms_frame(parts: list) -> pd.DataFrame:
    """All steps' terms in one table (for calibrate): step name and range row, busy time."""
    if not parts:
        return pd.DataFrame(columns=["step", "step_row", "busy_ns", *TERM_COLUMNS])
    sizes = [len(t["block"]) for _, _, t in parts]
    frame = {c: np.concatenate([t[c] for _, _, t in parts]) for c in TERM_COLUMNS}
    return pd.DataFrame({"step": np.repeat([s.name for s, _, _ in parts], sizes), "step_row": np.repeat([s.row for s, _, _ in parts], sizes),
                         "busy_ns": np.repeat([b for _, b, _ in parts], sizes), **frame})


def _groups(groups: pd.DataFrame, step: str, terms: dict, group_time: np.ndarray, matrix_eff: float, bandwidth_eff: float) -> list[dict]:
    """Per block group of the step: its kernels' time against the prediction of its blocks."""
    out = []
    for index, g in groups.iterrows():
        pred = predicted_ns(select(terms, np.isin(terms["block"], g["blocks"].split(", "))), matrix_eff, bandwidth_eff)
        measured = float(group_time[index])
        out.append({"step": step.name, "step_row": step.row, "group": g["group"], "blocks": g["blocks"], "kernels": int(g["kernels"]),
                    "measured_ns": measured, "predicted_ns": pred, "error": pred / measured - 1 if measured and pred == pred else None,
                    "flops": g["flops"], "bytes": g["bytes"], "filled_share": g["filled_share"], "note": g["note"]})
    return out
