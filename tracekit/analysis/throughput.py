"""Throughput per step and the share of wall time of each pipeline stage.

Per step, the work it did and in what unit:
  tokens    serving steps whose annotation gives the batch (vLLM `execute_...`, SGLang
            `step[DECODE bs=N]`: tokens scheduled that step, tracekit.model.batch)
  frames    diffusion pipelines: frames (or images) per step from an annotation
            (`frames=N`, `num_frames=N`) or --frames-per-step
  samples   training / inference steps with --samples-per-step (--batch)
  images    a diffusion pipeline call (a step from its `__call__` frame) that decodes image
            latents: the batch of the 4-D latents its VAE decodes (the first input of the
            first op inside the VAE's decode frame); video latents (5-D) need --frames-per-step
  frames    a pipeline whose step holds a VAE stage range (`vae_decode`, `vae`): the frames its
            last convolution works on, the VAE's output side: N of a 4-D [N, C, H, W] input
            (frames decoded as a batch of images), B x T of a 5-D [B, C, T, H, W] one (a video
            VAE that upsamples time shows its output frames there)
  frames    a conv decoder found from structure inside the step (tracekit.analysis.tensor_items)
  images    an image model: the batch of its image input (a detector's text queries are not it)
  samples   a generate-then-score round (a policy's generate, then a reward model): the
            sequences the network after the generating body reads (tracekit.structure.samples)
  tokens    a token model's steps: the tokens its forward passes inside the step took, from
            the token embedding's indices [B, T] (tracekit.structure.forwards): B x T for a
            training step or a prefill, B at decode
  steps     otherwise (the work is not known: throughput is steps per second)
throughput = items / step time, the step time being its GPU window (the step table's
duration_ns: its GPU-side annotation or its kernels' span; a step with no GPU work: its host
range), the same figure every other table uses. A trace without steps that decodes frames is
one clip: total = its frames over its time. analysis.plausibility.rates nulls a rate the device cannot reach.

A stage is a kernel's phase (text_encode, denoise, vae_decode, recompute, prefill, decode,
forward, backward, ...), or in an inference pipeline of the user's own, the user's range
that holds it (tracekit.structure.stage_names). Its wall time is the time covered by its runs of consecutive kernels
(in start order, per device; a run spans first start to last end, and the runs' union counts
time once where streams overlap): idle inside a run is the stage's, idle between runs of
different stages is nobody's. With steps, the table covers the
steps: only the kernels a step owns, a run never crosses a step boundary, and share = wall /
the steps' GPU windows (their union); kernels outside every step are counted apart. Without
steps: all kernels, share of the GPU-active window. A trace without GPU work (a CPU profile)
gets the same table from host time: each instant inside the steps goes to the first phase
rule (default rules, in order) whose frame, range or op pattern matches something open then.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis.stage_tables import host_stage_table, stage_table
from tracekit.analysis.stage_walls import per_step_shares
from tracekit.trace.column_text import as_text, rows_where
from tracekit.trace.step_ownership import PIPELINE_CALL, step_rows

FRAMES = re.compile(r"(?i)\b(?:num_)?(?:frames|images)[=:_ ]?(\d+)\b")
VAE_DECODE = re.compile(r"(autoencoder|vae)\w*\.py\(\d+\): (decode|_decode|tiled_decode)$")
# a user's VAE stage range (the default rules' vae_decode range rule: `vae_decode`, `vae`, `decode_vae`)
VAE_RANGE = re.compile(r"(?i)(^|[^a-z])vae([^a-z]|$)|vae_?decod")
CONVOLUTION_OP = re.compile(r"^aten::(conv\d?d|convolution)$")
THROUGHPUT_STEP_COLUMNS = ["step", "duration_ns", "items", "unit", "source", "throughput", "per_stage"]


def step_items(trace, steps: pd.DataFrame, samples_per_step: int | None = None, frames_per_step: int | None = None) -> pd.DataFrame:
    """Per step: items, unit and where the count came from (see the module docstring)."""
    from tracekit.analysis.tensor_items import TensorItems, frames_between
    from tracekit.model.batch_annotations import from_annotation
    from tracekit.structure.forwards import token_forwards, tokens_between
    from tracekit.structure.pipeline import find_pipeline
    from tracekit.structure.samples import samples_between, scored_calls

    rows = []
    decodes = None  # the VAE decode frames, found once, only for a pipeline call that needs them
    tensors = TensorItems(trace)
    forwards = token_forwards(trace.ops) if trace is not None and not samples_per_step and not frames_per_step else None
    vae = vae_ranges(trace) if trace is not None and not samples_per_step and not frames_per_step else None
    scored = scored_calls(find_pipeline(trace.ops), trace.ops) if forwards is not None and len(forwards) else None
    for r in steps.to_dict(orient="records"):
        name = str(r["step"])
        batch = from_annotation(name)
        frames = FRAMES.search(name[:256])
        images = None
        if batch is None and frames is None and not frames_per_step and not samples_per_step and PIPELINE_CALL.search(name[:512]):
            decodes = vae_decode_frames(trace) if decodes is None else decodes
            images = decoded_images(trace, r, decodes)
        if batch is not None:
            items, unit, source = float(batch.tokens), "tokens", batch.source
        elif frames is not None:
            items, unit, source = float(frames.group(1)), "frames", "step annotation"
        elif frames_per_step:
            items, unit, source = float(frames_per_step), "frames", "--frames-per-step"
        elif samples_per_step:
            items, unit, source = float(samples_per_step), "samples", "--samples-per-step"
        elif images:
            items, unit, source = float(images), "images", "batch of the latents the VAE decoded"
        elif (decoded := _in_host_window(r, lambda lo, hi: vae_frames(trace, vae, lo, hi))) is not None:
            items, unit, source = (float(decoded), "frames", "frames the VAE stage's last convolution decodes (images out of "
                                   "the VAE; a video VAE's temporal upsampling is not in the trace: --frames-per-step N for video frames)")
        elif (found := _in_host_window(r, lambda lo, hi: frames_between(tensors.decoders(), lo, hi))) is not None:
            items, unit, source = float(found[0]), "frames", found[1]
        elif (shown := _in_host_window(r, lambda lo, hi: tensors.images(lo, hi, forwards))) is not None:
            items, unit, source = float(shown), "images", "batch of the image input (1 or 3 channels) of the model's first convolution"
        elif (samples := _in_host_window(r, lambda lo, hi: samples_between(scored, lo, hi))) is not None:
            items, unit, source = float(samples[0]), "samples", samples[1]
        elif (seen := _in_host_window(r, lambda lo, hi: tokens_between(forwards, lo, hi))) is not None:
            items, unit, source = float(seen[1]), "tokens", f"token embedding input of {seen[0]} forward pass(es)"
        else:
            items, unit, source = 1.0, "steps", "no batch in the trace (pass --samples-per-step or --frames-per-step)"
        duration = float(r["duration_ns"])
        rows.append({"step": name, "duration_ns": duration, "items": items, "unit": unit, "source": source,
                     "throughput": items / duration * 1e9 if duration > 0 else None})
    return pd.DataFrame(rows, columns=THROUGHPUT_STEP_COLUMNS[:-1])


def _in_host_window(step: dict, find):
    """find(lo, hi) over the step's host range; None for a step without one."""
    if "host_start_ns" not in step or step["host_start_ns"] is None:
        return None
    lo = float(step["host_start_ns"])
    return find(lo, lo + float(step["host_duration_ns"]))


def vae_ranges(trace) -> np.ndarray:
    """Rows of the ranges table that are a user's VAE stage ranges (host side)."""
    if trace is None or not len(trace.ranges):
        return np.zeros(0, dtype=np.int64)
    r = trace.ranges
    host = ~np.isin(as_text(r["domain"]), ["python", "gpu"])
    return np.flatnonzero(host & rows_where(r["name"], lambda n: VAE_RANGE.search(n[:256])))


def vae_frames(trace, rows: np.ndarray | None, lo: float, hi: float) -> int | None:
    """Frames the VAE stage ranges (`rows`) inside [lo, hi] produced: over each outermost one,
    the frames of the input of the last convolution op inside it (see the module docstring)."""
    if rows is None or not len(rows) or not len(trace.ops):
        return None
    r, o = trace.ranges, trace.ops
    start, end = r["start"].to_numpy(), r["end"].to_numpy()
    inside = rows[(start[rows] >= lo) & (end[rows] <= hi)]
    if not len(inside):
        return None
    conv = rows_where(o["name"], lambda n: CONVOLUTION_OP.search(n[:64]))
    o_start, o_tid, dims = o["start"].to_numpy(), o["tid"].to_numpy(), o["input_dims"].to_numpy()
    total, reach = 0, -np.inf
    for i in inside[np.argsort(start[inside], kind="stable")]:
        if start[i] < reach:
            continue  # inside a VAE range already counted
        reach = end[i]
        mine = np.flatnonzero(conv & (o_start >= start[i]) & (o_start <= end[i]) & (o_tid == r["tid"].iat[i]))
        if not len(mine):
            continue
        last = dims[mine[np.argmax(o_start[mine])]]
        first = last[0] if isinstance(last, (list, tuple)) and last else None
        if isinstance(first, (list, tuple)) and len(first) in (4, 5):
            total += int(first[0]) * (int(first[2]) if len(first) == 5 else 1)
    return total or None


def vae_decode_frames(trace) -> np.ndarray:
    """Rows of the ranges table that are VAE decode Python frames (searched once per distinct name)."""
    if trace is None or not len(trace.ranges):
        return np.zeros(0, dtype=np.int64)
    r = trace.ranges
    return np.flatnonzero((as_text(r["domain"]) == "python") & rows_where(r["name"], VAE_DECODE.search))


def decoded_images(trace, step: dict, decode_rows: np.ndarray) -> int | None:
    """Images a pipeline call decoded: over the outermost VAE decode frames (`decode_rows`,
    from vae_decode_frames) inside the step's host range, the batch (dim 0) of the first 4-D
    input of the first op inside each."""
    if trace is None or "host_start_ns" not in step or not len(trace.ranges) or not len(trace.ops):
        return None
    lo, hi = int(step["host_start_ns"]), int(step["host_start_ns"]) + int(step["host_duration_ns"])
    r = trace.ranges
    start, end = r["start"].to_numpy(), r["end"].to_numpy()
    inside = decode_rows[(start[decode_rows] >= lo) & (end[decode_rows] <= hi)]
    decodes = inside[np.argsort(start[inside], kind="stable")]
    o_start, o_tid = trace.ops["start"].to_numpy(), trace.ops["tid"].to_numpy()
    dims = trace.ops["input_dims"].to_numpy()
    total, reach = 0, -1
    for i in decodes:
        if start[i] < reach:
            continue  # inside a decode already counted (decode -> _decode)
        reach = end[i]
        ops = np.flatnonzero((o_start >= start[i]) & (o_start <= end[i]) & (o_tid == r["tid"].iat[i]))
        for j in ops[np.argsort(o_start[ops], kind="stable")]:
            first = dims[j][0] if isinstance(dims[j], (list, tuple)) and dims[j] else None
            if isinstance(first, (list, tuple)) and first:
                if len(first) != 4:
                    return None  # video latents [B, C, T, H, W]: frames are not the batch
                total += int(first[0])
                break
    return total or None


def step_names(trace) -> list[str]:
    names = as_text(trace.ranges["name"]) if trace is not None and len(trace.ranges) else []
    return [names[s] for s in step_rows(trace)] if len(names) else []


def _step_windows(steps: pd.DataFrame) -> np.ndarray:
    if not len(steps):
        return np.zeros((0, 2))
    lo = steps["start_ns"].to_numpy(dtype=np.float64)
    return np.c_[lo, lo + steps["duration_ns"].to_numpy(dtype=np.float64)]


def _host_windows(steps: pd.DataFrame) -> np.ndarray | None:
    if not len(steps) or "host_start_ns" not in steps:
        return None
    lo = steps["host_start_ns"].to_numpy(dtype=np.float64)
    return np.c_[lo, lo + steps["host_duration_ns"].to_numpy(dtype=np.float64)]


def _per_step_stages(trace, kernels: pd.DataFrame, steps: pd.DataFrame, windows: np.ndarray) -> list[dict[str, float]]:
    """Per step (a chunk of a streaming pipeline, an iteration): each stage's share of that
    step's GPU window, as the stage table computes it over one step. A step-table row is its
    range's row by name and host start (the kernels' `step` column holds range rows)."""
    owner = kernels["step"].to_numpy() if "step" in kernels else np.full(len(kernels), -1)
    r = trace.ranges if trace is not None else None
    rows = step_rows(trace) if r is not None and len(r) else np.zeros(0, dtype=np.int64)
    names = as_text(r["name"]) if len(rows) else []
    row_of = {(names[i], int(r["start"].iat[i])): int(i) for i in rows}
    ranges = [row_of.get((str(s), int(h))) for s, h in zip(steps["step"], steps["host_start_ns"])]
    return per_step_shares(kernels, owner, ranges, windows)


def _by_main_stage(per_step: pd.DataFrame) -> dict | None:
    """Steps grouped by the stage that holds most of each one's window (a generation's one
    prefill and its decode steps): per group, steps, items, wall and items per second, so a
    decode rate is not diluted by the prompt's tokens. None unless the steps fall in two or
    more such groups of one unit."""
    if "per_stage" not in per_step or per_step["unit"].nunique() != 1:
        return None
    main = [max(d, key=lambda k: d[k] or 0) if isinstance(d, dict) and d else None for d in per_step["per_stage"]]
    if None in main or len(set(main)) < 2:
        return None
    out = {}
    for stage in dict.fromkeys(main):
        mine = per_step[[m == stage for m in main]]
        wall, items = float(mine["duration_ns"].sum()), float(mine["items"].sum())
        out[stage] = {"steps": int(len(mine)), "items": items, "wall_ns": wall, "throughput": items / wall * 1e9 if wall > 0 else None}
    return out


def _output_tokens(trace, total: dict) -> None:
    """The tokens a generating loop emitted (tracekit.structure.pipeline.Pipeline.output_tokens)
    and their rate over the pipeline call, apart from the tokens its forwards read."""
    from tracekit.structure.pipeline import find_pipeline

    pipeline = find_pipeline(trace.ops)
    if pipeline is None or pipeline.loop is None:
        return
    tokens, how = pipeline.output_tokens(trace.ops)
    if tokens is None and not any(s.kind == "verify" for s in pipeline.stages):
        return  # not a generation: nothing to say of output tokens
    wall = total.get("pipeline_wall_ns") or total.get("wall_ns")
    total["output_tokens"] = tokens
    total["output_tokens_per_s"] = tokens / wall * 1e9 if tokens is not None and wall else None
    total["output_tokens_how"] = how


@dataclass(frozen=True)
class Throughput:
    """What build measures of throughput; reports.throughput shows it, Analysis.to_dict writes it."""

    steps: pd.DataFrame  # per step: items, unit, duration_ns, throughput, per_stage shares, source
    stages: pd.DataFrame  # per stage: kernels, runs, wall_ns, wall_share, wall_per_run_ns, busy_ns
    # all steps together: items, unit, wall_ns, throughput, outside_steps_kernels / _busy_ns and,
    # where the steps fall in two or more main stages, by_main_stage; None without steps
    total: dict[str, Any] | None
    denoise_steps: pd.DataFrame | None  # tracekit.structure.denoise: one row per denoising step


def throughput(trace, kernels: pd.DataFrame, steps: pd.DataFrame, samples_per_step: int | None = None,
               frames_per_step: int | None = None, rules=None) -> Throughput:
    """Per step items and throughput, the stage table, the items / time of all steps (and the
    kernels outside every step) and the denoising steps (tracekit.structure.denoise).
    `rules`: the attribution rules (a user's --rules), whose phase rules name the host stages."""
    from tracekit.structure.denoise import denoise_steps
    from tracekit.analysis.gemm_tokens import tokens_from_gemms
    from tracekit.structure.stage_names import kernel_stages
    from tracekit.analysis.tensor_items import clip_total, forwards_of_one_clip, loop_inside_pipeline

    per_step = step_items(trace, steps, samples_per_step, frames_per_step) if len(steps) else pd.DataFrame(columns=THROUGHPUT_STEP_COLUMNS[:-1])
    windows = _step_windows(steps)
    clip = not samples_per_step and not frames_per_step and (not len(steps) or forwards_of_one_clip(trace, steps))
    # a loop with calls around it (an encoder, prefills, a VAE): the stages cover the pipeline
    whole_pipeline = clip or loop_inside_pipeline(trace)
    # the stages of a clip cover the whole trace (text encoder, denoise loop, decoder); else the steps
    stage_windows = np.zeros((0, 2)) if whole_pipeline else windows
    if len(kernels):
        kernels = kernels.assign(stage=kernel_stages(trace, kernels, None if whole_pipeline else _host_windows(steps)))
        stages = stage_table(kernels, "stage", windows=stage_windows)
        if len(per_step):
            per_step["per_stage"] = _per_step_stages(trace, kernels, steps, windows)
            tokens_from_gemms(trace, kernels, steps, per_step)
    else:  # no GPU work: the host's time, inside the steps or over the capture
        span = float((trace.meta.get("span_ns") or 0) if trace is not None else 0)
        stages = host_stage_table(trace, stage_windows if len(stage_windows) else np.array([[0.0, span]]), rules)
    total = None
    if whole_pipeline:  # the whole trace is one clip, or one pipeline call: what its decoders wrote
        total = clip_total(trace, kernels)
    if len(per_step) and total is None:
        wall = float(per_step["duration_ns"].sum())
        units = per_step["unit"].unique()
        outside = kernels["step"].to_numpy() < 0 if "step" in kernels else np.zeros(len(kernels), dtype=bool)
        total = {"items": float(per_step["items"].sum()), "unit": str(units[0]) if len(units) == 1 else "mixed",
                 "wall_ns": wall, "throughput": float(per_step["items"].sum()) / wall * 1e9 if wall > 0 and len(units) == 1 else None,
                 "outside_steps_kernels": int(outside.sum()),
                 "outside_steps_busy_ns": float(kernels["exclusive_ns"].to_numpy()[outside].sum()) if outside.any() else 0.0}
        by_stage = _by_main_stage(per_step)
        if by_stage:
            total["by_main_stage"] = by_stage
        if whole_pipeline and len(stages) and total["throughput"] is not None:
            # the loop runs inside a pipeline call (an encoder or prefills first): its items over
            # the whole call too, the rate a user of the pipeline gets (vLLM's output throughput)
            window = float(stages["wall_ns"].sum()) / max(float(stages["wall_share"].fillna(0).sum()), 1e-12)
            if window > wall:
                total["pipeline_wall_ns"] = window
                total["pipeline_throughput"] = total["items"] / window * 1e9
    if total is not None and trace is not None and len(trace.ops) and "input_dims" in trace.ops:
        _output_tokens(trace, total)
    return Throughput(steps=per_step, stages=stages, total=total, denoise_steps=denoise_steps(trace, kernels))
