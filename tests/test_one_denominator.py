"""One denominator in a report (analysis.causes.denominator): the ranked causes, the recoverable
tables and the headline are shares of the step time, the steps' GPU windows plus the GPU idle their
host ranges hold outside them, never of the wall time from the first host range to the last window.

The checkpointed TinyLlama training trace (H200, 2 ProfilerSteps): step #2's host range opens at
0.17 ms while the GPU still runs earlier work until 85.8 ms (no step owns it); its GPU window is
85.8 to 516.4 ms. The steps' wall time, 943.5 ms, held those 85.8 ms, so recompute read 18.3% in the
list and 20.2% / 20.1% in each step's window.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import tracekit
from conftest import shared


@pytest.fixture(scope="module")
def train():
    return tracekit.analyze(shared("torch", "h200_hf_tinyllama-1.1b_train_ckpt_bs8x2048.json.gz"), workers=1)


def test_training_shares_are_of_the_steps_gpu_windows(train):
    f, s, k = train.findings, train.steps, train.kernels
    windows = float(s["duration_ns"].sum())
    assert windows == pytest.approx(857.89e6, rel=1e-4)
    outside_idle = float(f.outside["idle_ns"])
    assert outside_idle < 0.002 * windows  # 1.5 ms: the host ranges reach past the windows by little idle
    assert f.denominator == "step time" and f.denominator_ns == pytest.approx(windows + outside_idle)
    assert f.basis_ns == f.denominator_ns  # the recoverable tables: the same number
    # the wall time (first host range start to last window end) is not it: the GPU ran unowned work first
    first_host, first_gpu = int(s["host_start_ns"].min()), int(s["start_ns"].min())
    unowned = (k["step"].to_numpy() < 0) & (k["end"].to_numpy() <= first_gpu)
    assert first_gpu - first_host == pytest.approx(85.66e6, rel=1e-3)
    assert k["duration_ns"].to_numpy()[unowned].sum() > 0.95 * (first_gpu - first_host)  # the GPU was busy then
    # recompute: its share of the step time is its share of each step's window, within a point
    recompute = (k["phase"] == "recompute").to_numpy() & (k["kind"] == "kernel").to_numpy()
    rows = {c["cause"]: c for c in f.causes}
    r = rows["waste_recompute"]
    per_step = [k["exclusive_ns"].to_numpy()[recompute & (k["step"].to_numpy() == row)].sum() for row in np.unique(k["step"][k["step"] >= 0])]
    assert r["share"] == pytest.approx(sum(per_step) / f.denominator_ns)
    for t, w in zip(per_step, s.sort_values("start_ns")["duration_ns"]):
        assert abs(t / w - r["share"]) < 0.01
    assert r["share"] == pytest.approx(0.2013, abs=0.001)
    # the step time per step is the recorder's measured step (truth: 426.6 ms), the wall time is 10% over it
    truth = json.loads(shared("truth", "h200_hf_tinyllama-1.1b_train_ckpt_bs8x2048.truth.json").read_text())
    assert f.denominator_ns / len(s) / 1e9 == pytest.approx(truth["step_s"], rel=0.01)
    assert f.outside["wall_ns"] / len(s) / 1e9 > 1.09 * truth["step_s"]
    # the GPU-time rows add up to at most the denominator
    assert max(c["cumulative_share"] or 0 for c in f.causes) <= 1.0


def test_the_report_states_the_denominator(train):
    words = json.loads(tracekit.api.summary_json(train))
    fix = words["what_to_fix_first"]
    assert fix["denominator"] == "step time" and fix["basis_ns"] == fix["denominator_ns"]
    assert any("step time (the steps' GPU windows" in line for line in words["headline"])


def test_serving_idle_rows_and_headline_share_one_denominator():
    """HF Qwen3-MoE generate: the host ranges outlast the GPU windows by 2.7 ms of idle, which the
    step time holds; the headline's idle is the idle rows' sum over the same number."""
    a = tracekit.analyze(shared("torch", "h200_hf_qwen3-moe-8l_generate_bs4_default.json.gz"), workers=1)
    f = a.findings
    windows = float(a.steps["duration_ns"].sum())
    assert f.denominator_ns == pytest.approx(windows + f.outside["idle_ns"])
    idle = sum(c["time_ns"] for c in f.causes if c["cause"].startswith("idle_"))
    assert f.headline.idle_share == pytest.approx(idle / f.denominator_ns)
    first = f.causes[0]
    assert first["cause"] == "idle_host_wait" and first["share"] == pytest.approx(first["time_ns"] / f.denominator_ns)
