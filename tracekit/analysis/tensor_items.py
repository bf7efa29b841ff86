"""The work a step or a clip did, read from its tensors when nothing names it.

- frames: what a conv decoder after the repeated forwards writes (the time axis x batch of its
  last convolution's 5-D output, the images of a 4-D one; tracekit.structure.segments);
  for a step, the decoders that ran inside its host window; for a clip (a trace without
  steps), all of them over the clip's time.
- images: an image model's input: the batch of every outermost convolution over a 4-D
  image-shaped input (1 or 3 channels: grayscale, RGB), the stem or patch embedding of a
  ViT, a ResNet, a detector's image tower. A detector's text queries are token-embedded too,
  but the images are its throughput; tokens stay the unit of a step whose token model runs
  more than one forward (a multimodal generate). Only forward ops count: a convolution re-run
  in backward (activation checkpointing) reads the same images again.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.structure.segments import CONV, decoder_frames, segments
from tracekit.trace.column_text import as_text

IMAGE_CHANNELS = (1, 3)


class TensorItems:
    """A trace's conv decoder outputs and image inputs, each found once, on first use."""

    def __init__(self, trace):
        self.trace, self._decoders, self._images = trace, None, None

    def decoders(self) -> list[tuple[float, float, int, str]]:
        if self._decoders is None:
            self._decoders = decoder_outputs(self.trace)
        return self._decoders

    def images(self, lo: float, hi: float, forwards) -> int | None:
        """Images of the step [lo, hi], unless a token model ran more than one forward in it."""
        from tracekit.structure.forwards import tokens_between

        if self._images is None:
            self._images = image_inputs(self.trace.ops if self.trace is not None else None)
        images = images_between(self._images, lo, hi)
        if images is None:
            return None
        seen = tokens_between(forwards, lo, hi) if forwards is not None else None
        return images if seen is None or seen[0] <= 1 else None


def decoder_outputs(trace) -> list[tuple[float, float, int, str]]:
    """(start, end, frames, how) of each conv decoder found in the whole trace's structure."""
    if trace is None or not len(trace.ops):
        return []
    names = pd.Series(as_text(trace.ops["name"]), dtype=object).unique()
    if not any(CONV.match(str(n)) for n in names):
        return []  # no convolution: no conv decoder, and the structure is not looked for
    out = []
    for s in segments(trace.ops):
        found = decoder_frames(trace.ops, s)
        if found is not None:
            out.append((float(s.start), float(s.end), found[0], found[1]))
    return out


def frames_between(decoders: list[tuple[float, float, int, str]], lo: float, hi: float) -> tuple[int, str] | None:
    """(frames, how) of the decoders that started inside [lo, hi] (a stage's span runs to the
    next stage's first op, which may be the next step's); None when none did."""
    mine = [d for d in decoders if lo <= d[0] <= hi]
    if not mine:
        return None
    return sum(d[2] for d in mine), f"{len(mine)} conv decoder(s): {mine[-1][3]}"


def image_inputs(ops: pd.DataFrame) -> pd.DataFrame:
    """start, tid, images of every outermost convolution over an image-shaped 4-D input."""
    columns = ["start", "tid", "images"]
    if ops is None or not len(ops):
        return pd.DataFrame(columns=columns)
    codes, distinct = pd.factorize(pd.Series(as_text(ops["name"]), dtype=object))
    conv = np.flatnonzero(np.array([bool(CONV.match(n)) for n in distinct], dtype=bool)[codes])
    dims = ops["input_dims"].to_numpy()
    conv = np.array([i for i in conv if _image_shaped(dims[i])], dtype=np.int64)
    if not len(conv):
        return pd.DataFrame(columns=columns)
    from tracekit.trace.autograd import NONE, op_states

    forward = op_states(ops) == NONE  # a checkpointed stem re-run in backward reads the same images again
    conv = conv[forward[conv]]
    start, end, tid = ops["start"].to_numpy(), ops["end"].to_numpy(), ops["tid"].to_numpy()
    rows = []
    for i in conv[np.lexsort((-end[conv], start[conv]))]:
        x = dims[i][0]
        if rows and rows[-1][1] == tid[i] and start[i] <= rows[-1][3]:
            continue  # the same convolution one level down (aten::conv2d -> aten::convolution)
        rows.append((int(start[i]), int(tid[i]), int(x[0]), int(end[i])))
    return pd.DataFrame([r[:3] for r in rows], columns=columns)


def _image_shaped(d) -> bool:
    x = d[0] if isinstance(d, (list, tuple)) and d else None
    return isinstance(x, (list, tuple)) and len(x) == 4 and x[1] in IMAGE_CHANNELS


def images_between(images: pd.DataFrame, lo: float, hi: float) -> int | None:
    if images is None or not len(images):
        return None
    s = images["start"].to_numpy()
    mine = (s >= lo) & (s <= hi)
    return int(images["images"].to_numpy()[mine].sum()) if mine.any() else None


def clip_total(trace, kernels: pd.DataFrame) -> dict | None:
    """A trace without steps that is one clip: the frames its decoders wrote over the clip's
    time (the GPU-active window; a trace without GPU work: its outermost ops' span)."""
    decoders = decoder_outputs(trace)
    if not decoders:
        return None
    frames = sum(d[2] for d in decoders)
    if len(kernels):
        wall, where = float(kernels["end"].max() - kernels["start"].min()), "the GPU-active window"
    else:
        found = segments(trace.ops)
        wall, where = float(found[-1].end - found[0].start), "the host span of the clip's ops"
    if wall <= 0:
        return None
    # a 4-D output is images (a latent diffusion's decoded batch), a 5-D one a video's frames
    unit = "images" if all(d[3].startswith("images") for d in decoders) else "frames"
    return {"items": float(frames), "unit": unit, "wall_ns": wall, "throughput": frames / wall * 1e9,
            "source": f"{decoders[-1][3]}, over {where} (the whole trace is one pipeline call)",
            "outside_steps_kernels": 0, "outside_steps_busy_ns": 0.0}


def loop_inside_pipeline(trace) -> bool:
    """The steps are a loop with other calls around it (an encoder before a decode loop, the
    prefills before speculative rounds, a text encoder and a VAE around a denoise loop) and no
    period decodes frames of its own: the stages then cover the whole pipeline, not the steps."""
    if trace is None or not len(trace.ops):
        return False
    from tracekit.structure.pipeline import find_pipeline

    pipeline = find_pipeline(trace.ops)
    if pipeline is None or pipeline.loop is None or not pipeline.outside_loop():
        return False
    period = pipeline.stages[pipeline.loop.start:pipeline.loop.start + pipeline.loop.period]
    return not any(s.kind == "conv_decoder" for s in period)


def forwards_of_one_clip(trace, steps: pd.DataFrame) -> bool:
    """Steps found by repetition that are the forwards inside one clip: the denoise steps of a
    text-to-video pipeline, with its decoder run after them, outside every step. The clip, not
    the step, is then what made the frames: its stages and its rate cover the whole trace."""
    if trace is None or (trace.meta or {}).get("step_source") != "repeated forward" or "host_start_ns" not in steps:
        return False
    decoders = decoder_outputs(trace)
    if not decoders:
        return False
    lo = steps["host_start_ns"].to_numpy(dtype=np.float64)
    hi = lo + steps["host_duration_ns"].to_numpy(dtype=np.float64)
    return all(frames_between(decoders, a, b) is None for a, b in zip(lo, hi))
