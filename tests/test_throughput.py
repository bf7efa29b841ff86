"""Throughput per step and stage shares (tracekit.analysis.throughput)."""

from __future__ import annotations

import pandas as pd
import pytest

from tracekit.analysis.throughput import stage_table, step_items


def test_step_items_units():
    steps = pd.DataFrame({"step": ["step[DECODE bs=32]", "execute_context_0(0)_generation_64(64)", "ProfilerStep#3", "ProfilerStep#4"],
                          "duration_ns": [20e6, 40e6, 100e6, 100e6]})
    got = step_items(None, steps.iloc[:2])
    assert got["unit"].tolist() == ["tokens", "tokens"]
    assert got["throughput"].tolist() == pytest.approx([32 / 0.020, 64 / 0.040])  # tokens / wall seconds
    got = step_items(None, steps.iloc[2:], samples_per_step=8)
    assert got["throughput"].tolist() == pytest.approx([8 / 0.1, 8 / 0.1]) and set(got["unit"]) == {"samples"}
    got = step_items(None, steps.iloc[2:], frames_per_step=81)
    assert got["throughput"].tolist() == pytest.approx([810.0, 810.0]) and set(got["unit"]) == {"frames"}
    assert step_items(None, steps.iloc[2:3])["unit"].tolist() == ["steps"]


def test_stage_wall_is_runs_of_consecutive_kernels():
    # text_encode [0,10]+[12,20]; denoise [30,50],[55,70]; vae_decode [80,100]; window 0..100
    k = pd.DataFrame({"device": 0, "start": [0, 12, 30, 55, 80], "end": [10, 20, 50, 70, 100],
                      "phase": ["text_encode", "text_encode", "denoise", "denoise", "vae_decode"]})
    k["exclusive_ns"] = k["end"] - k["start"]
    t = stage_table(k).set_index("stage")
    assert t.loc["text_encode", "wall_ns"] == 20 and t.loc["text_encode", "busy_ns"] == 18  # 20 - 0; 10 + 8
    assert t.loc["denoise", "wall_ns"] == 40 and t.loc["denoise", "wall_share"] == pytest.approx(40 / 100)  # 70 - 30
    assert t.loc["vae_decode", "wall_share"] == pytest.approx(20 / 100)


def test_denoising_steps_of_the_cpu_diffusion_fixture():
    """fixtures/cpu_tiny_diffusion.json.gz: 2 images x 4 DDIM steps, each step a range
    `denoise_step#i` (from the UNet's forward pre-hook to the step-end callback). The same
    steps read from the Python frames (UNet2DConditionModel.forward .. DDIMScheduler.step)
    lie inside those ranges and cover nearly all of each (the hook and callback are µs)."""
    import pathlib
    import re

    import tracekit.analysis.denoise as denoise
    from tracekit.api import analyze
    from tracekit.trace.column_text import as_text

    path = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "cpu_tiny_diffusion.json.gz"
    a = analyze(path)
    marked = a.throughput["denoise_steps"]
    r = a.trace.ranges
    names = as_text(r["name"])
    rows = [i for i, n in enumerate(names) if n.startswith("denoise_step#")]
    assert len(marked) == len(rows) == 8 and set(marked["source"]) == {"step annotation"}
    assert marked["duration_ns"].tolist() == [float(r["end"].iat[i] - r["start"].iat[i]) for i in rows]
    old = denoise.ANNOTATION
    denoise.ANNOTATION = re.compile(r"^$no annotation")
    try:
        frames = denoise.denoise_steps(a.trace, a.kernels)
    finally:
        denoise.ANNOTATION = old
    assert len(frames) == 8 and set(frames["source"]) == {"scheduler.step frames"}
    for (_, m), (_, f) in zip(marked.iterrows(), frames.iterrows()):
        assert m["start_ns"] <= f["start_ns"] and f["start_ns"] + f["duration_ns"] <= m["start_ns"] + m["duration_ns"]
        assert f["duration_ns"] >= 0.99 * m["duration_ns"]
    assert "denoise_steps" in a.to_dict()["throughput"]
