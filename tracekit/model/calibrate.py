"""Fit the roofline step model's efficiencies to measured steps, per device.

For each device: the matrix efficiency e_m and the bandwidth efficiency e_b that minimise the
mean absolute percentage error of predicted vs measured (GPU busy) step time, by grid search
over [0.001, 1.5] (coarse, then refined to 0.001; a factor above 1 says the model overcounts,
and is flagged). Unless at least three steps differ in their mix of compute and memory
time, the two cannot be told apart, and one common factor is fitted. Per block kind, the
efficiency that makes its prediction exact over all steps (Σ roofline time at peak / Σ
measured) is reported beside it. The JSON is meant for a simulator to read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from tracekit.hardware import Device
    from tracekit.model.predict import Prediction

GRID = np.round(np.arange(0.01, 1.5001, 0.01), 4)  # coarse; refined around the best point
FINE = np.round(np.arange(0.001, 1.5001, 0.001), 4)
SCHEMA = "tracekit.calibration/1"
MIN_MIX_SPREAD = 0.05  # spread of the steps' compute share of roofline time needed to fit two factors


class Fitted(Protocol):
    """What the fit reads of an analysis (tracekit.analysis.Analysis, which model/ sits below)."""

    @property
    def model(self) -> Prediction | None: ...
    @property
    def device(self) -> Device | None: ...
    @property
    def meta(self) -> dict[str, Any]: ...


def _step_arrays(terms: pd.DataFrame) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]]:
    """Per step: its distinct (compute, memory, link) terms with their counts (layers repeat
    the same blocks, so a step of 36 layers has a dozen distinct terms), and its busy time.
    A step with no GPU busy time (a CPU-only profile put on a GPU with --device) measured
    nothing to fit against: left out (its error would divide by zero)."""
    out = []
    for _, t in terms.groupby("step_key", sort=False):
        busy = float(t["busy_ns"].iat[0])
        if not busy > 0 or busy == float("inf"):
            continue
        table = np.column_stack([t["t_compute_ns"].to_numpy(float), t["t_memory_ns"].to_numpy(float), t["comm"].to_numpy(float)])
        distinct, counts = np.unique(table, axis=0, return_counts=True)
        out.append((distinct[:, 0], distinct[:, 1], distinct[:, 2] > 0, counts.astype(float), busy))
    return out


def _mape(steps, e_m: np.ndarray, e_b: np.ndarray) -> np.ndarray:
    """MAPE for every (e_m, e_b) pair of the broadcast arrays."""
    total = np.zeros(np.broadcast(e_m, e_b).shape)
    for tc, tm, comm, count, busy in steps:
        scaled_m = tc[:, None, None] / e_m
        scaled_b = np.where(comm[:, None, None], tm[:, None, None], tm[:, None, None] / e_b)
        pred = (np.maximum(scaled_m, scaled_b) * count[:, None, None]).sum(axis=0)
        total = total + np.abs(pred / busy - 1)
    return total / max(len(steps), 1)


def fit(terms: pd.DataFrame) -> dict[str, Any]:
    """Fit over the terms of one device's steps (tracekit.model.predict terms + step_key, busy_ns)."""
    steps = _step_arrays(terms)
    if not steps:
        return {"steps": 0, "bandwidth_efficiency": None, "matrix_efficiency": None, "mape_peak": None, "mape_fitted": None}
    peak = float(_mape(steps, np.array([[1.0]]), np.array([[1.0]]))[0, 0])
    # Two factors need steps that differ in their mix of compute and memory time.
    shares = [float((tc * n).sum() / ((tc + tm) * n).sum()) for tc, tm, _, n, _ in steps if ((tc + tm) * n).sum() > 0]
    mixed = len(shares) >= 3 and max(shares) - min(shares) > MIN_MIX_SPREAD
    if mixed:
        grid = _mape(steps, GRID[:, None], GRID[None, :])
        i, j = np.unravel_index(np.argmin(grid), grid.shape)
        near_m = FINE[np.abs(FINE - GRID[i]) <= 0.01]
        near_b = FINE[np.abs(FINE - GRID[j]) <= 0.01]
        grid = _mape(steps, near_m[:, None], near_b[None, :])
        i, j = np.unravel_index(np.argmin(grid), grid.shape)
        e_m, e_b, how = float(near_m[i]), float(near_b[j]), "matrix and bandwidth efficiency fitted separately"
        best = float(grid[i, j])
    else:
        line = _mape(steps, FINE[:, None], FINE[:, None]).reshape(-1)
        i = int(np.argmin(line))
        e_m = e_b = float(FINE[i])
        best, how = float(line[i]), (f"one common factor ({len(steps)} step(s) whose compute/memory mix varies too little "
                                     "to separate matrix from bandwidth efficiency)")
    return {"steps": len(steps), "bandwidth_efficiency": e_b, "matrix_efficiency": e_m, "mape_peak": peak, "mape_fitted": best,
            "fit": how, "above_one": e_b > 1 or e_m > 1}


def block_efficiency(blocks: pd.DataFrame) -> dict[str, Any]:
    """Per block group: Σ roofline time at peak / Σ measured kernel time, over all steps."""
    if blocks.empty:
        return {}
    known = blocks[(blocks["measured_ns"] > 0) & blocks["peak_ns"].notna()]
    g = known.groupby("blocks").agg(peak=("peak_ns", "sum"), measured=("measured_ns", "sum"), steps=("measured_ns", "size"))
    return {name: {"efficiency": float(r.peak / r.measured), "steps": int(r.steps)} for name, r in g.iterrows()}


def calibrate(analyses: list[Fitted]) -> dict[str, Any]:
    """Fit per device over analyses built with a model (tracekit.analysis.Analysis with .model)."""
    per_device: dict[str, list] = {}
    traces, left_out = [], []
    for a in analyses:
        if (reason := unusable(a)) is not None:
            left_out.append({"path": a.meta.get("path"), "reason": reason})
            continue
        pred = a.model
        key = a.device.key
        path = a.meta.get("path")
        terms = pred.terms.assign(step_key=lambda t: f"{path}::" + t["step_row"].astype(str)) if len(pred.terms) else pred.terms
        per_device.setdefault(key, []).append((a, terms))
    out: dict[str, Any] = {"schema": SCHEMA, "model": "predicted step = sum over blocks and layers of max(flops / (peak * matrix_efficiency), "
                           "bytes / (bandwidth * bandwidth_efficiency)); measured = GPU busy time of the step", "devices": {}, "traces": traces,
                           "left_out": left_out}
    for key, items in per_device.items():
        terms = pd.concat([t for _, t in items if len(t)], ignore_index=True) if any(len(t) for _, t in items) else pd.DataFrame()
        result = fit(terms) if len(terms) else fit(pd.DataFrame(columns=["step_key"]))
        blocks = pd.concat([_peak_blocks(a) for a, _ in items], ignore_index=True)
        dev = items[0][0].device
        out["devices"][key] = {"name": dev.name, "memory_gbps": dev.memory_gbps, **result, "per_block": block_efficiency(blocks)}
        for a, t in items:
            one = fit(t) if len(t) else {}
            e_m, e_b = result["matrix_efficiency"], result["bandwidth_efficiency"]
            steps = _step_arrays(t) if len(t) else []
            errors = [float(_mape([s], np.array([[e_m]]), np.array([[e_b]]))[0, 0]) for s in steps] if e_m else []
            traces.append({"path": a.meta.get("path"), "device": key, "steps": len(steps), "mape_peak": one.get("mape_peak"),
                           "mape_fitted": float(np.mean(errors)) if errors else None,
                           "busy_ns": [s[4] for s in steps]})
    return out


def unusable(a: Fitted) -> str | None:
    """Why an analysis gives the fit nothing to use (None: it has steps to fit)."""
    if a.model is None:
        return "it was analysed without a model"
    if a.device is None:
        return ("its GPU is unnamed or not in the device table, so no roofline time can be put against its steps: "
                "pass --device NAME (see `tracekit devices`)")
    if not len(a.model.steps):
        return "it has no step (ProfilerStep#N, decode_step, a serving engine's step range) to fit"
    if not len(a.model.terms):
        return ("none of its steps has a batch the trace describes completely (requests, tokens, KV length): "
                "pass --batch B --context C")
    if not _step_arrays(a.model.terms.assign(step_key=a.model.terms["step_row"].astype(str))):
        return "its steps have no GPU busy time (no kernel ran in them, or the kernels' times were lost)"
    return None


def _peak_blocks(a: Fitted) -> pd.DataFrame:
    """Block groups of one analysis with their roofline time at peak (prediction at e = 1)."""
    from tracekit.model.predict import predicted_ns

    # Only the steps whose batch is complete have terms (the fit's steps); a step whose batch is
    # partly unknown (a lower bound) has block groups but no terms, and no exact peak time.
    terms = a.model.terms
    by_step = {row: t for row, t in terms.groupby("step_row")}
    b = a.model.blocks
    b = b[b["step_row"].isin(list(by_step))]
    if b.empty:
        return b.assign(peak_ns=[])
    peaks = [predicted_ns(by_step[row][by_step[row]["block"].isin(names.split(", "))], 1.0, 1.0) for row, names in zip(b["step_row"], b["blocks"])]
    return b.assign(peak_ns=peaks)
