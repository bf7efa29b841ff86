"""Phases and blocks on pipelines the module-frame rules cannot see: DualPipe chunks,
DeepEP token exchange, torch.compile regions, kernels launched before the capture."""

from __future__ import annotations

import numpy as np
import pandas as pd

import tracekit
from conftest import shared
from synthetic import KinetoBuilder

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"


def _labels(path):
    a = tracekit.analyze(path)
    return a, dict(zip(a.kernels["name"].astype(str), zip(a.kernels["phase"].astype(str), a.kernels["block"].astype(str))))


def _graph_replay_labels(tmp_path, names: list[str]) -> tuple[dict, dict]:
    """Kernels launched with no op and no module frame (a CUDA graph replay), one per name:
    (name -> (phase, block), name -> kernel class)."""
    b = KinetoBuilder()
    for i, name in enumerate(names):
        b.kernel(name, i, 100 + 10 * i, 5)
    a, labels = _labels(b.write(tmp_path / "replay.json"))
    return labels, dict(zip(a.kernels["name"].astype(str), a.kernels["kernel_class"].astype(str)))


def test_dualpipe_chunk_ranges_give_backward_and_weight_gradient_phases(tmp_path):
    b = KinetoBuilder()
    for chunk, start, kernel in (("MoELayer0 (F)", 0, "fwd_gemm_kernel_gemm"), ("MoELayer0 (B)", 100, "bwd_input_gemm_kernel_gemm"),
                                 ("MoELayer0 (W)", 200, "bwd_weight_gemm_kernel_gemm"), ("Block(B)uffer", 300, "buffer_kernel_gemm")):
        b.range(chunk, start, 100)  # "Block(B)uffer": (B) inside a word is not a chunk marker
        b.op("aten::mm", start + 5, 20)
        b.kernel(kernel, start + 10, start + 200, 5)
    _, labels = _labels(b.write(tmp_path / "dualpipe.json"))
    assert labels["fwd_gemm_kernel_gemm"][0] == "forward"
    assert labels["bwd_input_gemm_kernel_gemm"][0] == "backward"
    assert labels["bwd_weight_gemm_kernel_gemm"][0] == "backward"
    assert labels["buffer_kernel_gemm"][0] == "forward"


def test_dualpipe_chunk_markers_without_separator_and_op_less_launches(tmp_path):
    # DualPipe (deepseek-ai/DualPipe) names its chunks `attn(F)`, `mlp(B)`, `dispatch(W)`,
    # `combine(B)`: no separator before the marker. DeepGEMM launches its GEMMs through
    # the driver (`cuLaunchKernel`) outside any aten op, so only the range open at launch
    # time says which phase they belong to.
    b = KinetoBuilder()
    chunks = (("attn(F)", "fwd_attn_gemm"), ("mlp(B)", "bwd_mlp_gemm"), ("dispatch(W)", "wgrad_dispatch_gemm"),
              ("combine(B)", "bwd_combine_gemm"), ("Block(B)uffer", "buffer_gemm"))
    for i, (chunk, kernel) in enumerate(chunks):
        start = i * 100
        b.range(chunk, start, 100)
        b.kernel(f"void deep_gemm::fp8_gemm_kernel<{kernel}>(float*)", start + 10, start + 1000, 5, launch="cuLaunchKernel")
    _, labels = _labels(b.write(tmp_path / "dualpipe_nosep.json"))
    phase = {n.split("<")[1].split(">")[0]: labels[n][0] for n in labels}
    assert phase == {"fwd_attn_gemm": "forward", "bwd_mlp_gemm": "backward", "wgrad_dispatch_gemm": "backward",
                     "bwd_combine_gemm": "backward",
                     "buffer_gemm": "unknown"}  # no marker, no op: nothing says its phase


def test_a_matching_forward_rule_is_not_overridden_for_op_less_launches(tmp_path):
    # A user's explicit `forward` rule used to become `unknown` for a kernel launched with
    # cuLaunchKernel outside any op, because the fallback compared the label with the
    # default phase instead of asking whether a rule matched.
    b = KinetoBuilder()
    b.range("train_forward_chunk", 0, 100)
    b.kernel("void deep_gemm::fp8_gemm_kernel<128u>(float*)", 10, 1000, 5, launch="cuLaunchKernel")
    b.kernel("void deep_gemm::fp8_gemm_kernel<256u>(float*)", 200, 1100, 5, launch="cuLaunchKernel")  # outside the range
    rules = tmp_path / "rules.toml"
    rules.write_text('[[phase]]\nname = "forward"\nrange = "^train_forward_chunk$"\n')
    a = tracekit.analyze(b.write(tmp_path / "deepgemm.json"), rules=str(rules))
    labels = dict(zip(a.kernels["name"].astype(str), a.kernels["phase"].astype(str)))
    assert labels["void deep_gemm::fp8_gemm_kernel<128u>(float*)"] == "forward"
    assert labels["void deep_gemm::fp8_gemm_kernel<256u>(float*)"] == "unknown"


def test_work_no_framework_op_launched_has_no_default_phase(tmp_path):
    # A CUDA application's kernel (a launch outside any op) is not "forward": nothing says
    # which phase it is. Under an op it is forward, the default for inference without ranges.
    b = KinetoBuilder()
    b.kernel("saxpy_kernel", 10, 100, 5)
    b.op("aten::mul", 20, 10)
    b.kernel("vectorized_elementwise_kernel_mul", 25, 120, 5)
    _, labels = _labels(b.write(tmp_path / "app.json"))
    assert labels["saxpy_kernel"][0] == "unknown" and labels["vectorized_elementwise_kernel_mul"][0] == "forward"


def test_deepep_dispatch_and_combine_are_communication_and_overlap_sees_them(tmp_path):
    b = KinetoBuilder()
    b.kernel("void deep_ep::internode_ll::dispatch<true, 7168>(void*, float*, int*)", 0, 100, 50, stream=20)
    b.kernel(GEMM, 1, 110, 20, stream=7)
    b.kernel("void deep_ep::intranode::combine<__nv_bfloat16, 8, 768>(int4*, float*)", 2, 160, 30, stream=20)
    a, labels = _labels(b.write(tmp_path / "deepep.json"))
    assert {labels[n][1] for n in labels if "deep_ep" in n} == {"collective"}
    assert set(a.collectives["collective"]) == {"all_to_all"}
    # 80 µs of communication, of which the GEMM (110-130 µs) hides 20 µs
    ov = a.overlap.iloc[0]
    assert ov["comm_ns"] == 80_000 and ov["overlapped_ns"] == 20_000 and ov["exposed_ns"] == 60_000


def test_compiled_graph_gemms_take_their_block_from_the_layer_pattern(tmp_path):
    # Inside `## Call CompiledFxGraph` there are no module frames: the up projection is
    # followed by the activation, the down projection follows it, the output projection
    # follows the attention kernel.
    b = KinetoBuilder()
    b.range("## Call CompiledFxGraph fabc123 ##", 0, 1000)
    seq = [("qkv", GEMM + "_qkv"), ("rope", "triton_poi_fused_rotary_emb_0"), ("attn", "pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>"),
           ("o", GEMM + "_o"), ("add", "triton_poi_fused_add_1"), ("ln", "triton_per_fused_native_layer_norm_2"),
           ("up", GEMM + "_up"), ("act", "triton_poi_fused_gelu_3"), ("down", GEMM + "_down"), ("add2", "triton_poi_fused_add_4")]
    for i, (_, name) in enumerate(seq):
        b.op("aten::mm" if "gemm" in name else "triton_op", 10 + 10 * i, 5)
        b.kernel(name, 11 + 10 * i, 200 + 10 * i, 8)
    _, labels = _labels(b.write(tmp_path / "compiled.json"))
    block = {tag: labels[name][1] for tag, name in seq}
    assert block["up"] == "ffn" and block["down"] == "ffn"
    assert block["qkv"] == "attention" and block["o"] == "attention" and block["attn"] == "attention"
    assert block["ln"] == "norm"


def test_kernels_before_the_capture_take_the_phase_of_identical_captured_kernels():
    # h100 Qwen: 509 activities were issued before the capture (no launch): by name and
    # launch configuration each matches kernels inside the captured forward.
    a = tracekit.analyze(shared("torch", "h100_qwen1.5-0.5b_hf_inference.json.gz"))
    k = a.kernels
    blind = k[k["launch"] < 0]
    assert len(blind) == 509
    captured = k[k["launch"] >= 0]
    phases = captured.groupby(captured["name"].astype(str))["phase"].agg(lambda p: set(p.astype(str)))
    for name, phase in zip(blind["name"].astype(str), blind["phase"].astype(str)):
        if phase != "unknown":
            assert phases[name] == {phase}
    unknown = blind["phase"].astype(str) == "unknown"
    # what stays unknown has no unanimous identical kernel
    for name in set(blind.loc[unknown, "name"].astype(str)):
        assert name not in phases.index or len(phases[name]) > 1
    share = k.loc[k["phase"].astype(str) == "unknown", "duration_ns"].sum() / k["duration_ns"].sum()
    assert share < 0.01


def test_vae_decoder_convolutions_next_to_a_silu_are_not_ffn():
    # xDiT FLUX.1 on MI300X: the VAE decoder's aten::miopen_convolution launches implicit-GEMM
    # kernels (MIOpen `igemm_fwd_gtcx3_nhwc_bf16_...`, CK `kernel_grouped_conv_fwd_xdl_cshuffle_v3`,
    # Tensile `Cijk_...` for 1x1 convolutions) between SiLU kernels. The layer-pattern inference
    # made 35 of them (1.97 ms) `vae_decode / ffn`: only GEMMs are inferred, never a convolution.
    a = tracekit.analyze(shared("torch", "mi300x_xdit_flux1_capture_rank0.json.gz"))
    k = a.kernels
    conv = k[k["op_name"].astype(str) == "aten::miopen_convolution"]
    assert len(conv[conv["kernel_class"] == "gemm"]) == 35  # the class is untouched
    assert (conv["block"].astype(str) != "ffn").all()


def test_compiled_convolution_without_op_is_not_relabelled_by_its_neighbours(tmp_path):
    # Same form with no op (a compiled VAE): GEMM-class conv kernel, then a SiLU. A true GEMM
    # followed by the SiLU still becomes ffn; the convolution gets its own block, conv.
    b = KinetoBuilder("AMD Instinct MI300X")
    b.kernel("igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x128x32_wt32x32x8_ws1x1_wr2x2", 0, 100, 10)
    b.kernel("void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel(at::TensorIteratorBase&)>(int)", 1, 111, 2)
    b.kernel(GEMM, 2, 120, 10)
    b.kernel("void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel(at::TensorIteratorBase&)>(int)", 3, 131, 2)
    a, labels = _labels(b.write(tmp_path / "vae.json"))
    assert labels["igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x128x32_wt32x32x8_ws1x1_wr2x2"][1] == "conv"
    assert labels[GEMM][1] == "ffn"
    assert set(a.kernels.loc[a.kernels["name"].astype(str).str.startswith("igemm"), "kernel_class"]) == {"gemm"}


# Kernel names as engines write them (serving_research.md section 4; the first two are from
# the mi300x_vllm_gpt-oss-20b_prefilldecode_piecewise_execution fixture).
MOE_GEMMS = ["_matmul_ogs_NNT_bf16xbf16xmxfp4_128x128x128x1_swiglu", "_matmul_ogs_NNT_bf16xbf16xmxfp4_128x128x128x1",
             "fused_moe_kernel", "void marlin_moe_wna16::Marlin<(vllm::ScalarType::Id)5, 128, 8, 8, true>(int4 const*, int4*)",
             "void deep_gemm::sm90_fp8_gemm_1d2d_impl<(deep_gemm::GemmType)1, 4096u, 7168u, 128u>(float*, int*)",
             "void deep_gemm::m_grouped_fp8_gemm_masked_kernel<4096u>(float*)"]
ROUTING = ["void vllm::moe::topkGatingSoftmax<8, 128, 4, 16, int>(float const*, bool const*, float*, int, int*, int*, int, int, int)",
           "void vllm::moe::moe_align_block_size_kernel<int>(int const*, int*, int*, int*, int, int, int, unsigned long)",
           "void vllm::moe::count_and_sort_expert_tokens_kernel<int>(int const*, int*, int*, unsigned long)",
           "_combined_routing_compute", "_routing_memset_indx", "_finalize_matmul_scatter_bf16"]


def test_moe_and_routing_kernels_are_ffn(tmp_path):
    labels, classes = _graph_replay_labels(
        tmp_path, MOE_GEMMS + ROUTING + ["void deep_gemm::sm90_fp8_gemm_1d2d_impl<(deep_gemm::GemmType)0, 7168u>(float*)"])
    for name in MOE_GEMMS:
        assert (labels[name][1], classes[name]) == ("ffn", "gemm"), name
    for name in ROUTING:
        assert (labels[name][1], classes[name]) == ("ffn", "routing"), name
    # a dense DeepGEMM GEMM (GemmType 0, Normal) is no MoE kernel
    assert labels["void deep_gemm::sm90_fp8_gemm_1d2d_impl<(deep_gemm::GemmType)0, 7168u>(float*)"][1] == "other"


# torch.compile'd norms (Inductor names a fused kernel after its sorted origin ops: RMSNorm's
# pow/mean/rsqrt/mul, LayerNorm's var_mean/rsqrt) and the second pass of split-KV attention
# (vLLM / aiter unified attention's reduce_segments, FlashInfer's merge kernels). NOT_NORMS
# are near misses that stay what they were: the first fuses a q/k norm and rotary into the
# attention op's inputs (xDiT FLUX, compiled: origins include aiter's fmha_v3_fwd).
FUSED_NORMS = ["triton_red_fused__to_copy_add_addmm_mean_mul_pow_rsqrt_slice_2", "triton_per_fused_add_mean_mul_pow_rsqrt_3",
               "triton_red_fused_add_rsqrt_sub_var_mean_0"]
SPLIT_KV_MERGES = ["reduce_segments", "void flashinfer::MergeStatesKernel<8u, 16u, 2u, float, float>(float*, float*)",
                   "void flashinfer::VariableLengthMergeStatesKernel<8u, 16u>(float*)"]
NOT_NORMS = {"triton_red_fused__to_copy_add_addmm_as_strided_fmha_v3_fwd_mean_mul_neg_pow_rsqrt_stack_unbind_unsqueeze_view_24":
             "attention", "triton_poi_fused_mul_rsqrt_0": "elementwise", "triton_per_fused_mean_0": "triton",
             "void at::native::reduce_kernel<512, 1>(float*)": "reduction"}


def test_compiled_norms_and_split_kv_merges_by_name(tmp_path):
    labels, classes = _graph_replay_labels(tmp_path, FUSED_NORMS + SPLIT_KV_MERGES + list(NOT_NORMS))
    for name in FUSED_NORMS:
        assert (labels[name][1], classes[name]) == ("norm", "norm"), name
    for name in SPLIT_KV_MERGES:
        assert (labels[name][1], classes[name]) == ("attention", "attention"), name
    for name, klass in NOT_NORMS.items():
        assert classes[name] == klass, name


def test_gpt_oss_execution_moe_kernels_are_ffn():
    # mi300x vLLM gpt-oss-20b piecewise-graph execution: the triton_kernels matmul_ogs experts
    # (83.3 + 39.2 ms) were `other` under the graph replay.
    k = tracekit.analyze(shared("torch", "mi300x_vllm_gpt-oss-20b_prefilldecode_piecewise_execution.json.gz")).kernels
    moe = k[k["name"].astype(str).str.startswith("_matmul_ogs_")]
    assert len(moe) == 48 and (moe["block"] == "ffn").all()


def test_work_on_the_autograd_thread_outside_backward_ops_is_backward():
    """DDP's reducer copies buckets into gradients from autograd hooks on the autograd
    thread, under `aten::copy_` but outside any `autograd::engine::evaluate_function` op: no
    backward rule matches, and they defaulted to forward (483 copies on the A100 DDP rank).
    Read from the raw trace: the memcpy / memset activities whose launch runs on the thread
    that runs evaluate_function ops are now backward; the main thread's stay forward."""
    import gzip
    import json

    import tracekit
    from conftest import shared

    path = shared("torch", "a100_ddp_nccl_rank0.json.gz")
    events = json.load(gzip.open(path))["traceEvents"]
    engine = {e["tid"] for e in events if e.get("cat") == "cpu_op" and e["name"].startswith("autograd::engine::evaluate_function")}
    launch_tid = {e["args"]["correlation"]: e["tid"] for e in events
                  if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    copies = [e for e in events if e.get("cat") in ("gpu_memcpy", "gpu_memset")]
    on_engine = sum(launch_tid.get(e["args"].get("correlation")) in engine for e in copies)
    assert len(engine) == 1 and on_engine > 400

    a = tracekit.analyze(path)
    k = a.kernels
    memory = (k["kind"] != "kernel").to_numpy()
    tids = a.trace.launches["tid"].to_numpy()
    launched_on_engine = (k["launch"].to_numpy() >= 0) & np.isin(tids[np.maximum(k["launch"].to_numpy(), 0)], list(engine))
    assert (k["phase"].astype(str).to_numpy()[memory & launched_on_engine] == "backward").all()
    assert int((memory & launched_on_engine).sum()) == on_engine
    main = memory & (k["launch"].to_numpy() >= 0) & ~launched_on_engine
    assert (k["phase"].astype(str).to_numpy()[main] != "backward").all()
