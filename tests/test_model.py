"""Model-aware analysis: config -> architecture, step batches, block costs, the fill of
uncosted kernels, the roofline step prediction and calibration.

Truth comes from outside tracekit's formulas: the raw trace read with gzip+json (range
names, shapes), hand arithmetic on the published architecture numbers, and for the CPU
fixtures torch.utils.flop_counter plus the bytes the recorded modules actually read
(fixtures/record_cpu_models.py wrote them to fixtures/cpu_tiny_models_truth.json).
"""

from __future__ import annotations

import gzip
import json
import re

import numpy as np
import pandas as pd
import pytest

import tracekit
from conftest import PROJECT_FIXTURES, REPO, shared, shared_model
from helpers import run_cli
from tracekit.errors import TraceError
from tracekit.model import ModelOptions, load_config
from tracekit.model.batch import Requests
from tracekit.model.batch_annotations import from_annotation
from tracekit.model.blocks import expected_experts
from tracekit.model.calibrate import fit
from tracekit.model.predict import predicted_ns

MODELS = REPO.parent / "shared" / "models"
DATA = REPO / "tests" / "data" / "models"
SGLANG = "torch/mi300x_sglang_qwen3-8b_decode_bs32.json.gz"
B200 = "torch/b200_vllm_tp8_rank0_eager.json.gz"
QWEN15 = "torch/h100_qwen1.5-0.5b_hf_inference.json.gz"


def raw_ranges(path) -> list[str]:
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    return [e["name"] for e in events if e.get("cat") == "user_annotation"]


@pytest.fixture(scope="module")
def analyses():
    cache = {}

    def get(fixture: str, config: str | None, **options):
        key = (fixture, config, tuple(sorted(options.items())))
        if key not in cache:
            model = ModelOptions(str(MODELS / config), **options) if config else None
            cache[key] = tracekit.analyze(shared(*fixture.split("/")), model=model)
        return cache[key]

    return get


# -- config -----------------------------------------------------------------------------

def test_qwen3_config_and_hand_weight_bytes():
    a = load_config(MODELS / "qwen3-8b.config.json")
    assert (a.hidden, a.layers, a.heads, a.kv_heads, a.head_dim, a.intermediate, a.vocab) == (4096, 36, 32, 8, 128, 12288, 151936)
    assert not a.is_moe and not a.attention_bias and not a.tied_embeddings and set(a.windows) == {None}


def test_gpt_oss_config_mxfp4_experts_bf16_attention_alternating_windows():
    a = load_config(MODELS / "gpt-oss-120b.config.json")
    assert (a.experts, a.top_k, a.expert_intermediate) == (128, 4, 2880)
    assert a.expert_weights.dtype == "mxfp4" and a.expert_weights.bytes_per_param == 4.25 / 8  # 4 bits + 8-bit scale per 32
    assert a.weights.dtype == "bf16"  # model.layers.*.self_attn is in modules_to_not_convert
    assert a.windows[0::2] == (128,) * 18 and a.windows[1::2] == (None,) * 18
    assert a.attention_bias and a.router_bias


def test_other_families():
    mix = load_config(DATA / "tiny_mixtral.config.json")
    assert mix.windows == (64, 64) and (mix.experts, mix.top_k, mix.expert_intermediate) == (8, 2, 256) and mix.moe_layers == (True, True)
    ds = load_config(DATA / "tiny_deepseek.config.json")
    assert ds.is_mla and ds.kv_lora_rank == 64 and ds.moe_layers == (False, True, True, True)
    assert (ds.shared_experts, ds.shared_intermediate) == (1, 64)
    assert ds.weights.dtype == "fp8" and ds.weights.bytes_per_param == 1 + 4 / (128 * 128)
    qm = load_config(DATA / "tiny_qwen2_moe.config.json")
    assert qm.moe_layers == (False, True, False, True) and (qm.shared_experts, qm.shared_intermediate) == (1, 96)
    assert qm.attention_bias and set(qm.windows) == {None}  # use_sliding_window is false
    assert load_config(MODELS / "qwen3-8b.config.json", weight_dtype="fp8").weights.bytes_per_param == 1.0
    gemma = load_config(DATA / "tiny_gemma_w4a16.config.json")
    assert gemma.windows == (16, 16, None, 16, 16, None)  # every third layer is full attention
    assert gemma.weights.dtype == "int4" and gemma.weights.bytes_per_param == 0.5 + 2 / 128  # packed int4 + fp16 scale per 128


@pytest.mark.parametrize("name, reason", [
    ("bad_unknown_quant", "quantization method 'mystery' is not known; pass --weight-dtype"),
    ("bad_missing_layers", "lacks `num_hidden_layers`"),
    ("bad_truncated", "not valid JSON"),
    ("bad_heads", "6 attention heads do not share 4 key/value heads"),
    ("no_such_file", "no such model config"),
])
def test_bad_config_is_one_clear_error(name, reason):
    path = DATA / f"{name}.config.json"
    with pytest.raises(TraceError) as err:
        load_config(path)
    assert reason in err.value.reason and err.value.path == str(path)
    run = run_cli("analyze", shared(*SGLANG.split("/")), "--model", path)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [f"tracekit: error: {path}: {err.value.reason}"]


def test_model_options_need_model():
    run = run_cli("analyze", shared(*SGLANG.split("/")), "--tp", "2")
    assert run.returncode == 2 and "need --model" in run.stderr


# -- batch --------------------------------------------------------------------------------

def test_newer_vllm_annotation_from_the_raw_sglang_trace():
    name = next(n for n in raw_ranges(shared(*SGLANG.split("/"))) if n.startswith("execute_"))
    gen = dict(re.findall(r"(sqsq|sqsk|sq|sk)(\d+)", name.split("_generation_")[1]))
    b = from_annotation(name)
    assert b.requests == 32 and b.tokens == int(gen["sq"]) == 32 and b.kv_tokens == int(gen["sk"]) == 32785
    # decode: every request's single query sees all its keys
    assert b.pairs() == int(gen["sqsk"]) - (int(gen["sqsq"]) - int(gen["sq"])) / 2 == 32785
    assert b.kind == "decode"


def test_older_vllm_annotation_from_the_raw_b200_trace():
    name = next(n for n in raw_ranges(shared(*B200.split("/"))) if n.startswith("execute_"))
    tokens, squares = map(int, re.search(r"context_1\((\d+)_(\d+)\)", name).groups())
    assert (tokens, squares) == (888, 888 ** 2)
    b = from_annotation(name)
    assert b.tokens == 888 and b.requests == 1 and b.kind == "prefill"
    assert b.pairs() == (squares + tokens) / 2 == 888 * 889 / 2  # causal, with the diagonal
    # window 128: query j sees min(j + 1, 128) keys
    assert b.pairs(128) == sum(min(j + 1, 128) for j in range(888))


def test_sglang_step_batch_size_alone_leaves_kv_unknown():
    b = from_annotation("step[DECODE bs=32]")
    assert b.requests == 32 and b.tokens == 32 and not b.kv_known and b.pairs() is None
    from tracekit.model.batch import with_context

    filled = with_context(b, 1000)
    assert filled.kv_tokens == 32 * 1001 and "--context" in filled.source


def test_windowed_pairs_by_hand():
    r = Requests(2, 8, 20)  # two requests of 4 new tokens on 6 cached: queries see 7, 8, 9, 10 keys
    assert r.pairs() == 2 * (7 + 8 + 9 + 10)
    assert r.pairs(8) == 2 * (7 + 8 + 8 + 8)
    assert r.kv_read(8) == 2 * min(10, 8 + 4 - 1)


def test_expected_distinct_experts():
    assert expected_experts(8, 2, 0) == 0
    assert expected_experts(8, 2, 1) == pytest.approx(2.0)
    assert expected_experts(8, 2, 2) == pytest.approx(8 * (1 - 0.75 ** 2))
    assert expected_experts(128, 4, 888) == pytest.approx(128, rel=1e-9)


# -- the shared serving traces ------------------------------------------------------------

def test_sglang_decode_step_moves_twenty_gigabytes(analyses):
    a = analyses(SGLANG, "qwen3-8b.config.json")
    h, kv, d, layers, vocab, inter = 4096, 8, 128, 36, 151936, 12288
    weights = 2 * (layers * (h * 32 * d + 2 * h * kv * d + 32 * d * h + 3 * h * inter) + vocab * h)  # bf16, lm_head read once
    kv_bytes = 32785 * layers * 2 * kv * d * 2
    step = a.model.steps.iloc[0]
    assert step["kv_bytes"] == kv_bytes
    projections_and_head = a.model.costs.query("block in ['attention projections', 'ffn', 'lm head']")["weight_bytes"].sum()
    assert projections_and_head == weights
    assert abs(step["bytes"] / 20.0e9 - 1) <= 0.10
    # the step table (kernel costs after the fill) carries the same bytes: the fill conserves them
    assert abs(a.steps["bytes"].iloc[0] / 20.0e9 - 1) <= 0.10
    assert a.coverage["modeled_share"] >= 0.90 and a.coverage["modeled_share_by_source"]["model"] > 0.9
    # achieved bandwidth over the step's GPU busy time, and the roofline efficiency
    assert step["achieved_tbps"] == pytest.approx(step["bytes"] / step["busy_ns"] / 1e3)
    assert step["bandwidth_share_peak"] == pytest.approx(step["achieved_tbps"] * 1e12 / a.device.bandwidth)
    assert step["roofline_efficiency"] == pytest.approx(step["predicted_peak_ns"] / step["busy_ns"])
    assert step["busy_ns"] == a.steps["busy_ns"].iloc[0]


def test_model_fill_conserves_block_costs_and_leaves_op_shapes(analyses):
    a = analyses(SGLANG, "qwen3-8b.config.json")
    plain = analyses(SGLANG, None)
    k, p = a.kernels, plain.kernels
    shaped = (p["cost_source"] == "op shapes").to_numpy()
    assert np.array_equal(k["flops"].to_numpy()[shaped], p["flops"].to_numpy()[shaped])
    filled = k[k["cost_source"] == "model"]
    placed = a.model.blocks
    # each group's cost went onto its uncosted kernels by time: what they took adds up
    assert filled["flops"].sum() == pytest.approx((placed["flops"] * placed["filled_share"]).sum(), rel=1e-9)
    assert (filled["bytes_read"] + filled["bytes_written"]).sum() == pytest.approx((placed["bytes"] * placed["filled_share"]).sum(), rel=1e-9)
    with_kernels = placed[placed["kernels"] > 0]
    assert with_kernels["filled_share"].between(0.9, 1.0).all()
    # the embedding gather is elementwise work attribution did not place: predicted, not put on kernels
    unplaced = placed[placed["kernels"] == 0]
    assert list(unplaced["blocks"]) == ["embedding"] and unplaced["note"].str.startswith("no kernel attributed").all()
    assert plain.model is None and "model" not in plain.to_dict()
    json.dumps(a.to_dict(), allow_nan=False)


def test_b200_gpt_oss_costed_and_attention_pairs_exact(analyses):
    plain = analyses(B200, None)
    a = analyses(B200, "gpt-oss-120b.config.json")
    assert plain.coverage["modeled_share"] < 0.5
    assert a.coverage["modeled_share"] >= 0.90
    assert a.model.summary["tp"] == 8 and a.model.summary["parallel_source"] == "per-rank qkv weight shape"
    core = a.model.costs.query("block == 'attention core'")["flops"].sum()
    full, sliding = 888 * 889 / 2, sum(min(j + 1, 128) for j in range(888))
    heads_per_rank, dims = 64 // 8, 64 + 64
    assert core == 18 * 2 * full * heads_per_rank * dims + 18 * 2 * sliding * heads_per_rank * dims


def test_qwen15_model_flops_equal_shape_flops_per_block(analyses):
    """Both costing paths on a trace with shapes: model-derived GEMM and attention FLOPs per
    block equal the op-shape-derived FLOPs of that block's kernels in the step, within 2%."""
    a = analyses(QWEN15, "qwen1.5-0.5b-chat.config.json")
    step = a.model.steps.iloc[0]
    assert (step["requests"], step["tokens"]) == (16, 16 * 559)  # from the attention ops' shapes
    k = a.kernels
    row = int(a.trace.ranges.index[a.trace.ranges["name"].astype(str) == step["step"]][0])
    mine = k[(k["step"] == row) & (k["cost_source"] == "op shapes")]
    model = a.model.costs.set_index("block")["flops"]
    pairs = [("attention projections", "attention", "gemm"), ("attention core", "attention", "attention"), ("ffn", "ffn", "gemm")]
    for block, attributed, klass in pairs:
        shapes = mine[(mine["block"] == attributed) & (mine["kernel_class"] == klass)]["flops"].sum()
        assert shapes > 0
        assert model[block] == pytest.approx(shapes, rel=0.02), block


def _inference_steps_without_a_batch(tmp_path) -> str:
    """Three ProfilerSteps of one GEMM each (an inference step: no autograd op), on an A100,
    whose ops say nothing of a token batch (no embedding, no attention)."""
    from synthetic import KinetoBuilder

    b = KinetoBuilder("NVIDIA A100-SXM4-80GB")
    for i in range(3):
        t = 1000.0 * i
        b.range(f"ProfilerStep#{i + 4}", t, 900.0)
        b.op("aten::mm", t + 10, 50.0, dims=[[64, 4096], [4096, 4096]], types=["c10::BFloat16", "c10::BFloat16"])
        b.kernel("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", t + 20, t + 100, 300.0)
    plain = b.write(tmp_path / "steps_without_a_batch.json")
    packed = tmp_path / "steps_without_a_batch.json.gz"
    packed.write_bytes(gzip.compress(open(plain, "rb").read()))  # raw_ranges reads a .json.gz
    return str(packed)


def test_steps_without_a_batch_say_so_and_options_fill_them(tmp_path):
    """No batch in the trace: each step is costed at its lower bound (1 request of 1 token, KV
    unknown), flagged, never put on kernels; --batch/--context complete it. (It was the A100
    DDP trace, a training run: its steps are now left unpredicted, test below.)"""
    path = _inference_steps_without_a_batch(tmp_path)
    profiler_steps = sorted({n for n in raw_ranges(path) if re.fullmatch(r"ProfilerStep#\d+", n)})
    a = tracekit.analyze(path, model=ModelOptions(str(MODELS / "qwen3-8b.config.json"), tp=1))  # one GPU's weights
    steps = a.model.steps
    assert sorted(steps["step"]) == profiler_steps
    assert steps["batch"].str.startswith("unknown").all() and steps["lower_bound"].all()
    assert (steps["complete_with"] == "--batch --context").all() and steps["error"].isna().all() and steps["requests"].isna().all()
    # weights of one token: Qwen3-8B bf16, per layer q,k,v,o = 4096·(32+2·8)·128 + 32·128·4096, MLP 3·4096·12288,
    # 2 norms of 4096, and Qwen3's per-head q_norm and k_norm (RMSNorm over head_dim 128 each);
    # once: final norm 4096, the LM head 151936·4096, one embedding row 4096; x 2 bytes
    h = 4096
    per_layer = h * (32 + 16) * 128 + 32 * 128 * h + 3 * h * 12288 + 2 * h + 2 * 128
    assert (steps["weight_bytes"] == 2 * (36 * per_layer + h + 151936 * h + h)).all()
    assert steps["predicted_ns"].notna().all() and (steps["predicted_ns"] > 0).all()
    assert f"{len(profiler_steps)} of {len(profiler_steps)} steps have no batch" in a.model.summary["notes"][0]
    assert f"model: {a.model.summary['notes'][0]}" in a.warnings
    assert a.model.summary["steps_lower_bound"] == len(profiler_steps) and a.model.summary["mape"] is None
    assert (a.kernels["cost_source"].astype(str) != "model").all()  # a lower bound is not put on kernels
    doc = json.loads(json.dumps(a.to_dict(), allow_nan=False))["model"]
    assert all(s["lower_bound"] and s["error"] is None for s in doc["steps"])
    given = tracekit.analyze(path, model=ModelOptions(str(MODELS / "qwen3-8b.config.json"), tp=1, batch=8, context=1000))
    g = given.model.steps
    assert (g["kv_tokens"] == 8 * 1001).all() and g["predicted_ns"].notna().all() and not g["lower_bound"].any()
    assert (g["predicted_ns"] > steps["predicted_ns"].to_numpy()).all()  # the bound is below the complete figure
    only_context = tracekit.analyze(path, model=ModelOptions(str(MODELS / "qwen3-8b.config.json"), tp=1, context=1000)).model.steps
    assert only_context["lower_bound"].all() and (only_context["complete_with"] == "--batch").all()


def test_training_steps_of_a_ddp_run_are_not_predicted():
    """The A100 DDP trace's ProfilerSteps run backward kernels (a training run): the model
    (an inference forward) neither costs nor predicts them, and says why."""
    path = shared("torch", "a100_ddp_nccl_rank0.json.gz")
    a = tracekit.analyze(path, model=ModelOptions(str(MODELS / "qwen3-8b.config.json"), tp=1))
    steps = a.model.steps
    n = len({x for x in raw_ranges(path) if re.fullmatch(r"ProfilerStep#\d+", x)})
    assert len(steps) == n and steps["predicted_ns"].isna().all() and steps["weight_bytes"].isna().all()
    assert any(f"{n} of {n} steps run backward kernels (training)" in note for note in a.model.summary["notes"])


# -- CPU fixtures with torch's own counts --------------------------------------------------

TRUTH = json.loads((PROJECT_FIXTURES / "cpu_tiny_models_truth.json").read_text())


@pytest.mark.parametrize("name", ["dense", "moe"])
def test_cpu_models_against_flop_counter_and_read_bytes(name):
    truth = TRUTH[name]
    config = PROJECT_FIXTURES / truth["config"]
    a = tracekit.analyze(PROJECT_FIXTURES / truth["trace"], model=ModelOptions(str(config)))
    arch = load_config(config)
    steps, costs = a.model.steps, a.model.costs
    assert len(steps) == len(truth["steps"])
    for (_, s), t in zip(steps.iterrows(), truth["steps"]):
        calls = t["attention_calls"]
        full_keys = max(c[2] for c in calls)
        assert (s["requests"], s["tokens"]) == (t["requests"], t["query_tokens"])
        assert s["kv_tokens"] == t["requests"] * full_keys
        mine = costs[costs["step"] == s["step"]].set_index("block")
        gemms = mine.loc[["attention projections", "ffn", "lm head"], "flops"].sum()
        assert gemms == t["flops"] == sum(t["flops_by_op"].values())  # flop_counter: mm + addmm
        # flop_counter does not count the CPU attention kernel: 4·b·H·pairs·D per call by hand
        hand = sum(4 * b * arch.heads * (sq * (sq + 1) / 2 if causal else sq * sk) * arch.head_dim for b, sq, sk, causal in calls)
        assert mine.loc["attention core", "flops"] == hand
        assert s["kv_bytes"] == t["kv_bytes"]
        if name == "dense":
            assert s["weight_bytes"] == t["weight_bytes"]
        else:  # the model uses the expected distinct experts; the run chose actual ones
            per_expert = 3 * arch.hidden * arch.expert_intermediate * 2
            expected = expected_experts(arch.experts, arch.top_k, t["query_tokens"]) * arch.layers
            assert s["weight_bytes"] - expected * per_expert == pytest.approx(t["weight_bytes"] - sum(t["distinct_experts"]) * per_expert)
    if name == "moe":  # near-uniform routing of a random router: actual distinct experts near the expectation
        actual = np.mean([np.mean(t["distinct_experts"]) for t in truth["steps"][1:]])
        assert actual == pytest.approx(expected_experts(8, 2, truth["steps"][1]["query_tokens"]), rel=0.25)
    assert a.model.steps["predicted_ns"].isna().all()  # a CPU profile has no GPU roofline


# -- prediction and calibration -------------------------------------------------------------

def test_predicted_time_is_the_sum_of_block_maxima():
    terms = pd.DataFrame({"block": ["a", "b", "c"], "layer": [0, 0, -1], "comm": [False, False, True],
                          "t_compute_ns": [10.0, 1.0, 0.0], "t_memory_ns": [4.0, 6.0, 5.0]})
    assert predicted_ns(terms, 1.0, 1.0) == 10 + 6 + 5
    assert predicted_ns(terms, 0.5, 0.5) == 20 + 12 + 5  # links are not scaled by HBM efficiency
    assert predicted_ns(terms, 1.0, 0.25) == 16 + 24 + 5


def _synthetic_steps(e_m: float, e_b: float) -> pd.DataFrame:
    rows = []
    for i, (tc, tm) in enumerate([(5.0, 1.0), (1.0, 5.0), (3.0, 3.0), (2.0, 8.0)]):
        busy = max(tc / e_m, tm / e_b)
        rows.append({"step_key": f"s{i}", "block": "x", "layer": 0, "comm": False, "t_compute_ns": tc, "t_memory_ns": tm, "busy_ns": busy})
    return pd.DataFrame(rows)


def test_calibration_recovers_known_efficiencies():
    result = fit(_synthetic_steps(0.7, 0.4))
    assert result["matrix_efficiency"] == pytest.approx(0.7, abs=0.002)
    assert result["bandwidth_efficiency"] == pytest.approx(0.4, abs=0.002)
    assert result["mape_fitted"] < 0.005 < result["mape_peak"]
    one = fit(_synthetic_steps(0.5, 0.5).iloc[:1])  # one step: one common factor
    assert one["matrix_efficiency"] == one["bandwidth_efficiency"] == pytest.approx(0.5, abs=0.001)


def test_calibrate_cli_on_shared_traces(tmp_path):
    out = tmp_path / "factors.json"
    run = run_cli("calibrate", shared(*SGLANG.split("/")), "--model", MODELS / "qwen3-8b.config.json", "--out", out)
    assert run.returncode == 0, run.stderr
    result = json.loads(out.read_text())
    mi300x = result["devices"]["MI300X"]
    assert mi300x["steps"] == 1 and mi300x["mape_fitted"] < 0.01 < mi300x["mape_peak"]
    assert "MAPE at peak" in run.stdout


def test_calibrate_with_steps_of_unknown_kv_length(tmp_path):
    """rtx3090 vLLM gpt-oss-20b: 16 of its 18 steps do not know their KV length (lower bounds, no
    terms to fit). calibrate exited 1 (KeyError in _peak_blocks, which looked up the terms of
    every step with block groups); now only the complete steps are fitted and summed per block."""
    trace = shared("torch", "rtx3090_vllm_gpt-oss-20b_decode_bs4_cudagraph.json.gz")
    for config in (shared_model("gpt-oss-20b.config.json"), PROJECT_FIXTURES / "cpu_tiny_moe.config.json"):
        out = tmp_path / "factors.json"
        run = run_cli("calibrate", trace, "--model", config, "--out", out)
        assert run.returncode == 0, run.stderr
        (device,) = json.loads(out.read_text())["devices"].values()
        a = tracekit.analyze(trace, model=ModelOptions(str(config)))
        complete = int((~a.model.steps["lower_bound"].astype(bool) & a.model.steps["predicted_ns"].notna()).sum())
        assert device["steps"] == complete >= 1
        assert all(b["steps"] <= complete for b in device["per_block"].values())


def test_calibrate_a_cpu_trace_put_on_a_gpu_has_nothing_to_fit(tmp_path):
    """A CPU-only profile with --device: its steps have no GPU busy time. The fit divided by
    it (numpy's raw RuntimeWarning on stderr, an exit 1 under -W error), printed "inf%" and
    fitted efficiencies of 0.001; then it printed "(none)" and exited 0 without a reason. Now
    the trace is left out with its reason and, with no trace to fit, calibrate exits 2."""
    out = tmp_path / "factors.json"
    trace = PROJECT_FIXTURES / "cpu_tiny_dense_generate.json.gz"
    run = run_cli("calibrate", trace, "--model", PROJECT_FIXTURES / "cpu_tiny_dense.config.json", "--device", "h100", "--out", out)
    assert run.returncode == 2, run.stderr
    assert "Warning" not in run.stderr and "inf%" not in run.stdout, run.stderr
    lines = run.stderr.splitlines()
    assert lines[0] == f"tracekit: warning: {trace}: left out of the fit: its steps have no GPU busy time (no kernel ran in them, or the kernels' times were lost)"
    assert lines[-1].startswith(f"tracekit: error: {trace}: no trace can be used to calibrate")
    assert not out.exists()


def test_markdown_and_console_show_the_prediction():
    run = run_cli("analyze", shared(*SGLANG.split("/")), "--model", MODELS / "qwen3-8b.config.json", "--format", "markdown")
    assert run.returncode == 0, run.stderr
    assert "## Model: predicted vs measured steps" in run.stdout and "32,785 KV tokens" in run.stdout
    table = run_cli("analyze", shared(*SGLANG.split("/")), "--model", MODELS / "qwen3-8b.config.json", "--full")
    assert "step[DECODE bs=32]" in table.stdout and "MAPE" in table.stdout  # brackets shown, not eaten as markup
    first = run_cli("analyze", shared(*SGLANG.split("/")), "--model", MODELS / "qwen3-8b.config.json")
    mape = re.search(r"MAPE ([\d.]+%)", table.stdout).group(1)
    assert f"MAPE {mape}" in first.stdout  # the first screen's model line: the full report's figure


def test_block_costs_by_hand_for_moe_mla_and_tensor_parallel():
    from tracekit.model.batch import StepBatch
    from tracekit.model.blocks import Parallel, step_blocks

    one = StepBatch((Requests(1, 1, 100),), "test")  # one decode token over 100 cached + new keys
    mix = load_config(DATA / "tiny_mixtral.config.json")  # hidden 128, 8/2 heads x 16, 8 experts top-2 of width 256
    costs = step_blocks(mix, one).frame()
    ffn = costs[costs["block"] == "ffn"]
    # one token reads its 2 experts (3 matrices each) and the router, per layer
    assert list(ffn["weight_bytes"]) == [2 * 3 * 128 * 256 * 2 + 128 * 8 * 2] * 2
    assert list(ffn["flops"]) == [2 * 2 * 3 * 128 * 256 + 2 * 128 * 8] * 2
    # sliding window 64: the KV read is capped at 64 of the 100 keys
    core = costs[costs["block"] == "attention core"]
    assert list(core["kv_bytes"]) == [64 * 2 * 2 * 16 * 2] * 2
    assert list(core["flops"]) == [2 * 64 * 8 * (16 + 16)] * 2
    tp2 = step_blocks(mix, one, Parallel(tp=2)).frame()
    proj = tp2[tp2["block"] == "attention projections"]
    assert list(proj["weight_bytes"]) == [(128 * (4 + 2 * 1) * 16 + 4 * 16 * 128) * 2] * 2  # 4 query and 1 KV head per rank
    bus = tp2[tp2["block"] == "collective"].query("layer >= 0")
    assert list(bus["bytes_read"]) == [2 * (2 * (2 - 1) / 2 * 1 * 128 * 2)] * 2  # two ring all-reduces of one token's hidden state
    ep2 = step_blocks(mix, one, Parallel(tp=2, ep=2)).frame()
    # EP 2: each rank holds 4 whole experts and expects half of the 2 chosen ones
    assert ep2[ep2["block"] == "ffn"]["weight_bytes"].iloc[0] == 1 * 3 * 128 * 256 * 2 + 128 * 8 * 2
    ds = load_config(DATA / "tiny_deepseek.config.json")
    mla = step_blocks(ds, one).frame()
    assert mla[mla["block"] == "attention core"]["kv_bytes"].iloc[0] == 100 * (64 + 16) * 2  # compressed latent + rope key
    dense, moe = (mla[(mla["block"] == "ffn") & (mla["layer"] == i)]["flops"].iloc[0] for i in (0, 1))
    assert dense == 2 * 3 * 256 * 512  # first_k_dense_replace = 1
    assert moe == 2 * 4 * 3 * 256 * 64 + 2 * 256 * 16 + 2 * 3 * 256 * 64  # 4 routed + router + 1 shared


def test_mixed_step_and_older_generation_forms():
    # two prompts (60 and 40 new tokens on 140 and 60 cached) and three decodes (300 keys each)
    q, k = [60, 40], [200, 100]
    name = (f"execute_5_context_2(sq{sum(q)}sk{sum(k)}sqsq{sum(x * x for x in q)}sqsk{sum(a * b for a, b in zip(q, k))})"
            "_generation_3(sq3sk900sqsq3sqsk900)")
    b = from_annotation(name)
    by_hand = sum(sum(kk - qq + j + 1 for j in range(qq)) for qq, kk in zip(q, k)) + 3 * 300
    assert b.kind == "mixed" and b.tokens == 103 and b.kv_tokens == 1200 and b.pairs() == by_hand
    old = from_annotation("execute_context_0(0)_generation_16(16)")
    assert old.requests == 16 and old.tokens == 16 and not old.kv_known and "KV length unknown" in old.describe()


def test_calibrate_tables_fit_the_terminal_and_escape_file_names(tmp_path):
    """The calibration tables go through the terminal renderer like analyze's: fitted to the
    width, and a file name is hostile text (a raw escape sequence reached the terminal)."""
    hostile = tmp_path / "evil\x1b[31m[bold]x.json.gz"
    hostile.symlink_to(shared(*SGLANG.split("/")))
    run = run_cli("calibrate", hostile, "--model", MODELS / "qwen3-8b.config.json", "--out", tmp_path / "f.json", env={"COLUMNS": "250"})
    assert run.returncode == 0, run.stderr
    mape = json.loads((tmp_path / "f.json").read_text())["devices"]["MI300X"]["mape_peak"]
    assert "MAPE at peak" in run.stdout and "MI300X" in run.stdout and f"{mape:.1%}" in run.stdout  # the figure written
    assert "\x1b[31m[bold]" not in run.stdout  # the name's escape sequence never reaches the terminal raw
    assert "evil\\x1b[31m[bold]x.json.gz" in run.stdout  # it is shown escaped, brackets as text
    assert max(len(line) for line in run.stdout.splitlines()) <= 250


def test_a_training_step_is_not_predicted_as_an_inference_forward():
    """h200 tinyllama training (checkpointed): each ProfilerStep runs forward, recompute,
    backward and the optimizer (147.7 TFLOP per step, truth file), while the model costs one
    inference forward (~37 TFLOP): predicting it gave -89%. Steps that own backward kernels are
    left unpredicted, with the reason in the notes."""
    import tracekit
    from conftest import shared, shared_model

    a = tracekit.analyze(shared("torch", "h200_hf_tinyllama-1.1b_train_ckpt_bs8x2048.json.gz"),
                         model=str(shared_model("tinyllama-1.1b.config.json")), workers=1)
    steps = a.model.to_dict()["steps"]
    assert len(steps) == 2 and all(s["predicted_ns"] is None and s["flops"] is None for s in steps)
    assert any("2 of 2 steps run backward kernels (training)" in n for n in a.model.to_dict()["notes"])
