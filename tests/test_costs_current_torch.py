"""Cost models for the kernels current PyTorch launches (torch 2.11 on an H200), checked by
hand on the shared traces: cuDNN attention, KV-cache writes, upsampling, arange, fused
AdamW, broadcast indices, kernel-named element sizes, split-K GEMMs, and the model path's
per-kernel placement (MoE gate/up and down, the LM head)."""

from __future__ import annotations


import numpy as np
import pytest

from conftest import shared, shared_model
from tracekit.costs import Cost, op_cost
from tracekit.costs.dtypes import element_bytes_from_kernel

BF16 = "c10::BFloat16"


def test_cudnn_attention_forward_reads_the_whole_static_cache_and_the_mask():
    # eager decode, batch 16: q [16, 32, 1, 128], k = v = the static cache [16, 8, 2048, 128], mask [1, 2048]
    dims = [[16, 32, 1, 128], [16, 8, 2048, 128], [16, 8, 2048, 128], [1, 2048]] + [[]] * 9
    types = [BF16] * 4 + ["", "", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar", ""]
    concrete = [""] * 6 + ["1", "2048", "False", "0.", "False", "False", ""]
    cost = op_cost("aten::_cudnn_attention_forward", dims, types, concrete)
    assert isinstance(cost, Cost)
    assert cost.flops == 4 * 16 * 32 * 1 * 2048 * 128  # 4·B·Hq·Sq·Skv·D, no causal mask
    q, kv, mask = 16 * 32 * 128 * 2, 2 * 16 * 8 * 2048 * 128 * 2, 2048 * 2
    assert cost.bytes_read == q + kv + mask
    assert cost.bytes_written == q
    # 32 layers: the whole cache, 4.29 GB, as the truth file says
    assert 32 * kv == 4294967296


def test_cudnn_attention_backward_is_two_and_a_half_forwards_as_torch_counts():
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    b, h, s, d = 8, 4, 2048, 64  # torch's count needs equal query and key heads
    shape = [b, h, s, d]
    fwd = op_cost("aten::_cudnn_attention_forward", [shape] * 3 + [[]] * 10, [BF16] * 3 + [""] * 10,
                  [""] * 6 + ["2048", "2048", "True", "0.", "False", "False", ""])
    bwd = op_cost("aten::_cudnn_attention_backward", [shape] * 5 + [[b, h, s, 1]] + [[]] * 10,
                  [BF16] * 5 + ["float"] + [""] * 10, [""] * 11 + ["2048", "2048", "0.", "False", ""])
    size = torch.Size(shape)
    assert fwd.flops == sdpa_flop_count(size, size, size)
    assert bwd.flops == sdpa_backward_flop_count(size, size, size, size)
    assert bwd.flops == 2.5 * fwd.flops
    # causal (is_causal at 14): the S(S+1)/2 pairs on and below the diagonal
    causal = op_cost("aten::_cudnn_attention_backward", [shape] * 5 + [[b, h, s, 1]] + [[]] * 10,
                     [BF16] * 5 + ["float"] + [""] * 10, [""] * 11 + ["2048", "2048", "0.", "True", ""])
    assert causal.flops == 10 * b * h * (s * (s + 1) / 2) * d


def test_kv_cache_write_upsample_and_arange_by_hand():
    # index_copy_(cache [16, 8, 2048, 128], dim 2, index [1], new [16, 8, 1, 128]): the new token only
    cost = op_cost("aten::index_copy_", [[16, 8, 2048, 128], [], [1], [16, 8, 1, 128]], [BF16, "Scalar", "long int", BF16],
                   ["", "2", "", ""])
    assert (cost.bytes_read, cost.bytes_written) == (16 * 8 * 128 * 2 + 8, 16 * 8 * 128 * 2)
    # upsample_nearest2d.vec(x [3, 384, 60, 104], None, scales [2., 2.]): 4x the elements out
    up = op_cost("aten::upsample_nearest2d", [[3, 384, 60, 104], [], []], [BF16, "", "ScalarList"], ["", "", "[2., 2.]"])
    n = 3 * 384 * 60 * 104
    assert (up.flops, up.bytes_read, up.bytes_written) == (0.0, n * 2, 4 * n * 2)
    same = op_cost("aten::upsample_nearest2d", [[3, 384, 60, 104], [], [], []], [BF16, "ScalarList", "Scalar", "Scalar"],
                   ["", "[120, 208]", "2.", "2."])
    assert same.bytes_written == up.bytes_written
    # arange(0, 128, 1, out=int64): 128 elements of 8 bytes written
    ar = op_cost("aten::arange", [[], [], [], [0]], ["Scalar", "Scalar", "Scalar", "long int"], ["0", "128", "1", ""])
    assert (ar.bytes_read, ar.bytes_written) == (0.0, 128 * 8)


def test_broadcast_index_is_not_a_dense_tensor():
    # gather(table [32000, 2048] fp32, 0, index [16384, 2048] with strides [1, 0]): the index is
    # an expanded [16384] vector, 16384 · 8 bytes, not 16384 · 2048 · 8
    dims = [[32000, 2048], [], [16384, 2048], [], [16384, 2048]]
    types = ["float", "Scalar", "long int", "Scalar", "float"]
    concrete = ["", "0", "", "False", ""]
    strided = op_cost("aten::gather", dims, types, concrete, strides=[[2048, 1], [], [1, 0], [], [2048, 1]])
    dense = op_cost("aten::gather", dims, types, concrete)
    rows = 16384 * 2048 * 4
    assert strided.bytes_read == rows + 16384 * 8
    assert dense.bytes_read == rows + 16384 * 2048 * 8


def test_element_size_from_the_kernels_template_argument():
    assert element_bytes_from_kernel("void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::"
                                     "(anonymous namespace)::OpaqueType<2u>, unsigned int, 4, 64, 64>(x)") == 2
    assert element_bytes_from_kernel("void at::native::(anonymous namespace)::CatArrayBatchedCopy<c10::BFloat16, "
                                     "unsigned int, 2, 64, 64>(x)") == 2
    assert element_bytes_from_kernel("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2>(x)") == 4
    assert element_bytes_from_kernel("void upsample_nearest2d_out_frame<__nv_bfloat16, &nearest_idx>(x)") == 2
    assert element_bytes_from_kernel("nvjet_sm90_tst_64x16_64x16_2x1_v_bz_splitK_TNT") is None


@pytest.fixture(scope="module")
def decode():
    import tracekit

    return tracekit.analyze(shared("torch", "h200_llama3-8b_eager_decode_bs16.json.gz"))


def test_split_k_kernels_costed_on_what_each_moves(decode):
    k = decode.kernels
    reduce = k[k["name"].astype(str).str.contains("splitKreduce") & (k["flops"] == (2 - 1) * 16 * 4096)]
    assert len(reduce) == 4 * 64  # [16, 4096] x [4096, 4096] (q and o projections), 32 layers x 4 steps, s = 2
    # the reduce reads s = 2 fp32 partial sums per output and writes the bf16 output
    assert (reduce["bytes_read"] == 2 * 16 * 4096 * 4).all() and (reduce["bytes_written"] == 16 * 4096 * 2).all()
    gemm = k[k["name"].astype(str).str.startswith("nvjet_sm90_tst_64x16_64x16_2x1_v_bz_splitK")]
    assert (gemm["bytes_read"] == (16 * 4096 + 4096 * 4096) * 2).all()  # A and B once
    assert (gemm["bytes_written"] == 2 * 16 * 4096 * 4).all()  # the partial sums


def test_decode_step_bytes_within_five_percent_of_the_truth(decode):
    truth = 15009980416 + 4294967296  # weights + the whole KV cache read, per step
    steps = decode.steps
    assert len(steps) == 4
    assert all(abs(b / truth - 1) <= 0.05 for b in steps["bytes"])


def test_h200_traces_costed_at_least_95_percent():
    import tracekit

    for name in ("h200_llama3-8b_eager_decode_bs16", "h200_hf_tinyllama-1.1b_train_ckpt_bs8x2048",
                 "h200_streaming_video_dit1.3b_480p_chunk3_steps2", "h200_hf_llama3-8b_generate_bs1_eager"):
        assert tracekit.analyze(shared("torch", f"{name}.json.gz")).coverage["modeled_share"] >= 0.95, name


def test_fused_adamw_costed_from_the_gradients_autograd_accumulated():
    import tracekit

    a = tracekit.analyze(shared("torch", "h200_hf_tinyllama-1.1b_train_ckpt_bs8x2048.json.gz"))
    k = a.kernels
    adam = k[(k["op_name"].astype(str) == "aten::_fused_adamw_") if "op_name" in k else k["name"].astype(str).str.contains("FusedAdamMathFunctor")]
    # TinyLlama: 22 layers x (q, o 2048² + k, v 256x2048 + gate, up, down 5632x2048 + 2 norms) + embed + lm_head + norm
    params = 22 * (2 * 2048 * 2048 + 2 * 256 * 2048 + 3 * 5632 * 2048 + 2 * 2048) + 2 * 32000 * 2048 + 2048
    assert params == 1_100_048_384
    per_step = adam.groupby("step")[["bytes_read", "bytes_written"]].sum()
    per_step = per_step[per_step.index >= 0]
    assert len(per_step)
    # fp32: param, grad, exp_avg, exp_avg_sq read; param, exp_avg, exp_avg_sq written
    assert np.allclose(per_step["bytes_read"], 4 * 4 * params) and np.allclose(per_step["bytes_written"], 3 * 4 * params)


def _kernels_of(a, pattern):
    k = a.kernels
    return k[k["name"].astype(str).str.contains(pattern, regex=True) & (k["cost_source"].astype(str) == "model")]


def test_model_places_moe_gate_up_and_down_on_their_own_kernels():
    import tracekit

    a = tracekit.analyze(shared("torch", "b200_vllm_tp8_rank0_eager.json.gz"), model=str(shared_model("gpt-oss-120b.config.json")))
    # gpt-oss-120b on TP 8, one prefill step of 888 tokens: 128 experts top-4, all active
    # (128·(1-(1-4/128)^888) = 128.0); expert width 2880 / 8 = 360; MXFP4 weights: 4 bits +
    # one 8-bit scale per 32 values = 4.25 bits per parameter.
    t, h, w, e = 888, 2880, 360, 128
    active = e * (1 - (1 - 4 / e) ** t)
    mxfp4 = 4.25 / 8
    gate_up = active * 2 * w * h * mxfp4 + t * h * 2  # the gate and up matrices + the tokens in
    down = active * w * h * mxfp4 + t * 4 * w * 2  # the down matrices + the routed activations in
    bandwidth = a.device.bandwidth
    for pattern, read in (("^bmm_MxE4m3_MxE2m1", gate_up), ("^bmm_Bfloat16_MxE2m1", down)):
        k = _kernels_of(a, pattern)
        assert len(k) == 36  # one per layer
        assert np.allclose(k["bytes_read"], read, rtol=0.01)
        hand = (k["bytes_read"] + k["bytes_written"]) / bandwidth * 1e9 / (k["end"] - k["start"])  # memory bound
        assert np.allclose(k["efficiency"], hand, rtol=0.15)
        assert (k["efficiency"] < 1.05).all()


def test_model_puts_the_lm_head_on_the_vocabulary_gemm():
    import tracekit

    a = tracekit.analyze(shared("torch", "mi300x_sglang_qwen3-8b_decode_bs32.json.gz"), model=str(shared_model("qwen3-8b.config.json")))
    k = a.kernels
    gemm = k[(k["kernel_class"].astype(str) == "gemm")].sort_values("start")
    head = gemm.iloc[-1]
    # Qwen3-8B: lm_head [151936, 4096] bf16 read once, 32 requests' hidden states in, logits out
    read, written = 151936 * 4096 * 2 + 32 * 4096 * 2, 32 * 151936 * 2
    assert head["cost_source"] == "model"
    assert head["bytes_read"] == pytest.approx(read) and head["bytes_written"] == pytest.approx(written)
    hand = max((read + written) / (a.device.bandwidth * 1e-9), 2 * 32 * 4096 * 151936 / (a.device.peak_flops("matrix", "bf16") * 1e-9))
    assert head["efficiency"] == pytest.approx(hand / (head["end"] - head["start"]), rel=0.15)


def test_no_python_or_numpy_warning_on_any_shared_trace(shared_analysis):
    """Every warning the analysis of each trace raised (conftest.SealedAnalyses records them,
    "always", as it makes the analysis the goldens read; the parallel parse of the large ones:
    test_parallel_parse, warnings as errors)."""
    root = shared("torch")
    paths = sorted(p for p in root.rglob("*.json.gz"))
    assert len(paths) >= 20
    for path in paths:
        assert not shared_analysis.warnings_of(path), path.name


def test_capture_pairing_costs_most_non_moe_kernel_time_from_shapes():
    import tracekit

    run = "mi300x_vllm_gpt-oss-20b_prefilldecode_piecewise"
    a = tracekit.analyze(shared("torch", f"{run}_execution.json.gz"), capture=shared("torch", f"{run}_capture.json.gz"))
    k = a.kernels[a.kernels["kind"].astype(str) == "kernel"]
    time = (k["end"] - k["start"]).astype(float)
    # the kernels vllm::moe_forward launched (its inputs hold no expert width: --model costs them)
    moe = k["op_name"].astype(str) == "vllm::moe_forward"
    costed = k["flops"].notna()
    assert time[moe].sum() / time.sum() > 0.75
    assert time[~moe & costed].sum() / time[~moe].sum() >= 0.80
    # the ck_tile RMSNorm (aiter::rmsnorm2d_fwd_with_add_ck) takes its op's cost: 4 [8192, 2880] bf16 tensors
    norm = k[k["name"].astype(str).str.contains("Rmsnorm2dFwd") & costed & (k["op_name"].astype(str) == "aiter::rmsnorm2d_fwd_with_add_ck")]
    assert len(norm) and np.allclose(norm["bytes_read"] + norm["bytes_written"], 4 * 8192 * 2880 * 2 + 2880 * 2)


def test_model_places_marlin_moe_gate_up_and_down_in_launch_order():
    import tracekit

    a = tracekit.analyze(shared("torch", "rtx3090_vllm_gpt-oss-20b_decode_bs4_cudagraph.json.gz"),
                         model=str(shared_model("gpt-oss-20b.config.json")))
    k = a.kernels
    marlin = k[k["name"].astype(str).str.contains("marlin_moe", case=False)].sort_values("start")
    assert (marlin["cost_source"].astype(str) == "model").all()
    # gpt-oss-20b: 32 experts top-4, hidden = expert width = 2880, MXFP4 (4.25 bits per weight);
    # a decode step of 4 tokens activates 32·(1-(1-4/32)^4) experts
    t, h, w, e = 4, 2880, 2880, 32
    active = e * (1 - (1 - 4 / e) ** t)
    gate_up = active * 2 * w * h * 4.25 / 8 + t * h * 2
    down = active * w * h * 4.25 / 8 + t * 4 * w * 2
    decode_steps = 0
    for _, step in marlin.groupby("step"):
        first, second = step["bytes_read"].to_numpy()[0::2], step["bytes_read"].to_numpy()[1::2]
        assert len(step) == 2 * 24 and len(set(first)) == 1 and len(set(second)) == 1  # per layer: gate/up, then down
        if np.isclose(first[0], gate_up, rtol=0.01):
            decode_steps += 1
            assert np.isclose(second[0], down, rtol=0.01)
            hand = (step["bytes_read"] + step["bytes_written"]) / a.device.bandwidth * 1e9 / (step["end"] - step["start"])
            assert np.allclose(step["efficiency"], hand, rtol=0.15)
            assert step["efficiency"].median() < 1.0
    assert decode_steps >= 10
    # uniform routing is an upper bound on distinct experts: a layer whose 4 tokens shared
    # experts read less and shows above the roof, and is flagged, never silent
    over = marlin[marlin["efficiency"] > 1.05]
    assert len(over) < 0.1 * len(marlin)
    assert not len(over) or any(f.figure == "efficiency" and "marlin" in f.where.lower() for f in a.flags)


def test_model_places_dense_projections_on_their_own_gemms():
    import tracekit

    a = tracekit.analyze(shared("torch", "mi300x_sglang_qwen3-8b_decode_bs32.json.gz"), model=str(shared_model("qwen3-8b.config.json")))
    k = a.kernels
    model = k[(k["cost_source"].astype(str) == "model") & (k["kernel_class"].astype(str) == "gemm")]
    # Qwen3-8B, 32 tokens, bf16: per layer a fused gate_up GEMM [2 x 12288, 4096] then down [4096, 12288];
    # a fused qkv GEMM [(32 + 2 x 8) x 128, 4096] then o [4096, 32 x 128]
    t, h, w, d = 32, 4096, 12288, 128
    hand = {"ffn": [(2 * w * h * 2 + t * h * 2, t * 2 * w * 2), (h * w * 2 + t * w * 2, t * h * 2)],
            "attention": [(48 * d * h * 2 + t * h * 2, t * 48 * d * 2), (h * 32 * d * 2 + t * 32 * d * 2, t * h * 2)]}
    for block, (first, second) in hand.items():
        g = model[model["block"].astype(str) == block].sort_values("start")
        assert len(g) == 2 * 36
        for rows, (read, written) in ((g.iloc[0::2], first), (g.iloc[1::2], second)):
            assert np.allclose(rows["bytes_read"], read) and np.allclose(rows["bytes_written"], written)
            by_hand = (read + written) / a.device.bandwidth * 1e9 / (rows["end"] - rows["start"])
            assert np.allclose(rows["efficiency"], by_hand, rtol=0.15)


def test_gated_deltanet_projections_placed_layer_by_layer_in_a_hybrid_model():
    """No shared trace serves a hybrid model: the placement rule on a Qwen3.5-27B step laid
    out as its layers launch (3 Gated DeltaNet layers, then 1 full-attention layer, x 16):
    5 GDN GEMMs per linear layer (in_proj_qkv, _z, _b, _a, out_proj), 2 per attention layer
    (fused q-with-gate/k/v, then o)."""
    from tracekit.model import load_config
    from tracekit.model.batch import Requests, StepBatch
    from tracekit.model.parts import projection_parts
    from tracekit.model.placement import place

    arch = load_config(shared_model("qwen3.5-27b.config.json"))
    batch = StepBatch((Requests(8, 8, 8000),), "test")  # 8 decode requests
    names = []
    for layer in range(arch.layers):
        names += [f"gdn_{j}" for j in range(5)] if arch.mixer(layer) == "linear_attention" else ["qkv", "o"]
    n = len(names)
    assert n == 48 * 5 + 16 * 2
    rows = np.arange(n)
    totals = {b: {"kind": "matrix", "dtype": "bf16"} for b in ("attention projections", "linear attention projections")}
    placed, done = place(list(totals), rows, rows.astype(np.int64), np.array(["gemm"] * n), np.array(names),
                         np.ones(n, dtype=bool), totals, {"moe": None, "projections": projection_parts(arch, batch)})
    assert sorted(done) == sorted(totals) and len(placed) == n
    # Qwen3.5-27B: hidden 5120; linear attention 16 key heads x 128, 48 value heads x 128; bf16 weights
    h, kd, vd, nv, t = 5120, 16 * 128, 48 * 128, 48, 8
    gdn = [(2 * kd + vd, h), (vd, h), (nv, h), (nv, h), (h, vd)]
    for j, (rows_, k_) in enumerate(gdn):
        assert placed[j][1] == pytest.approx(rows_ * k_ * 2 + t * k_ * 2)  # weights + the tokens in
        assert placed[j][0] == pytest.approx(2 * t * rows_ * k_)
    # the first attention layer (layer 3) starts at kernel 15: q rows doubled by the output gate, k, v fused
    hq, hkv, d = 24, 4, 256
    qkv = (2 * hq * d + 2 * hkv * d) * h
    assert placed[15][1] == pytest.approx(qkv * 2 + t * h * 2)
    assert placed[16][1] == pytest.approx(h * hq * d * 2 + t * hq * d * 2)
