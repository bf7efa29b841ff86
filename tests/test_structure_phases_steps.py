"""Phases, steps and throughput from the trace's structure (issue 27 A), on the h200 traces
recorded with their truth files: autograd ops decide backward and recompute, repeated
forwards / optimizer steps / range cycles make steps where no step is marked."""

from __future__ import annotations

import gzip
import json
import re

import pytest

from conftest import shared

VIDEO = "h200_streaming_video_dit1.3b_480p_chunk3_steps2"
TRAIN = "h200_hf_tinyllama-1.1b_train_ckpt_bs8x2048"
GENERATE = "h200_hf_llama3-8b_generate_bs1_eager"


def _trace(name):
    return shared("torch", f"{name}.json.gz")


def _truth(name):
    return json.loads(shared("truth", f"{name}.truth.json").read_text())


def _phase_shares(a) -> dict[str, float]:
    by = a.blocks.groupby("phase", observed=True)["gpu_time_ns"].sum()
    return {str(k): float(v) / float(by.sum()) for k, v in by.items()}


@pytest.fixture(scope="module")
def video():
    from tracekit.api import analyze

    return analyze(_trace(VIDEO))


@pytest.fixture(scope="module")
def train():
    from tracekit.api import analyze

    return analyze(_trace(TRAIN))


@pytest.fixture(scope="module")
def generate():
    from tracekit.api import analyze

    return analyze(_trace(GENERATE))


def test_streaming_video_is_inference_with_its_stages(video):
    # no autograd op in the trace: no backward; kv_recompute is a stage, vae_decode the VAE
    shares = _phase_shares(video)
    assert "backward" not in shares and "decode" not in shares
    truth = _truth(VIDEO)["stage_share"]
    stages = {r["stage"]: r["wall_share"] for r in video.throughput.stages.to_dict(orient="records")}
    for ours, theirs in (("denoise", "denoise"), ("recompute", "recompute"), ("vae_decode", "vae")):
        assert abs(stages[ours] - truth[theirs]) <= 0.03, (ours, stages[ours], truth[theirs])
    # the KV-cache concatenation between the ranges is named as what it is, not "forward"
    assert "forward" not in stages and stages["outside the user's ranges"] < 0.03


def test_streaming_video_chunks_and_frames(video):
    # no ProfilerStep: the top-level ranges repeat (denoise_step x2, kv_recompute, vae_decode) per chunk
    steps = video.throughput.steps
    assert len(steps) == _truth(VIDEO)["chunks_profiled"] == 5
    # frames: the VAE's last convolution works on [3, 96, 480, 832]: 3 frames of 480 x 832 per chunk
    assert steps["unit"].tolist() == ["frames"] * 5 and steps["items"].tolist() == [3.0] * 5
    for r in steps.to_dict(orient="records"):
        assert r["throughput"] == pytest.approx(3 / (r["duration_ns"] * 1e-9))
        assert set(r["per_stage"]) >= {"denoise", "recompute", "vae_decode"}
        assert sum(r["per_stage"].values()) <= 1.0 + 1e-9


def test_streaming_video_frames_per_step_option():
    # the truth counts 4 video frames per latent frame (12 per chunk), which this VAE does not decode
    from tracekit.api import analyze

    a = analyze(_trace(VIDEO), frames_per_step=12)
    fps = a.throughput.total["throughput"]
    assert fps == pytest.approx(12 * 5 / (a.throughput.total["wall_ns"] * 1e-9))
    assert abs(fps / _truth(VIDEO)["fps"] - 1) <= 0.10


def _recompute_share_from_raw(path) -> float:
    """Recomputed forward, counted from the raw JSON on its own: ops recorded for autograd
    (a `Sequence number`) whose parent op is an autograd node (`...Backward<N>`), and all
    they enclose; a kernel is theirs when its launch (same correlation) lies inside one on
    the same thread. share = Σ their GPU time / Σ all GPU activity time."""
    events = json.load(gzip.open(path))["traceEvents"]
    node = re.compile(r"^autograd::engine::evaluate_function|^torch::autograd::|Backward\d*$")
    roots: dict[int, list[tuple[float, float]]] = {}
    by_thread: dict[int, list[dict]] = {}
    for e in events:
        if e.get("cat") == "cpu_op":
            by_thread.setdefault(e["tid"], []).append(e)
    for tid, ops in by_thread.items():
        ops.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[dict] = []
        for e in ops:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            if (stack and node.search(stack[-1]["name"]) and not node.search(e["name"])
                    and "Sequence number" in e.get("args", {})):
                roots.setdefault(tid, []).append((e["ts"], e["ts"] + e["dur"]))
            stack.append(e)
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    total = recomputed = 0.0
    for e in events:
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        total += e["dur"]
        launch = launches.get(e.get("args", {}).get("correlation"))
        if launch and any(a <= launch["ts"] <= b for a, b in roots.get(launch["tid"], ())):
            recomputed += e["dur"]
    return recomputed / total


def test_checkpointed_training_recompute_share(train):
    raw = _recompute_share_from_raw(_trace(TRAIN))
    ours = _phase_shares(train)["recompute"]
    assert raw > 0.1  # every decoder layer's forward runs again inside backward
    assert abs(ours - raw) <= 0.05, (ours, raw)


def test_training_tokens_per_step(train):
    # the embedding's input [8, 2048]: 8 x 2048 = 16,384 tokens per step
    steps = train.throughput.steps
    assert steps["unit"].tolist() == ["tokens", "tokens"]
    assert steps["items"].tolist() == [8 * 2048] * 2 == [_truth(TRAIN)["tokens_per_step"]] * 2
    assert steps["throughput"].tolist() == pytest.approx([16384 / (d * 1e-9) for d in steps["duration_ns"]])


def test_generate_prefill_and_decode_steps(generate):
    truth = _truth(GENERATE)
    names = generate.steps["step"].tolist()
    assert len(names) == 1 + truth["decode_steps"] == 17
    assert names[0].startswith("prefill#0") and all(n.startswith("decode#") for n in names[1:])
    shares = _phase_shares(generate)
    assert "backward" not in shares and shares["decode"] > 0.5 and shares["prefill"] > 0.05
    items = generate.throughput.steps
    # tokens: the embedding's indices [1, 512] at prefill, [1, 1] at each decode step
    assert items["items"].tolist() == [float(truth["prompt"])] + [1.0] * 16 and set(items["unit"]) == {"tokens"}
    # decode rate apart from the prompt: 16 tokens / the decode steps' GPU windows
    decode = generate.throughput.total["by_main_stage"]["decode"]
    wall = float(items["duration_ns"].iloc[1:].sum())
    assert decode["steps"] == 16 and decode["items"] == 16 and decode["throughput"] == pytest.approx(16 / (wall * 1e-9))


def test_generate_bytes_per_decode_step(generate):
    # weights + the KV cache read, per decode token; within 10% (attention costed by issue 28)
    truth = _truth(GENERATE)
    want = truth["weight_bytes_per_decode_step"] + truth["kv_read_bytes_decode_step_first"]
    decode = generate.steps[generate.steps["step"].str.startswith("decode#")]
    assert len(decode) == 16
    for got in decode["bytes"]:
        assert abs(got / want - 1) <= 0.10, (got, want)


def test_training_without_profiler_steps(tmp_path):
    """The tinyllama trace with its ProfilerStep events removed: the optimizer-step
    annotations (`Optimizer.step#AdamW.step`) end the iterations."""
    from tracekit.api import analyze

    data = json.load(gzip.open(_trace(TRAIN)))
    kept = [e for e in data["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")]
    assert len(kept) < len(data["traceEvents"])
    data["traceEvents"] = kept
    path = tmp_path / "no_profiler_steps.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(data, f)
    optimizer_steps = sum(1 for e in kept if e.get("cat") == "user_annotation" and e["name"].startswith("Optimizer.step#"))
    a = analyze(path)
    assert a.steps["step"].tolist() == [f"iteration#{i}" for i in range(optimizer_steps)] == ["iteration#0", "iteration#1"]
    items = a.throughput.steps
    assert items["items"].tolist() == [16384.0, 16384.0] and set(items["unit"]) == {"tokens"}
    # each iteration's GPU window is one training step: 0.427 s unprofiled (truth), within 10%
    step_s = _truth(TRAIN)["step_s"]
    assert all(abs(d * 1e-9 / step_s - 1) <= 0.10 for d in a.steps["duration_ns"]), a.steps["duration_ns"].tolist()


def test_autograd_states_reentrant_and_non_reentrant():
    """op_states on a hand-built op tree. Non-reentrant: the saved-tensor hook re-runs the
    layer (aten::linear, recorded for autograd: a sequence number) inside MmBackward0, next
    to the node's own aten::mm (no sequence number). Reentrant: CheckpointFunctionBackward
    re-runs the forward, then runs its inner backward (autograd nodes again)."""
    import pandas as pd

    from tracekit.trace.autograd import BACKWARD, NONE, RECOMPUTE, op_states

    rows = [  # name, sequence, parent
        ("aten::linear", 5, -1),                                          # 0 forward
        ("aten::mm", -1, 0),                                              # 1 its mm
        ("autograd::engine::evaluate_function: MmBackward0", -1, -1),     # 2
        ("MmBackward0", 5, 2),                                            # 3 the node (its seq)
        ("aten::linear", 9, 3),                                           # 4 recompute
        ("aten::mm", -1, 4),                                              # 5 inside it: recompute
        ("aten::mm", -1, 3),                                              # 6 the node's own math
        ("autograd::engine::evaluate_function: CheckpointFunctionBackward", -1, -1),  # 7
        ("CheckpointFunctionBackward", 7, 7),                             # 8
        ("aten::gelu", 11, 8),                                            # 9 reentrant recompute
        ("autograd::engine::evaluate_function: GeluBackward0", -1, 8),    # 10 its inner backward
        ("aten::gelu_backward", -1, 10),                                  # 11
        ("Optimizer.step#AdamW.step", -1, -1),                            # 12
    ]
    parent = [p for _, _, p in rows]
    depth = []
    for p in parent:
        depth.append(0 if p < 0 else depth[p] + 1)
    ops = pd.DataFrame({"name": pd.Categorical([n for n, _, _ in rows]), "sequence": [s for _, s, _ in rows],
                        "parent": parent, "depth": depth})
    want = [NONE, NONE, BACKWARD, BACKWARD, RECOMPUTE, RECOMPUTE, BACKWARD, BACKWARD, BACKWARD, RECOMPUTE,
            BACKWARD, BACKWARD, NONE]
    assert op_states(ops).tolist() == want


def test_range_cycles_find_the_period():
    """Top-level ranges a, a, b, c repeated 3 times: 3 steps, each from the previous cycle's end
    (the first: from its first `a`) to its own `c`'s end: the gap before a cycle is its own."""
    import pandas as pd

    from tracekit.trace.frames import Trace
    from tracekit.structure.steps import range_cycles

    names = ["a", "a", "b", "c"] * 3
    start = [10 * i for i in range(12)]
    ranges = pd.DataFrame({"name": pd.Categorical(names), "domain": pd.Categorical(["user"] * 12), "pid": 1, "tid": 1,
                           "start": start, "end": [s + 8 for s in start], "parent": -1, "depth": 0})
    empty = pd.DataFrame()
    got = range_cycles(Trace(empty, empty, empty, ranges))
    assert [(n, a, b) for n, a, b, _, _ in got] == [("a..c#0", 0, 38), ("a..c#1", 38, 78), ("a..c#2", 78, 118)]
    # no repeat: no steps
    one = ranges.iloc[:4].copy()
    assert range_cycles(Trace(empty, empty, empty, one)) == []


def _frames_trace(frames):
    """A Trace whose ranges are Python frames: (name, parent row)."""
    import pandas as pd

    from tracekit.trace.frames import Trace

    depth = []
    for _, p in frames:
        depth.append(0 if p < 0 else depth[p] + 1)
    ranges = pd.DataFrame({"name": pd.Categorical([n for n, _ in frames]), "domain": pd.Categorical(["python"] * len(frames)),
                           "pid": 1, "tid": 1, "start": range(len(frames)), "end": range(1, len(frames) + 1),
                           "parent": [p for _, p in frames], "depth": depth})
    return Trace(pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), ranges)


def test_python_functions_name_the_stages_of_a_users_pipeline():
    """Inference with with_stack and no ranges: below the shared frames (main), the stacks
    branch into the user's functions encode_prompt / denoise / decode_video: those are the
    stages, whatever library code runs inside them."""
    import pandas as pd

    from tracekit.structure.stage_names import kernel_stages

    trace = _frames_trace([
        ("pipe.py(40): main", -1),                                  # 0
        ("pipe.py(12): encode_prompt", 0),                          # 1
        ("nn.Module: T5Encoder", 1),                                # 2
        ("pipe.py(20): denoise", 0),                                # 3
        ("site-packages/diffusers/models/transformer.py(9): forward", 3),  # 4
        ("pipe.py(30): decode_video", 0),                           # 5
    ])
    kernels = pd.DataFrame({"phase": pd.Categorical(["forward"] * 5 + ["optimizer"]), "range": -1,
                            "frame": [2, 4, 4, 5, 0, 4]})
    assert kernel_stages(trace, kernels).tolist() == ["encode_prompt", "denoise", "denoise", "decode_video", "main", "optimizer"]
    # one model's forward: the stacks branch only into its modules (a library): stays forward
    model = _frames_trace([("run.py(5): main", -1), ("nn.Module: LlamaModel", 0), ("nn.Module: LlamaAttention", 1),
                           ("nn.Module: LlamaMLP", 1)])
    kernels = pd.DataFrame({"phase": pd.Categorical(["forward"] * 2), "range": -1, "frame": [2, 3]})
    assert kernel_stages(model, kernels).tolist() == ["forward", "forward"]
    # an installed library's functions (torch.profiler writes their path inside the package): not the user's stages
    pipeline = _frames_trace([("run.py(5): main", -1), ("transformers/pipelines/base.py(1173): _ensure_tensor_on_device", 0),
                              ("transformers/pipelines/video_classification.py(150): _forward", 0)])
    kernels = pd.DataFrame({"phase": pd.Categorical(["forward"] * 2), "range": -1, "frame": [1, 2]})
    assert kernel_stages(pipeline, kernels).tolist() == ["forward", "forward"]


def test_per_layer_ranges_are_not_steps():
    """The graph-capture trace: one forward (a single token embedding, indices [16, 1])
    under 32 cycles of per-layer ranges `attention`, `mlp`: the layers, not 32 steps."""
    from tracekit.api import load
    from tracekit.structure.forwards import token_forwards
    from tracekit.structure.steps import inferred_windows, range_cycles

    trace = load(shared("torch", "h200_llama3-8b_cudagraph_decode_bs16_capture.json.gz"))
    assert len(range_cycles(trace)) == 32 and len(token_forwards(trace.ops)) == 1
    assert inferred_windows(trace) == []  # one forward: no repeated forwards either


def test_a_wrapping_optimizers_inner_step_is_not_an_iteration_of_its_own(tmp_path):
    """ZeroRedundancyOptimizer.step wraps AdamW.step; both carry torch.profiler's
    `Optimizer.step#...` annotation. Three iterations of nested steps are three iterations, each
    from the previous one's end to its own end (none of negative length)."""
    from synthetic import KinetoBuilder

    import tracekit

    b = KinetoBuilder()
    for i in range(3):
        t = 1000.0 * i
        b.op("aten::mm", t + 10, 100.0, dims=[[64, 64], [64, 64]], types=["float", "float"])
        b.kernel("gemm_kernel", t + 20, t + 30, 50.0)
        b.range("Optimizer.step#ZeroRedundancyOptimizer.step", t + 800, 190.0)
        b.range("Optimizer.step#AdamW.step", t + 810, 90.0)
        b.kernel("multi_tensor_apply_kernel", t + 820, t + 830, 20.0)
    a = tracekit.analyze(b.write(tmp_path / "nested_optimizers.json"))
    assert list(a.steps["step"]) == ["iteration#0", "iteration#1", "iteration#2"]
    host = a.steps["host_duration_ns"].to_numpy()
    assert (host > 0).all()
    assert list(host[1:]) == [1_000_000, 1_000_000]  # from one outer step's end (t + 990) to the next's


def test_a_video_chunk_owns_the_work_that_prepares_it():
    """The H100 recording of the streaming video (fixtures/gpu/h100): each chunk begins with 61
    kernels (the KV-cache concat and the noise) before its first denoise_step. Every chunk holds
    its own: 2,594 kernels each, and the mean window is the unprofiled chunk time (183.3 ms)
    within 1%."""
    import json
    import pathlib

    import tracekit

    here = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "gpu" / "h100"
    a = tracekit.analyze(here / "h10080gbhbm3_streaming_video_dit1.3b_480p_chunk3_steps2.json.gz")
    truth = json.loads((here / "video.truth.json").read_text())
    steps = a.steps
    assert len(steps) == truth["chunks_profiled"] == 5
    assert (steps["kernels"] == 2594).all()
    assert abs(steps["duration_ns"].mean() / 1e9 / truth["chunk_s"] - 1) < 0.01


def test_the_first_cycle_takes_its_lead_not_the_warm_up_before_the_loop():
    """Cycles a, a, b, c at 0..118 ns: the later cycles start 2 ns after the previous one ends.
    The first cycle takes an op 1 ns before its first range (its own setup), not a warm-up op 1 s
    earlier on the same thread."""
    import pandas as pd

    from tracekit.trace.frames import Trace
    from tracekit.structure.steps import range_cycles

    names = ["a", "a", "b", "c"] * 3
    start = [10 * i for i in range(12)]
    ranges = pd.DataFrame({"name": pd.Categorical(names), "domain": pd.Categorical(["user"] * 12), "pid": 1, "tid": 1,
                           "start": start, "end": [s + 8 for s in start], "parent": -1, "depth": 0})
    # each range holds two ops (a range holding one op at most is a library's per-call range)
    inside = [t for s in start for t in (s + 1, s + 4)]
    ops = pd.DataFrame({"name": ["aten::warmup", "aten::randn"] + ["aten::add"] * len(inside), "pid": 1, "tid": 1,
                        "start": [-1_000_000_000, -1] + inside, "end": [-999_000_000, 0] + [t + 2 for t in inside]})
    empty = pd.DataFrame()
    got = range_cycles(Trace(empty, empty, ops, ranges))
    assert [(a, b) for _, a, b, _, _ in got] == [(-1, 38), (38, 78), (78, 118)]
