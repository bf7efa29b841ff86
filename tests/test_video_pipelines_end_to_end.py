"""Steps and stages together on the video pipelines recorded on the CPU (issue 36): the step
finder (tracekit.structure.steps) and the stages / throughput from tensors
(tracekit.analysis.throughput) on the same traces, against what the recorder measured of its
own run (fixtures/record_cpu_video_pipelines.py: perf_counter around each stage and chunk)."""

from __future__ import annotations

import json
import pathlib

import pytest

from tracekit.analysis.load import analyze

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures"
TRUTH = json.loads((FIXTURES / "cpu_video_pipelines_truth.json").read_text())


def stage_shares(a) -> dict[str, float]:
    return {str(r["stage"]): float(r["wall_share"]) for r in a.throughput.stages.to_dict(orient="records")}


def test_text_to_video_clip_denoise_steps_and_clip_stages():
    t = TRUTH["t2v"]
    a = analyze(str(FIXTURES / t["trace"]))
    # the 8 denoise steps come from the repeated DiT forward (no range, frame or ProfilerStep)
    assert len(a.steps) == t["steps"] == 8
    assert a.meta["step_source"] == "pipeline loop"
    # ... but the clip made the frames: the stages cover the text encoder and the decoder too
    got = stage_shares(a)
    want = t["profiled"]["stage_share"]
    names = {"text encoder (2 layers, d=64)": "text_encode", "denoise": "denoise", "conv decoder, VAE (d=16)": "vae_decode"}
    assert set(got) == set(names)
    for stage, key in names.items():
        assert abs(got[stage] - want[key]) <= 0.03, (stage, got[stage], want[key])
    total = a.throughput.total
    # frames: the time axis of the decoder's last Conv3d output [1, 3, 20, H, W]
    assert total["unit"] == "frames" and total["items"] == t["frames"] == t["video_shape"][2]
    fps = t["frames"] / t["profiled"]["clip_s"]
    assert abs(total["throughput"] / fps - 1) <= 0.10, (total["throughput"], fps)


def test_streaming_chunks_stages_through_a_timing_wrapper_and_frames_per_step():
    t = TRUTH["streaming"]
    path = str(FIXTURES / t["trace"])
    a = analyze(path)
    assert len(a.steps) == t["steps"] == 4  # the chunks, never the 240 per-block ranges
    got = stage_shares(a)
    # each stage runs inside the recorder's Clock.__call__: the wrapper is named after what it wraps
    for key, want in t["profiled"]["stage_share"].items():
        assert abs(got[key] - want) <= 0.03, (key, got.get(key), want)
    assert "__call__" not in got
    b = analyze(path, frames_per_step=t["frames_per_chunk"])
    total = b.throughput.total
    assert total["unit"] == "frames" and total["items"] == t["frames_per_chunk"] * t["steps"]
    assert abs(total["throughput"] / t["profiled"]["frames_per_s"] - 1) <= 0.10
