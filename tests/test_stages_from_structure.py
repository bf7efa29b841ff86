"""Stages from structure, throughput from tensors, rates against physics (issue 36, part b).

The traces are the project's own CPU recordings (fixtures/record_cpu_t2v_clip.py); their truth
files hold what the run measured of itself (perf_counter around each stage, frames decoded)."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from tracekit.analysis.load import analyze
from tracekit.structure.stage_names import layer_ranges
from tracekit.structure.stage_segments import host_segments
from tracekit.structure.segments import segments
from tracekit.analysis.tensor_items import decoder_outputs
from tracekit.parsers import parse
from tracekit.trace.column_text import as_text
from tracekit.trace.link import link

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures"
SHARED = pathlib.Path(__file__).resolve().parents[2] / "shared" / "fixtures"


def truth(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.truth.json").read_text())


def shares(spans) -> dict[str, float]:
    total: dict[str, float] = {}
    for name, a, b in spans:
        total[name] = total.get(name, 0.0) + (b - a)
    whole = sum(total.values())
    return {k: v / whole for k, v in total.items()}


def test_whole_clip_default_options_stages_and_frames_per_second():
    t = truth("cpu_t2v_clip")
    a = analyze(str(FIXTURES / "cpu_t2v_clip.json.gz"))
    stages = {r["stage"]: r["wall_share"] for r in a.throughput.stages.to_dict(orient="records")}
    # no ranges, no frames, no modules: the stages are what the structure says they are
    want = {"denoise": "denoise", "text encoder (2 layers, d=64)": "text_encode", "conv decoder, VAE (d=16)": "vae_decode"}
    assert set(stages) == set(want)
    for stage, key in want.items():
        assert abs(stages[stage] - t["stage_share"][key]) <= 0.03, (stage, stages[stage], t["stage_share"][key])
    total = a.throughput.total
    assert total["unit"] == "frames" and total["items"] == t["frames"] == 20
    assert abs(total["throughput"] / t["fps"] - 1) <= 0.10


def test_streaming_stages_from_frames_and_from_structure_alone():
    t = truth("cpu_streaming_dit")
    trace = link(parse(str(FIXTURES / "cpu_streaming_dit.json.gz")))
    span = float(trace.meta["span_ns"])
    from_frames = shares(host_segments(trace, 0.0, span))
    assert set(from_frames) == set(t["stage_share"])
    for key, want in t["stage_share"].items():
        assert abs(from_frames[key] - want) <= 0.03, (key, from_frames[key], want)
    # the op sequence alone (frames ignored) finds the same stages: 4 chunks, in each 4 forwards
    # repeated, one forward of the same weights, a conv decoder
    found = segments(trace.ops)
    by_kind = shares([(s.kind, s.start, s.end) for s in found if s.kind != "other"])
    assert abs(by_kind["repeated"] - t["stage_share"]["denoise"]) <= 0.03
    assert abs(by_kind["same_weights"] - t["stage_share"]["refresh_cache"]) <= 0.03
    assert abs(by_kind["conv_decoder"] - t["stage_share"]["decode_frames"]) <= 0.03
    assert sum(s.kind == "repeated" for s in found) == t["chunks"]
    assert {s.name for s in found if s.kind == "repeated"} == {"denoise"}  # the forwards a VAE decodes after
    # frames: 4 decoders, each writing the chunk's frames
    decoders = decoder_outputs(trace)
    assert [d[2] for d in decoders] == [t["frames_per_chunk"]] * t["chunks"]


def test_per_block_ranges_are_never_stages():
    trace = link(parse(str(FIXTURES / "cpu_streaming_dit.json.gz")))
    names = np.array(as_text(trace.ranges["name"]), dtype=object)
    user = np.array(as_text(trace.ranges["domain"]), dtype=object) == "user"
    layer = layer_ranges(trace, np.zeros(len(trace.ranges), dtype=bool))
    assert set(names[user]) == {"self_attention", "cross_attention", "ffn"}
    assert layer[user].all()


def test_repetition_needs_a_network_entry():
    """A layer's repetition inside one forward (no embedding, no image convolution in a period) is no stage."""
    trace = link(parse(str(FIXTURES / "cpu_t2v_clip.json.gz")))
    decoder = [s for s in segments(trace.ops) if s.kind == "conv_decoder"][0]
    # inside the decoder alone the res blocks' ops do not repeat as forwards
    assert segments(trace.ops, decoder.start, decoder.end) == []


@pytest.mark.skipif(not (SHARED / "torch" / "h100_falconsai_vit_hf_inference.json.gz").exists(), reason="shared fixtures")
def test_image_model_reports_images_from_its_input(tmp_path):
    path = SHARED / "torch" / "h100_falconsai_vit_hf_inference.json.gz"
    trace = parse(str(path))
    ops = trace.ops
    conv = [d for n, d in zip(as_text(ops["name"]), ops["input_dims"]) if n == "aten::conv2d"]
    batch = conv[0][0][0]  # the patch embedding's input [B, 3, 224, 224]
    a = analyze(str(path))
    row = a.throughput.steps.iloc[0]
    assert row["unit"] == "images" and row["items"] == batch == 4
    assert row["throughput"] == pytest.approx(batch / row["duration_ns"] * 1e9)


@pytest.mark.skipif(not (SHARED / "torch" / "h100_falconsai_vit_hf_inference.json.gz").exists(), reason="shared fixtures")
def test_rate_above_the_device_is_flagged_and_unknown(tmp_path):
    """On a device 10,000x slower than the H100 that ran it, the step's kernels need far more
    time than its window: its images/s is flagged and unknown, not printed."""
    slow = tmp_path / "slow.toml"
    slow.write_text('[SLOW]\nname = "A slow test GPU"\nmatch = ["A slow test GPU"]\n'
                    "matrix_tflops = { fp16 = 0.01, bf16 = 0.01, tf32 = 0.01, fp32 = 0.01 }\n"
                    "vector_tflops = { fp16 = 0.01, bf16 = 0.01, fp32 = 0.01 }\n"
                    'memory_gbps = 1\nmemory_gb = 24\nsm_count = 8\nsource = "test"\n')
    path = str(SHARED / "torch" / "h100_falconsai_vit_hf_inference.json.gz")
    fast = analyze(path)
    assert fast.throughput.steps["throughput"].iloc[0] > 0
    assert not [f for f in fast.flags if f.figure == "throughput"]
    a = analyze(path, device="SLOW", device_file=str(slow))
    assert a.throughput.steps["throughput"].iloc[0] is None or np.isnan(a.throughput.steps["throughput"].iloc[0])
    assert a.throughput.total["throughput"] is None
    flags = [f for f in a.flags if f.figure == "throughput"]
    assert len(flags) == 1 and flags[0].value > 1.0
    # the bound is the device's: bytes alone over 1 GB/s need far more than the 7.6 ms window
    assert any("shown unknown" in w for w in a.warnings)


def test_kernels_take_the_stage_of_the_op_that_launched_them():
    """The GPU path (stage_names.structure_stages): a kernel launched by an op of the repeated
    forwards is in that stage, one launched by the decoder's ops in the decoder's."""
    import pandas as pd

    from tracekit.structure.stage_names import kernel_stages
    from tracekit.structure.segments import outermost_ops

    trace = link(parse(str(FIXTURES / "cpu_t2v_clip.json.gz")))
    found = segments(trace.ops)
    rows = outermost_ops(trace.ops)  # one kernel per outermost op, as if each launched one
    kernels = pd.DataFrame({"phase": ["forward"] * len(rows), "op": rows, "range": -1, "frame": -1})
    stage = kernel_stages(trace, kernels)
    want = {int(r): s.name for s in found for r in s.rows}
    assert [want[int(r)] for r in rows] == list(stage)
    assert (stage == "denoise").sum() == sum(len(s.rows) for s in found if s.kind == "repeated") > 0


def test_streaming_frames_per_chunk_from_the_decoder_and_with_the_option():
    """Per step (here: each chunk, the window of its `chunk` frame, as a step finder gives it):
    the conv decoder's 12 output frames by default, --frames-per-step 12 the same, each within
    10% of the run's own frames/s."""
    import pandas as pd

    from tracekit.analysis.throughput import step_items

    t = truth("cpu_streaming_dit")
    trace = link(parse(str(FIXTURES / "cpu_streaming_dit.json.gz")))
    r = trace.ranges
    names = as_text(r["name"])
    chunk = [i for i, n in enumerate(names) if n.endswith(": chunk") and "record_cpu_t2v_clip.py" in n]
    assert len(chunk) == t["chunks"]
    start, end = r["start"].to_numpy()[chunk], r["end"].to_numpy()[chunk]
    steps = pd.DataFrame({"step": [f"chunk#{i}" for i in range(len(chunk))], "duration_ns": end - start,
                          "host_start_ns": start, "host_duration_ns": end - start})
    for option in (None, t["frames_per_chunk"]):
        items = step_items(trace, steps, frames_per_step=option)
        assert list(items["unit"]) == ["frames"] * t["chunks"]
        assert list(items["items"]) == [t["frames_per_chunk"]] * t["chunks"]
        fps = items["items"].sum() / items["duration_ns"].sum() * 1e9
        assert abs(fps / t["fps"] - 1) <= 0.10, (fps, t["fps"])
    assert "conv decoder" in step_items(trace, steps)["source"].iloc[0]


def test_detector_reports_images_not_its_text_query_tokens():
    """OWL-ViT: its text queries are token-embedded ([images x queries, 16] ids), but each call's
    throughput is its images (the patch embedding's input batch)."""
    t = truth("cpu_owlvit_detect")
    a = analyze(str(FIXTURES / "cpu_owlvit_detect.json.gz"))
    steps = a.throughput.steps
    # the profiler's schedule leaves one empty ProfilerStep open at the end: the calls are the first ones
    calls = steps.iloc[: t["steps"]]
    assert list(calls["unit"]) == ["images"] * t["steps"]
    assert list(calls["items"]) == [t["images_per_step"]] * t["steps"]
    assert t["query_tokens_per_step"] not in set(calls["items"])
    fps = calls["items"].sum() / calls["duration_ns"].sum() * 1e9
    assert abs(fps / t["images_per_s"] - 1) <= 0.10, (fps, t["images_per_s"])
