"""Throughput per step and stage shares (tracekit.analysis.throughput)."""

from __future__ import annotations

import pandas as pd
import pytest

from conftest import PROJECT_FIXTURES, shared
from tracekit.analysis.throughput import stage_table, step_items

CPU_DIFFUSION = PROJECT_FIXTURES / "cpu_tiny_diffusion.json.gz"


@pytest.fixture(scope="module")
def cpu_diffusion():
    from tracekit.api import analyze

    return analyze(CPU_DIFFUSION)


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


def test_denoising_steps_of_the_cpu_diffusion_fixture(cpu_diffusion):
    """fixtures/cpu_tiny_diffusion.json.gz: 2 images x 4 DDIM steps, each step a range
    `denoise_step#i` (from the UNet's forward pre-hook to the step-end callback). The same
    steps read from the Python frames (UNet2DConditionModel.forward .. DDIMScheduler.step)
    lie inside those ranges and cover nearly all of each (the hook and callback are µs)."""
    import re

    import tracekit.structure.denoise as denoise
    from tracekit.trace.column_text import as_text

    a = cpu_diffusion
    marked = a.throughput.denoise_steps
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


# -- diffusion pipelines: the two fixtures, checked against the raw trace (gzip + json) ----------

def _raw(path):
    import gzip
    import json

    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    t0 = min(e["ts"] for e in events if "ts" in e)
    return events, t0


def _launched_in(events, t0, frame_name):
    """Raw: the GPU activities whose runtime launch lies inside the (first) Python frame named
    `frame_name` (a suffix): their (start, end) in ns from the first event, and the launch API."""
    frame = next(e for e in events if e.get("cat") == "python_function" and e["name"].endswith(frame_name))
    runtime = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}
    out = []
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            launch = runtime.get(e["args"].get("correlation"))
            if launch and frame["ts"] <= launch["ts"] <= frame["ts"] + frame["dur"]:
                out.append(((e["ts"] - t0) * 1e3, (e["ts"] + e["dur"] - t0) * 1e3, launch["name"]))
    return out


def test_flux1_xdit_stages_images_per_second_and_denoising_step():
    """xDiT FLUX.1 (MI300X, torch.compile + CUDA graph): one pipeline call (FluxPipeline.__call__
    frame) is one step; its time is its GPU window, the span of the GPU work launched inside the
    call; it decodes one image (VAE latents [1, 16, 32, 32]). The transformer's compiled forward
    replays a CUDA graph of 993 kernels (hipGraphLaunch): they are denoise work, though the
    profiler left a `next` frame unclosed across them."""
    from tracekit.api import analyze

    path = shared("torch", "mi300x_xdit_flux1_capture_rank0.json.gz")
    events, t0 = _raw(path)
    a = analyze(path)
    call = _launched_in(events, t0, "pipeline_flux.py(652): __call__")
    window = max(e for _, e, _ in call) - min(s for s, _, _ in call)
    step = a.steps.iloc[0]
    assert len(a.steps) == 1 and step["step"].endswith("pipeline_flux.py(652): __call__")
    assert step["duration_ns"] == pytest.approx(window, abs=2) and step["kernels"] + step["copies"] == len(call) == 2555
    t = a.throughput.steps.iloc[0]
    assert (t["items"], t["unit"]) == (1.0, "images") and t["throughput"] == pytest.approx(1e9 / window)  # 2.52 images/s
    k = a.kernels
    graph = k[k["graph_launch"]]
    assert len(graph) == sum(1 for *_, api in call if api == "hipGraphLaunch") == 993 and set(graph["phase"]) == {"denoise"}
    stages = a.throughput.stages.set_index("stage")
    assert set(stages.index) == {"text_encode", "denoise", "vae_decode"}
    text = _launched_in(events, t0, "pipeline_flux.py(311): encode_prompt")  # CLIP + T5
    vae = _launched_in(events, t0, "autoencoder_kl.py(213): decode") + _launched_in(events, t0, "image_processor.py(738): postprocess")
    assert stages.loc["text_encode", "kernels"] == len(text) == 1208 and stages.loc["vae_decode", "kernels"] == len(vae) == 327
    text_wall = max(e for _, e, _ in text) - min(s for s, _, _ in text)  # one run: 13.1 .. 56.0 ms
    assert stages.loc["text_encode", "wall_ns"] == pytest.approx(text_wall, abs=2)
    assert stages.loc["text_encode", "wall_share"] == pytest.approx(text_wall / window, rel=1e-6)  # 10.8%
    assert stages.loc["denoise", "kernels"] == len(call) - len(text) - len(vae)  # the rest of the call
    assert stages["wall_share"].sum() <= 1.0
    # the one denoising step: the transformer's forward to the end of scheduler.step, timed by its GPU work
    d = a.throughput.denoise_steps
    loop = _launched_in(events, t0, "transformer_flux.py(268): forward") + _launched_in(events, t0, "scheduling_flow_match_euler_discrete.py(425): step")
    assert len(d) == 1 and d["kernels"].iloc[0] == len(loop) == 1007
    assert d["duration_ns"].iloc[0] == pytest.approx(max(e for _, e, _ in loop) - min(s for s, _, _ in loop), abs=2)


def test_cpu_diffusion_pipeline_calls_are_steps_with_host_stages(cpu_diffusion):
    """fixtures/cpu_tiny_diffusion.json.gz (CPU only, no ProfilerStep: the recorder profiled without
    a schedule): each StableDiffusionPipeline.__call__ frame is a step that made one image (VAE
    latents [1, 4, 16, 16]); with no GPU work the step's time is the call's host time, and the stages
    are host time: text_encode = the encode_prompt frames, vae_decode = the VAE decode and image
    post-processing frames, denoise = the rest of each call (the UNet + scheduler loop)."""
    events, t0 = _raw(CPU_DIFFUSION)
    frames = [e for e in events if e.get("cat") == "python_function"]

    def durations(file, function):
        return [e["dur"] * 1e3 for e in frames if e["name"].startswith(f"diffusers/{file}(") and e["name"].endswith(f"): {function}")]

    calls = durations("pipelines/stable_diffusion/pipeline_stable_diffusion.py", "__call__")
    t = cpu_diffusion.throughput
    assert len(calls) == 2 and t.steps["duration_ns"].tolist() == pytest.approx(calls, abs=2)
    assert t.steps["unit"].tolist() == ["images", "images"]
    assert t.total["throughput"] == pytest.approx(2 / sum(calls) * 1e9, rel=1e-6)  # 2 images / 1.478 s = 1.35 images/s
    stages = t.stages.set_index("stage")
    text = sum(durations("pipelines/stable_diffusion/pipeline_stable_diffusion.py", "encode_prompt"))
    vae = sum(durations("models/autoencoders/autoencoder_kl.py", "decode")) + sum(durations("image_processor.py", "postprocess"))
    assert stages.loc["text_encode", "wall_ns"] == pytest.approx(text, abs=4)
    assert stages.loc["vae_decode", "wall_ns"] == pytest.approx(vae, abs=8)
    assert stages.loc["denoise", "wall_ns"] == pytest.approx(sum(calls) - text - vae, abs=16)
    assert stages["wall_share"].sum() == pytest.approx(1.0, abs=1e-6)


def test_sglang_stage_and_model_wall_are_the_step_gpu_window():
    """SGLang decode (MI300X): the step's GPU window is 10.37 ms (its kernels' span), its host range
    465.25 ms. The stage table (decode: one run inside the step) and the throughput use the
    window; the 7 activities outside the step (one at 0.08 ms, the rest after the step) are
    counted apart instead of stretching the stage to 473.75 ms."""
    from tracekit.api import analyze

    a = analyze(shared("torch", "mi300x_sglang_qwen3-8b_decode_bs32.json.gz"))
    step = a.steps.iloc[0]
    k = a.kernels[a.kernels["step"] >= 0]
    assert step["duration_ns"] == k["end"].max() - k["start"].min() == 10366887
    assert step["host_duration_ns"] == 465248054
    stage = a.throughput.stages.set_index("stage").loc["decode"]
    assert stage["wall_ns"] == step["duration_ns"] and stage["runs"] == 1 and stage["wall_share"] == 1.0
    assert a.throughput.total["outside_steps_kernels"] == int((a.kernels["step"] < 0).sum()) == 7
    assert a.throughput.steps["throughput"].iloc[0] == pytest.approx(32 / 10366887e-9)  # 3,086.75 tokens/s


def test_host_stages_follow_the_users_phase_rules(tmp_path, cpu_diffusion):
    """A CPU-only pipeline's stages are host time claimed by the phase rules in order, the
    user's (--rules) first: a rule naming the UNet's forward takes that time from denoise.
    (The host stage table was built from the default rules alone.)"""
    from tracekit.api import analyze

    rules = tmp_path / "rules.toml"
    rules.write_text("[[phase]]\nname = \"unet\"\nframe = 'unet_2d_condition\\.py\\(\\d+\\): forward$'\n")
    stages = analyze(CPU_DIFFUSION, rules=str(rules)).throughput.stages.set_index("stage")
    default = cpu_diffusion.throughput.stages.set_index("stage")
    assert "unet" in stages.index and "unet" not in default.index
    # the UNet's time moved out of denoise; the text encoder and the VAE keep theirs
    assert stages.loc["unet", "wall_ns"] + stages.loc["denoise", "wall_ns"] == pytest.approx(default.loc["denoise", "wall_ns"], abs=16)
    assert stages.loc["text_encode", "wall_ns"] == default.loc["text_encode", "wall_ns"]


def test_per_step_shares_are_each_steps_stage_table():
    # Two steps, one device. Step 7 (window 0..100): prefill [0,30]+[35,50] (one run, 0..50),
    # decode [60,80] -> prefill 50/100, decode 20/100. Step 9 (window 100..200, two devices):
    # decode [100,140] on device 0, [150,160] on device 1 -> 40 + 10 over 2 x 100.
    # A kernel of no step (-1) is in neither.
    from tracekit.analysis.stage_walls import per_step_shares

    k = pd.DataFrame({"device": [0, 0, 0, 0, 1, 0], "start": [0, 35, 60, 100, 150, 90], "end": [30, 50, 80, 140, 160, 95],
                      "stage": ["prefill", "prefill", "decode", "decode", "decode", "decode"], "step": [7, 7, 7, 9, 9, -1]})
    k["exclusive_ns"] = k["end"] - k["start"]
    windows = pd.DataFrame({"lo": [0.0, 100.0], "hi": [100.0, 200.0]}).to_numpy()
    shares = per_step_shares(k, k["step"].to_numpy(), [7, 9, None], [*windows, windows[0]])
    assert shares[0] == {"prefill": pytest.approx(0.5), "decode": pytest.approx(0.2)}
    assert list(shares[0]) == ["prefill", "decode"]  # longest wall first
    assert shares[1] == {"decode": pytest.approx(50 / 200)}
    assert shares[2] == {}  # a step-table row with no range: no kernels
    for i, step in enumerate((7, 9)):  # the definition: the stage table of the step's kernels alone
        table = stage_table(k[k["step"] == step], "stage", windows=windows[i: i + 1])
        assert shares[i] == dict(zip(table["stage"], table["wall_share"]))
