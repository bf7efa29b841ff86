"""Split-K GEMMs under --model: the reduce kernel is no part of the step of its own; it is
costed on the s fp32 partial sums of the GEMM it follows, and the parts after it keep their
places (tracekit.model.placement)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import shared, shared_model


@pytest.fixture(scope="module")
def rtx3090():
    import tracekit

    return tracekit.analyze(shared("torch", "rtx3090_vllm_gpt-oss-20b_decode_bs4_cudagraph.json.gz"),
                            model=str(shared_model("gpt-oss-20b.config.json")))


def test_router_split_k_reduce_reads_the_partial_sums_not_the_expert_weights(rtx3090):
    k = rtx3090.kernels.sort_values("start")
    reduce = k[k["name"].astype(str).str.contains("splitKreduce")]
    # The step execute_new_3_cached_1 runs 18 tokens (reshape_and_cache_kernel_flash: one
    # block per token written, grid 18). Its router is a [18, 2880] x [2880, 32] GEMM that
    # cuBLASLt splits: the cutlass 32x32-tile kernel covers the [18, 32] output with
    # ceil(18/32)·ceil(32/32) = 1 tile and runs 15 blocks (grid 1x1x15), so s = 15.
    t, e, h, s = 18, 32, 2880, 15
    assert len(reduce) == 24  # one per MoE layer
    assert (reduce["cost_source"].astype(str) == "model").all()
    assert (reduce["bytes_read"] == s * t * e * 4).all()  # s fp32 partial sums per output: 34,560 B
    assert (reduce["bytes_written"] == t * e * 2).all()  # the bf16 router logits: 1,152 B
    assert (reduce["flops"] == (s - 1) * t * e).all()
    # at ~3 us, 35.7 kB is ~12 GB/s: far below the RTX 3090's 936 GB/s, never flagged
    assert (reduce["achieved_tbps"] < 0.1).all()
    assert not any("splitKreduce" in f.where for f in rtx3090.flags)
    # the router GEMM right before each reduce reads its weights and tokens, writes the partial sums
    before = k.index.get_indexer(reduce.index) - 1
    router = k.iloc[before]
    assert router["name"].astype(str).str.contains("wmma_tensorop_bf16_s161616gemm_bf16_32x32").all()
    assert np.allclose(router["bytes_read"], h * e * 2 + e * 2 + t * h * 2)  # [32, 2880] bf16 weights, bias, [18, 2880] tokens
    assert (router["bytes_written"] == s * t * e * 4).all()
    assert np.allclose(router["flops"], 2 * t * h * e)


def test_parts_after_a_split_k_router_keep_their_places(rtx3090):
    """Before the fix the reduce took the gate/up part, so the gate/up Marlin kernel took the
    down part and the down kernel the combine. The 18-token step: 4 routed experts per token,
    32·(1 - (1 - 4/32)^18) experts expected active, MXFP4 weights (4.25 bits per weight)."""
    k = rtx3090.kernels.sort_values("start")
    step = k["step"].to_numpy()[k["name"].astype(str).str.contains("splitKreduce").to_numpy()][0]
    marlin = k[(k["step"] == step) & k["name"].astype(str).str.contains("marlin_moe")]
    t, h, w, e = 18, 2880, 2880, 32
    active = e * (1 - (1 - 4 / e) ** t)
    gate_up = active * 2 * w * h * 4.25 / 8 + t * h * 2
    down = active * w * h * 4.25 / 8 + t * 4 * w * 2
    assert len(marlin) == 2 * 24
    assert np.allclose(marlin["bytes_read"].to_numpy()[0::2], gate_up, rtol=0.01)
    assert np.allclose(marlin["bytes_read"].to_numpy()[1::2], down, rtol=0.01)


def test_split_k_reduce_after_a_placed_lm_head_takes_two_partial_sums():
    """A synthetic step: the LM head GEMM ([4, 4096] x [4096, 32000] bf16) followed by its
    split-K reduce. No output shape comes with the LM head block and no grid is given: the
    outputs are its bytes written over bf16's 2 B, and s = 2, the fewest splits."""
    from tracekit.model.placement import place

    names = np.array(["nvjet_tst_64x8_64x16_1x1_v_bz_splitK_TNN", "cublasLt::splitKreduce_kernel<32, 16, int, float>"])
    rows = np.arange(2)
    head = {"flops": 2 * 4 * 4096 * 32000, "bytes_read": 4096 * 32000 * 2 + 4 * 4096 * 2,
            "bytes_written": 4 * 32000 * 2, "kind": "matrix", "dtype": "bf16"}
    placed, done = place(["lm head"], rows, rows.astype(np.int64), np.array(["gemm", "gemm"]), names,
                         np.ones(2, dtype=bool), {"lm head": head}, {"moe": None, "projections": {}})
    assert done == ["lm head"]
    outputs = 4 * 32000
    assert placed[0][:3] == (head["flops"], head["bytes_read"], 2 * outputs * 4)  # the GEMM writes 2 fp32 partial sums
    assert placed[1][:3] == ((2 - 1) * outputs, 2 * outputs * 4, outputs * 2)  # the reduce reads them, writes bf16

