"""Cost formulas against hand computation, and bad inputs that must cost one op, not a crash."""

from __future__ import annotations

import pytest

from tracekit.costs import Cost, Unknown, known_ops, op_cost
from tracekit.costs.attention import BOTTOM_RIGHT, TOP_LEFT, score_pairs
from tracekit.costs.conv import output_spatial

BF16 = "c10::BFloat16"


def test_mm_is_2mnk_and_bf16_bytes_are_2_mk_kn_mn():
    m, k, n = 4096, 1024, 2816
    c = op_cost("aten::mm", [[m, k], [k, n]], [BF16, BF16], ["", ""])
    assert c.flops == 2 * m * n * k
    assert c.bytes == 2 * (m * k + k * n + m * n)
    assert (c.kind, c.dtype) == ("matrix", "bf16")


def test_addmm_adds_the_bias():
    c = op_cost("aten::addmm", [[640], [888, 2880], [2880, 640], [], []], [BF16] * 3 + ["Scalar"] * 2, ["", "", "", "1", "1"])
    assert c.flops == 2 * 888 * 640 * 2880 + 888 * 640
    assert c.bytes_read == 2 * (888 * 2880 + 2880 * 640 + 640)
    assert c.bytes_written == 2 * 888 * 640


def test_bmm_linear_matmul():
    assert op_cost("aten::bmm", [[8, 16, 32], [8, 32, 64]], ["float", "float"], []).flops == 2 * 8 * 16 * 64 * 32
    lin = op_cost("aten::linear", [[2, 10, 64], [128, 64], [128]], ["float"] * 3, [])
    assert lin.flops == 2 * 20 * 128 * 64 + 20 * 128
    mat = op_cost("aten::matmul", [[5, 1, 7, 3], [4, 3, 2]], ["float", "float"], [])
    assert mat.flops == 2 * (5 * 4) * 7 * 2 * 3  # batch dims broadcast to [5, 4]


def test_fp8_scaled_mm_reads_one_byte_per_element():
    c = op_cost("aten::_scaled_mm", [[128, 256], [256, 512], [], [], [], []], ["c10::Float8_e4m3fn"] * 2 + ["float", "float", "", ""], [])
    assert c.flops == 2 * 128 * 512 * 256 and c.dtype == "fp8"
    assert c.bytes_read == 128 * 256 + 256 * 512 + 2 * 4  # + the two fp32 scales
    assert c.bytes_written == 2 * 128 * 512  # bf16 output


@pytest.mark.parametrize(
    "sq, sk, causal, pairs",
    [
        (8, 8, None, 64), (8, 8, TOP_LEFT, 36), (8, 8, BOTTOM_RIGHT, 36),  # 1 + 2 + ... + 8
        (100, 100, TOP_LEFT, 5050), (100, 99, TOP_LEFT, 4950 + 99),  # one query more adds one full row
        (1, 10, BOTTOM_RIGHT, 10),  # a decode step sees the whole cache
        (1, 10, TOP_LEFT, 1),  # torch's top-left mask lets the first query see one key
        (3, 5, TOP_LEFT, 1 + 2 + 3), (3, 5, BOTTOM_RIGHT, 3 + 4 + 5),
        (5, 3, TOP_LEFT, 1 + 2 + 3 + 3 + 3), (5, 3, BOTTOM_RIGHT, 0 + 0 + 1 + 2 + 3),
    ],
)
def test_causal_pairs_are_counted_exactly(sq, sk, causal, pairs):
    assert score_pairs(sq, sk, causal) == pairs


def test_flash_attention_forward_bshd_with_gqa_bytes():
    # _flash_attention_forward takes [B, S, H, D]; 16 query heads over 4 KV heads
    dims = [[2, 128, 16, 64], [2, 128, 4, 64], [2, 128, 4, 64]] + [[]] * 12
    types = [BF16] * 3 + [""] * 12
    concrete = [""] * 8 + ["True"] + [""] * 6
    c = op_cost("aten::_flash_attention_forward", dims, types, concrete)
    assert c.flops == 4 * 2 * 16 * (128 * 129 / 2) * 64  # causal: the 128·129/2 pairs on and below the diagonal
    assert c.bytes_read == 2 * (2 * 128 * 16 * 64 + 2 * 2 * 128 * 4 * 64)
    assert c.bytes_written == 2 * 2 * 128 * 16 * 64


def test_varlen_flash_attention_assumes_equal_lengths_and_says_so():
    dims = [[1000, 8, 64], [1000, 8, 64], [1000, 8, 64], [5], [5]] + [[]] * 10
    c = op_cost("aten::_flash_attention_forward", dims, [BF16] * 3 + ["int", "int"] + [""] * 10, [""] * 8 + ["False"] + [""] * 6)
    assert c.flops == 4 * 4 * 8 * 250 * 250 * 64  # 4 sequences of 250 tokens
    assert "equal length" in c.note


def test_conv_output_size_and_flops():
    assert output_spatial([224, 224], [7, 7], [2, 2], [3, 3], [1, 1]) == [112, 112]
    assert output_spatial([16, 16], [2, 2], [2, 2], [0, 0], [1, 1], transposed=True) == [32, 32]
    # miopen_convolution(input, weight, bias, padding, stride, dilation, groups, ...)
    c = op_cost("aten::miopen_convolution", [[10, 256, 14, 14], [512, 256, 3, 3], [], [], [], [], [], [], []],
                [BF16, BF16, "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "Scalar", "Scalar"],
                ["", "", "", "[1, 1]", "[2, 2]", "[1, 1]", "1", "False", "False"])
    assert c.flops == 2 * 10 * 512 * 256 * 9 * 7 * 7
    assert c.bytes_written == 2 * 10 * 512 * 7 * 7


def test_elementwise_broadcast_out_tensor_and_promotion():
    c = op_cost("aten::mul", [[16, 16, 559, 64], [1, 1, 559, 64]], [BF16, BF16], ["", ""])
    n = 16 * 16 * 559 * 64
    assert c.flops == n and c.bytes_read == 2 * (n + 559 * 64) and c.bytes_written == 2 * n
    # clamp_min(self, min, out): the third tensor is the output, written not read
    out = op_cost("aten::clamp_min", [[32, 64], [], [32, 64]], ["float", "Int", "float"], [])
    assert out.bytes_read == 4 * 32 * 64 and out.bytes_written == 4 * 32 * 64
    # a bf16 tensor times an fp32 0-d tensor stays bf16
    assert op_cost("aten::mul", [[8, 8], []], [BF16, "float"], []).dtype == "bf16"
    assert op_cost("aten::eq", [[8], [8]], ["long int", "long int"], []).bytes_written == 8  # bool output


def test_copy_cast_reads_source_dtype_and_writes_destination_dtype():
    c = op_cost("aten::copy_", [[1024], [1024], []], [BF16, "float", "Scalar"], ["", "", "False"])
    assert (c.bytes_read, c.bytes_written, c.flops) == (4096, 2048, 0)


def test_layer_norm_moves_the_activation_twice():
    c = op_cost("aten::native_layer_norm", [[1, 141, 512], [], [512], [512], []], [BF16, "ScalarList", BF16, BF16, "Scalar"], [])
    n = 141 * 512
    assert c.bytes_read == 2 * (n + 1024) and c.bytes_written == 2 * n and c.kind == "vector"


@pytest.mark.parametrize(
    "name, dims, types, reason",
    [
        ("aten::mm", [[4, 8], [8, 2]], ["c10::Float7", "float"], "unknown dtype"),
        ("aten::mm", None, None, "no input dims"),
        ("aten::mm", [], [], "has no shape"),
        ("aten::mm", [[4, -8], [-8, 2]], ["float", "float"], "negative"),
        ("aten::mm", [[1 << 40, 1 << 30], [1 << 30, 2]], ["float", "float"], "absurd"),
        ("aten::mm", [[4, 8], [9, 2]], ["float", "float"], "inner dimensions differ"),
        ("aten::addmm", [["x"], [4, 8], [8, 2]], ["float"] * 3, "not a tensor shape"),
        ("aten::frobnicate", [[4]], ["float"], "no cost model"),
        ("aten::_flash_attention_forward", [[2, 3], [2, 3], [2, 3]], [BF16] * 3, "expected [batch"),
        ("aten::_flash_attention_forward", [[2, 3]], [BF16], "input 1 has no shape"),
    ],
)
def test_bad_inputs_give_an_unknown_cost_with_a_reason(name, dims, types, reason):
    cost = op_cost(name, dims, types, [])
    assert isinstance(cost, Unknown)
    assert reason in cost.reason


def test_every_family_is_registered():
    ops = set(known_ops())
    for name in ("aten::mm", "aten::_scaled_mm", "aten::_flash_attention_backward", "flash_attn::_flash_attn_varlen_forward",
                 "aten::convolution_backward", "aten::add", "aten::sum", "aten::_softmax", "aten::native_batch_norm_backward",
                 "aten::embedding", "aten::cat", "aten::copy_", "record_param_comms"):
        assert name in ops
    assert isinstance(op_cost("aten::add", [[4], [4], []], ["float", "float", "Scalar"], []), Cost)


def test_max_pool_forward_and_backward():
    # ResNet stem: 3x3 window, stride 2, padding 1 on 112x112 -> 56x56
    c = op_cost("aten::max_pool2d_with_indices", [[10, 64, 112, 112], [], [], [], [], []],
                [BF16, "ScalarList", "ScalarList", "ScalarList", "ScalarList", "Scalar"], ["", "[3, 3]", "[2, 2]", "[1, 1]", "[1, 1]", "False"])
    n_out = 10 * 64 * 56 * 56
    assert c.flops == n_out * 9 and c.bytes_read == 2 * 10 * 64 * 112 * 112
    back = op_cost("aten::max_pool2d_with_indices_backward", [[10, 64, 56, 56], [10, 64, 112, 112], [], [], [], [], [], [10, 64, 56, 56]],
                   [BF16, BF16, "ScalarList", "ScalarList", "ScalarList", "ScalarList", "Scalar", "long int"], [])
    assert back.bytes_read == 2 * n_out + 8 * n_out and back.bytes_written == 2 * 10 * 64 * 112 * 112


def test_tensor_list_without_shapes_says_so():
    cost = op_cost("aten::cat", [[[], []], []], ["TensorList", "Scalar"], ["", "0"])
    assert isinstance(cost, Unknown) and "were not recorded" in cost.reason


def test_mul_by_a_python_scalar_into_out_reads_one_tensor():
    # A100 recsys: mul(x, 0.5, out=y) was counted as reading x and y (1.5x the bytes).
    c = op_cost("aten::mul", [[512, 2862], [], [512, 2862]], ["float", "Scalar", "float"], ["", "0.5", ""])
    n = 512 * 2862
    assert (c.flops, c.bytes_read, c.bytes_written) == (n, 4 * n, 4 * n)
    # two tensors and an out=: both operands are read, the out tensor only written
    c = op_cost("aten::add", [[64, 8], [64, 8], [], [64, 8]], ["float", "float", "Scalar", "float"], [])
    assert c.bytes_read == 2 * 4 * 64 * 8 and c.bytes_written == 4 * 64 * 8


def test_tensor_list_element_size_comes_from_the_cat_kernel():
    import tracekit
    from conftest import shared
    from kineto_reference import read

    path = shared("torch", "h100_qwen1.5-0.5b_hf_inference.json.gz")
    a = tracekit.analyze(path)
    k = a.kernels
    cat = k[(k["op_name"].astype(str) == "aten::cat") & k["name"].astype(str).str.contains("OpaqueType<2u>")]
    assert len(cat) == 48
    # the raw trace: aten::cat of two [16,16,559,32] tensors, 2-byte elements per the kernel name
    ref = read(path)
    dims = next(e["args"]["Input Dims"] for e in ref["ops"] if e["name"] == "aten::cat" and e["args"]["Input Dims"][0][0] == [16, 16, 559, 32])
    elements = sum(d[0] * d[1] * d[2] * d[3] for d in dims[0])
    assert (cat["bytes_read"] == 2 * elements).all() and (cat["bytes_written"] == 2 * elements).all()


def test_convolution_flops_go_to_the_compute_kernel_not_its_transposes():
    import tracekit
    from conftest import shared

    a = tracekit.analyze(shared("torch", "v100_resnet50_train_legacy2021.json.gz"))
    k = a.kernels
    transposes = k[k["name"].astype(str).str.contains("nchwToNhwc|nhwcToNchw")]
    assert len(transposes) and transposes["flops"].isna().all()
    assert transposes["unknown_reason"].astype(str).str.startswith("layout or workspace kernel").all()
    # The op's FLOPs and bytes are its tensors' (2·N·Cout·Cin·kh·kw·H·W; fp32 input + weight
    # + output), not its tensors' plus cuDNN's workspace memsets.
    ops = a.ops.set_index(["op", "shapes"])
    row = ops.loc[("aten::cudnn_convolution", "[[32, 256, 14, 14], [1024, 256, 1, 1], [], [], [], [], [], [], []]")]
    calls = row["calls"]
    assert row["flops"] == calls * 2 * 32 * 1024 * 256 * 14 * 14
    assert row["bytes"] == calls * 4 * (32 * 256 * 196 + 1024 * 256 + 32 * 1024 * 196)
    # and the per-kernel FLOPs of each call add up to the op's, on its compute kernels only
    conv_calls = k[(k["op_name"].astype(str) == "aten::cudnn_convolution") & k["flops"].notna()]
    assert (conv_calls["kernel_class"].astype(str) != "copy").all()


def test_inductor_kernel_flop_and_num_gb_cost_compiled_kernels(tmp_path):
    # torch.compile: Inductor's record_function around a Triton launch carries kernel_flop /
    # kernel_num_gb; profile_analysis.augment_trace writes them on the kernel itself.
    import tracekit
    from synthetic import KinetoBuilder

    b = KinetoBuilder()
    b.op("aten::mm", 0, 20, dims=[[256, 512], [512, 128]], types=[BF16, BF16])
    b.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_kernel", 1, 100, 10)
    b.op("triton_tem_fused_mm_0", 30, 10, kernel_flop=2 * 64 * 64 * 64, kernel_num_gb=3 * 64 * 64 * 2 / 1e9)
    b.kernel("triton_tem_fused_mm_0", 31, 120, 4)
    b.op("triton_poi_fused_add_1", 50, 10, kernel_num_gb=0.000524288)
    b.kernel("triton_poi_fused_add_1", 51, 130, 2)
    b.kernel("triton_red_fused_sum_2", 60, 140, 2, kernel_flop=0, kernel_num_gb=0.001)  # augmented trace
    b.kernel("triton_red_fused_norm_3", 70, 150, 2, kernel_flop="bad", kernel_num_gb=-1)  # unreadable: unknown
    a = tracekit.analyze(b.write(tmp_path / "compiled.json"))
    k = a.kernels.set_index(a.kernels["name"].astype(str))
    assert k.loc["sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_kernel", "cost_source"] == "op shapes"  # shapes first
    tem = k.loc["triton_tem_fused_mm_0"]
    assert tem["cost_source"] == "trace metadata (Inductor)"
    assert tem["flops"] == 2 * 64 ** 3 and tem["bytes_read"] + tem["bytes_written"] == pytest.approx(3 * 64 * 64 * 2)
    assert tem["dtype"] == "bf16"  # the trace's matrix dtype, from the shaped GEMM
    assert k.loc["triton_poi_fused_add_1", "bytes_read"] == pytest.approx(524288) and k.loc["triton_poi_fused_add_1", "flops"] == 0
    assert k.loc["triton_red_fused_sum_2", "bytes_read"] == pytest.approx(1e6)
    assert pd_isna(k.loc["triton_red_fused_norm_3", "flops"])
    assert a.coverage["modeled_share_by_source"]["trace metadata (Inductor)"] > 0


def pd_isna(v) -> bool:
    return v != v or v is None


def test_a_bad_inductor_figure_leaves_the_kernel_linked(tmp_path):
    import tracekit
    from synthetic import KinetoBuilder

    b = KinetoBuilder()
    b.op("triton_red_fused_norm_3", 0, 10)
    b.kernel("triton_red_fused_norm_3", 1, 150, 2, kernel_flop="bad", kernel_num_gb=-1)
    a = tracekit.analyze(b.write(tmp_path / "bad_meta.json"))
    assert a.kernels["launch"].iat[0] >= 0 and a.kernels["op"].iat[0] >= 0  # the other args still read
    assert pd_isna(a.kernels["flops"].iat[0]) and not [w for w in a.warnings if not w.startswith("trace health")]


def test_a_gather_never_reads_more_than_its_table():
    # BERT's token-type embedding: 141 lookups into a [2, 512] bf16 table read the table once
    # (2 KB) and the int64 indices, not 141 rows; they still write 141 rows.
    c = op_cost("aten::index_select", [[2, 512], [], [141]], [BF16, "Scalar", "long int"], ["", "0", ""])
    assert c.bytes_read == 2 * 512 * 2 + 141 * 8 and c.bytes_written == 141 * 512 * 2
    c = op_cost("aten::embedding", [[2, 512], [1, 141]], [BF16, "long int"], [])
    assert c.bytes_read == 2 * 512 * 2 + 141 * 8
    big = op_cost("aten::index_select", [[30522, 512], [], [141]], [BF16, "Scalar", "long int"], ["", "0", ""])
    assert big.bytes_read == 141 * 512 * 2 + 141 * 8  # few rows of a big table: the rows
