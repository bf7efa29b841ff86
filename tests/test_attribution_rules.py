"""Phases and blocks on pipelines the module-frame rules cannot see: DualPipe chunks,
DeepEP token exchange, torch.compile regions, kernels launched before the capture."""

from __future__ import annotations

import pandas as pd

import tracekit
from conftest import shared
from synthetic import KinetoBuilder

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"


def _labels(path):
    a = tracekit.analyze(path)
    return a, dict(zip(a.kernels["name"].astype(str), zip(a.kernels["phase"].astype(str), a.kernels["block"].astype(str))))


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
