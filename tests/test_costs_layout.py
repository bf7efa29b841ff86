"""MIOpen's layout transposes around a convolution, costed from their launch: tiles x tile size
is the tensor they move (tracekit.costs.layout), checked by hand on the MI300X ResNet trace."""

from __future__ import annotations

from conftest import shared
from tracekit.costs.layout import layout_kernel_cost

BF16 = "c10::BFloat16"
CONV_DIMS = [[10, 64, 56, 56], [64, 64, 3, 3], [], [], [], [], [], [], []]
CONV_TYPES = [BF16, BF16, "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "Scalar", "Scalar"]


def test_the_tiles_launched_name_the_tensor_moved():
    # ROCm reports the grid in threads: 32,768 / 256 = 128 blocks of 16 x 32 = 65,536 slots, the
    # filter [64, 64, 3, 3] = 36,864 elements (its 9 taps fill 9 of a 16-wide tile)
    cost = layout_kernel_cost("batched_transpose_16x32_half", (32768, 1, 1), (256, 1, 1), CONV_DIMS, CONV_TYPES)
    assert cost.bytes_read == cost.bytes_written == 36864 * 2 and cost.flops == 0
    # 7,840 blocks of 32 x 32 = 8,028,160 = the stem convolution's output [10, 64, 112, 112]
    stem = layout_kernel_cost("batched_transpose_32x32_half", (2007040, 1, 1), (256, 1, 1),
                              [[10, 3, 224, 224], [64, 3, 7, 7]], [BF16, BF16], output=(10 * 64 * 112 * 112, "bf16"))
    assert stem.bytes_read == 8028160 * 2
    # without the output, no input has that size: no cost (the tensor is not guessed)
    assert layout_kernel_cost("batched_transpose_32x32_half", (2007040, 1, 1), (256, 1, 1),
                              [[10, 3, 224, 224], [64, 3, 7, 7]], [BF16, BF16]) is None
    # a kernel whose name gives no tile is not costed this way
    assert layout_kernel_cost("nchwToNhwcKernel<float>", (100, 1, 1), (256, 1, 1), CONV_DIMS, CONV_TYPES) is None


def test_the_mi300x_resnet_trace_is_costed_over_95_percent():
    import tracekit

    a = tracekit.analyze(shared("torch", "mi300x_resnet_act_checkpoint_rank0.json.gz"))
    assert a.coverage["modeled_share"] >= 0.95
    k = a.kernels
    moved = k[k["name"].astype(str).str.startswith("batched_transpose") & k["flops"].notna()]
    assert len(moved) > 700
    assert (moved["efficiency"] <= 1.0).all()  # a transpose never beats the memory roof


def test_a_grid_not_recorded_says_nothing_of_the_tiles():
    assert layout_kernel_cost("batched_transpose_32x32_half", (-1, -1, -1), (-1, -1, -1), CONV_DIMS, CONV_TYPES) is None
    assert layout_kernel_cost("batched_transpose_32x32_half", (0, 1, 1), (256, 1, 1), CONV_DIMS, CONV_TYPES) is None
