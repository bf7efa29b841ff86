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
