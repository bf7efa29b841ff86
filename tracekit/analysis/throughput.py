"""Throughput per step and the share of wall time of each pipeline stage.

Per step, the work it did and in what unit:
  tokens    serving steps whose annotation gives the batch (vLLM `execute_...`, SGLang
            `step[DECODE bs=N]`: tokens scheduled that step, tracekit.model.batch)
  frames    diffusion pipelines: frames (or images) per step from an annotation
            (`frames=N`, `num_frames=N`) or --frames-per-step
  samples   training / inference steps with --samples-per-step (--batch)
  steps     otherwise (the work is not known: throughput is steps per second)
throughput = items / step wall time.

A stage is a kernel's phase (text_encode, denoise, vae_decode, recompute, prefill, decode,
forward, backward, ...). Its wall time is the sum, over the runs of consecutive kernels of
that stage (in start order, per device), of last end - first start: idle inside a run is the
stage's, idle between runs of different stages is nobody's. share = wall / GPU-active window.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.trace.column_text import as_text
from tracekit.trace.step_ownership import step_rows

FRAMES = re.compile(r"(?i)\b(?:num_)?(?:frames|images)[=:_ ]?(\d+)\b")
THROUGHPUT_STEP_COLUMNS = ["step", "duration_ns", "items", "unit", "source", "throughput", "per_stage"]
STAGE_COLUMNS = ["stage", "kernels", "busy_ns", "wall_ns", "wall_share", "runs", "wall_per_run_ns"]


def step_items(trace, steps: pd.DataFrame, samples_per_step: int | None = None, frames_per_step: int | None = None) -> pd.DataFrame:
    """Per step: items, unit and where the count came from (see the module docstring)."""
    from tracekit.model.batch import from_annotation

    rows = []
    for r in steps.to_dict(orient="records"):
        name = str(r["step"])
        batch = from_annotation(name)
        frames = FRAMES.search(name[:256])
        if batch is not None:
            items, unit, source = float(batch.tokens), "tokens", batch.source
        elif frames is not None:
            items, unit, source = float(frames.group(1)), "frames", "step annotation"
        elif frames_per_step:
            items, unit, source = float(frames_per_step), "frames", "--frames-per-step"
        elif samples_per_step:
            items, unit, source = float(samples_per_step), "samples", "--samples-per-step"
        else:
            items, unit, source = 1.0, "steps", "no batch in the trace (pass --samples-per-step or --frames-per-step)"
        duration = float(r["duration_ns"])
        rows.append({"step": name, "duration_ns": duration, "items": items, "unit": unit, "source": source,
                     "throughput": items / duration * 1e9 if duration > 0 else None})
    return pd.DataFrame(rows, columns=THROUGHPUT_STEP_COLUMNS[:-1])


def stage_table(kernels: pd.DataFrame, stage: str = "phase") -> pd.DataFrame:
    """Per stage: kernels, busy time, wall time (runs of consecutive kernels), share of the active window."""
    if not len(kernels):
        return pd.DataFrame(columns=STAGE_COLUMNS)
    out: dict[str, dict[str, float]] = {}
    window = 0.0
    for _, k in kernels.groupby("device", sort=False):
        k = k.sort_values("start", kind="stable")
        start, end = k["start"].to_numpy(dtype=np.float64), k["end"].to_numpy(dtype=np.float64)
        window += float(end.max() - start.min())
        labels = k[stage].astype(object).fillna("unknown").astype(str).to_numpy()
        cut = np.flatnonzero(labels[1:] != labels[:-1]) + 1
        first, last = np.r_[0, cut], np.r_[cut, len(labels)]
        run_end = np.maximum.reduceat(end, first)
        for a, b, e in zip(first, last, run_end):
            row = out.setdefault(labels[a], {"kernels": 0, "busy_ns": 0.0, "wall_ns": 0.0, "runs": 0})
            row["kernels"] += int(b - a)
            row["wall_ns"] += float(e - start[a])
            row["runs"] += 1
        busy = k.groupby(stage, observed=True, sort=False)["exclusive_ns"].sum()
        for name, value in busy.items():
            out.setdefault(str(name), {"kernels": 0, "busy_ns": 0.0, "wall_ns": 0.0, "runs": 0})["busy_ns"] += float(value)
    rows = [{"stage": name, **v, "wall_share": v["wall_ns"] / window if window > 0 else None,
             "wall_per_run_ns": v["wall_ns"] / v["runs"] if v["runs"] else None} for name, v in out.items()]
    return pd.DataFrame(rows, columns=STAGE_COLUMNS).sort_values("wall_ns", ascending=False).reset_index(drop=True)


def step_names(trace) -> list[str]:
    names = as_text(trace.ranges["name"]) if trace is not None and len(trace.ranges) else []
    return [names[s] for s in step_rows(trace)] if len(names) else []


def throughput(trace, kernels: pd.DataFrame, steps: pd.DataFrame, samples_per_step: int | None = None,
               frames_per_step: int | None = None) -> dict:
    """{"steps": per step items and throughput, "stages": stage table, "total": items / wall time of all steps}."""
    per_step = step_items(trace, steps, samples_per_step, frames_per_step) if len(steps) else pd.DataFrame(columns=THROUGHPUT_STEP_COLUMNS[:-1])
    stages = stage_table(kernels)
    total = None
    if len(per_step):
        wall = float(per_step["duration_ns"].sum())
        units = per_step["unit"].unique()
        total = {"items": float(per_step["items"].sum()), "unit": str(units[0]) if len(units) == 1 else "mixed",
                 "wall_ns": wall, "throughput": float(per_step["items"].sum()) / wall * 1e9 if wall > 0 and len(units) == 1 else None}
    from tracekit.analysis.denoise import denoise_steps

    return {"steps": per_step, "stages": stages, "total": total, "denoise_steps": denoise_steps(trace, kernels)}
