"""Blocks from the trace's structure (attribution.structure, attribution.widths) on real traces
that have no ranges and no module frames: GEMMs by their weight shape against the model's
widths, the kernels around them by their op, their tensors and their place between GEMMs.

Hand reading of TinyLlama-1.1B (../shared/models/tinyllama-1.1b.config.json): hidden 2048,
32 query heads x 64 = 2048, 4 KV heads x 64 = 256, intermediate 5632, vocabulary 32000. So
the weights are q/o [2048, 2048], k/v [256, 2048], gate/up [5632, 2048], down [2048, 5632],
lm_head [32000, 2048]. The training trace runs batch 8 x 2048 = 16384 tokens, so an mm's
operands are [16384, K] x [K, N] forward, [16384, N] x [N, K] for the input gradient and
[N, 16384] x [16384, K] for the weight gradient."""

from __future__ import annotations

import numpy as np
import pytest

import tracekit
from conftest import shared, shared_model
from tracekit.model import ModelOptions

TINYLLAMA = "h200_hf_tinyllama-1.1b_train_ckpt_bs8x2048.json.gz"


@pytest.fixture(scope="module")
def tinyllama():
    return tracekit.analyze(shared("torch", TINYLLAMA))


def _op_dims(a) -> np.ndarray:
    """Per kernel: its op's input dims as text ('' without an op)."""
    dims = a.trace.ops["input_dims"].to_numpy()
    op = a.kernels["op"].to_numpy()
    return np.array([str(dims[o]) if o >= 0 else "" for o in op], dtype=object)


def _blocks_of(a):
    """blocks_of(op name, operand dims text): the set of blocks of the kernels those ops launched."""
    dims = _op_dims(a)
    op = a.kernels["op_name"].astype(str).to_numpy()
    blocks = a.kernels["block"].astype(str).to_numpy()

    def blocks_of(name, operands):
        rows = (op == name) & (dims == operands)
        assert rows.any(), (name, operands)
        return set(blocks[rows])

    return blocks_of


def _other_share(a) -> float:
    """GPU time of block `other` over the GPU time of all blocks (the blocks table)."""
    b = a.blocks
    return float(b.loc[b["block"] == "other", "gpu_time_ns"].sum() / b["gpu_time_ns"].sum())


def test_weight_candidates_of_linear_and_mm():
    from tracekit.attribution.widths import weight_pairs

    # aten::linear names its weight [out, in]; an mm [a, b] x [b, c] holds it as (c, b) first
    assert weight_pairs("aten::linear", [[8, 2048, 2048], [5632, 2048], []]) == [(5632, 2048)]
    assert weight_pairs("aten::mm", [[16384, 2048], [2048, 5632]])[0] == (5632, 2048)
    # the weight gradient [N, M] x [M, K]: (c, a) is the second candidate
    assert weight_pairs("aten::mm", [[5632, 16384], [16384, 2048]])[1] == (2048, 5632)
    assert weight_pairs("aten::addmm", [[1000], [32, 2048], [2048, 1000], [], []])[0] == (1000, 2048)
    assert weight_pairs("aten::add", [[2, 3], [2, 3]]) == []


def test_tinyllama_widths_inferred_from_the_trace_and_from_its_config():
    from tracekit.api import load
    from tracekit.attribution.widths import from_architecture, infer_widths
    from tracekit.model.config import load_config

    inferred = infer_widths(load(shared("torch", TINYLLAMA)))
    assert inferred.hidden == 2048
    assert {2048, 256} <= inferred.attention  # q/o and k/v
    assert inferred.ffn == {5632, 2 * 5632}  # gate/up/down, and a fused gate_up
    assert inferred.vocab == {32000}
    assert inferred.head_dim == 64  # the SDPA query [8, 32, 2048, 64]
    given = from_architecture(load_config(shared_model("tinyllama-1.1b.config.json")))
    assert (given.hidden, given.vocab) == (2048, {32000})
    assert {2048, 256, 2048 + 2 * 256} <= given.attention  # q/o, k/v, fused qkv 2560
    assert {5632, 11264} <= given.ffn


# operands of aten::mm -> the block its weight says (see the module docstring)
TINYLLAMA_GEMMS = {
    "[[16384, 2048], [2048, 2048]]": "attention",  # q / o forward (and their input gradients)
    "[[16384, 2048], [2048, 256]]": "attention",  # k / v forward
    "[[256, 16384], [16384, 2048]]": "attention",  # k / v weight gradient
    "[[16384, 2048], [2048, 5632]]": "ffn",  # gate / up forward, down's input gradient
    "[[16384, 5632], [5632, 2048]]": "ffn",  # down forward, gate / up input gradient
    "[[5632, 16384], [16384, 2048]]": "ffn",  # gate / up weight gradient
    "[[2048, 16384], [16384, 5632]]": "ffn",  # down weight gradient
    "[[16384, 2048], [2048, 32000]]": "lm_head",  # the vocabulary projection
    "[[32000, 16384], [16384, 2048]]": "lm_head",  # its weight gradient
    "[[16384, 32000], [32000, 2048]]": "lm_head",  # its input gradient
}


def test_tinyllama_gemms_are_placed_by_their_weight_shape(tinyllama):
    k = tinyllama.kernels
    dims = _op_dims(tinyllama)
    mm = (k["op_name"].astype(str) == "aten::mm").to_numpy() & (k["kind"].astype(str) == "kernel").to_numpy()  # not its memsets
    blocks = k["block"].astype(str).to_numpy()
    for operands, block in TINYLLAMA_GEMMS.items():
        rows = mm & (dims == operands)
        assert rows.sum() >= 2, operands
        assert set(blocks[rows]) == {block}, operands
    # backward GEMMs (under MmBackward0) are among them: dgrad and wgrad are placed too
    backward = mm & (dims == "[[5632, 16384], [16384, 2048]]")
    assert set(k["phase"].astype(str).to_numpy()[backward]) <= {"backward", "recompute"}


def test_tinyllama_small_kernels_follow_their_op_tensors_and_place(tinyllama):
    k = tinyllama.kernels
    blocks_of = _blocks_of(tinyllama)

    assert blocks_of("aten::silu", "[[8, 2048, 5632]]") == {"ffn"}  # the FFN width
    assert blocks_of("aten::silu_backward", "[[8, 2048, 5632], [8, 2048, 5632]]") == {"ffn"}
    assert blocks_of("aten::mul", "[[8, 32, 2048, 64], [1, 1, 2048, 64]]") == {"attention"}  # rotary: heads x head_dim
    assert blocks_of("aten::mean", "[[8, 2048, 2048], [], [], []]") == {"norm"}  # RMSNorm's mean over hidden
    assert blocks_of("aten::rsqrt", "[[8, 2048, 1]]") == {"norm"}  # between that mean and the next projection (the
    # last layer's too, before the lm_head)
    # the loss on the logits and its gradient: block logits, apart from the vocabulary projection's GEMMs
    assert blocks_of("aten::_log_softmax", "[[16384, 32000], [], []]") == {"logits"}
    assert blocks_of("aten::_log_softmax_backward_data", "[[16384, 32000], [16384, 32000], [], []]") == {"logits"}
    # every non-GEMM kernel whose op holds a vocabulary-wide tensor ([.., 32000]) is the logits' work,
    # and nothing else is (2 steps: log_softmax, nll_loss, their gradients, the logits' casts: 13.198 ms)
    ops = tinyllama.trace.ops
    vocab_op = np.array([any(isinstance(s, (list, tuple)) and len(s) and s[-1] == 32000 for s in (d or [])) for d in ops["input_dims"]])
    op = k["op"].to_numpy()
    kernel = (k["kind"].astype(str) == "kernel").to_numpy() & (k["kernel_class"].astype(str) != "gemm").to_numpy()
    vocab = (op >= 0) & vocab_op[np.maximum(op, 0)] & kernel  # (a GEMM's workspace memset is block memory)
    logits = (k["block"].astype(str) == "logits").to_numpy()
    assert (vocab == logits).all() and vocab.sum() == 14
    assert round(k["duration_ns"].to_numpy()[logits].sum() / 1e6, 3) == 13.198
    forward_head = ((k["block"].astype(str) == "lm_head") & (k["phase"].astype(str) == "forward")).to_numpy()
    assert set(k["kernel_class"].astype(str).to_numpy()[forward_head]) == {"gemm", "copy"}  # the GEMM, autocast's casts
    assert set(k["block"].astype(str).to_numpy()[k["phase"].astype(str).to_numpy() == "optimizer"]) == {"optimizer"}  # fused AdamW


def test_tinyllama_training_other_share_is_small(tinyllama):
    # 66-70% before blocks came from structure (no ranges, no module frames in the trace)
    assert _other_share(tinyllama) <= 0.10
    b = tinyllama.blocks.groupby("block")["gpu_time_ns"].sum() / tinyllama.blocks["gpu_time_ns"].sum()
    assert b["attention"] > 0.25 and b["ffn"] > 0.25 and b["lm_head"] > 0.01


# Every transformer trace in shared: "other" <= 10% of GPU time; serving traces with the
# matching model config (their graph replays carry no shapes).
TRANSFORMER_TRACES = [
    (TINYLLAMA, "tinyllama-1.1b.config.json"),
    ("h200_hf_llama3-8b_generate_bs1_eager.json.gz", None),
    ("h200_llama3-8b_eager_decode_bs16.json.gz", None),
    ("h200_streaming_video_dit1.3b_480p_chunk3_steps2.json.gz", None),
    ("h100_qwen1.5-0.5b_hf_inference.json.gz", "qwen1.5-0.5b-chat.config.json"),
    ("h100_bert_small_hf_inference.json.gz", None),
    ("mi300x_bert_small_hf_inference.json.gz", None),
    ("h100_falconsai_vit_hf_inference.json.gz", None),
    ("mi300x_falconsai_vit_hf_inference.json.gz", None),
    ("h100_timesformer_hf_inference.json.gz", None),
    ("mi300x_timesformer_hf_inference.json.gz", None),
    ("mi300x_xdit_flux1_capture_rank0.json.gz", None),
    ("b200_vllm_tp8_rank0_eager.json.gz", "gpt-oss-120b.config.json"),
    ("mi300x_sglang_qwen3-8b_decode_bs32.json.gz", "qwen3-8b.config.json"),
    ("rtx3090_vllm_gpt-oss-20b_decode_bs4_cudagraph.json.gz", "gpt-oss-20b.config.json"),
    ("mi300x_vllm_gpt-oss-20b_prefilldecode_piecewise_execution.json.gz", "gpt-oss-20b.config.json"),
]


@pytest.mark.parametrize("name,config", TRANSFORMER_TRACES, ids=[t for t, _ in TRANSFORMER_TRACES])
def test_other_is_at_most_ten_percent_on_transformer_traces(name, config):
    model = ModelOptions(str(shared_model(config))) if config else None
    capture = None
    if name.endswith("_execution.json.gz"):
        capture = shared("torch", name.replace("_execution", "_capture"))
    a = tracekit.analyze(shared("torch", name), model=model, capture=capture)
    assert _other_share(a) <= 0.10


def test_vllm_tp8_lm_head_by_its_per_rank_vocabulary_width():
    # gpt-oss-120b on 8 ranks: the vocabulary 201088 / 8 = 25136 rows per rank, hidden 2880
    a = tracekit.analyze(shared("torch", "b200_vllm_tp8_rank0_eager.json.gz"),
                         model=ModelOptions(str(shared_model("gpt-oss-120b.config.json"))))
    dims = _op_dims(a)
    lm = np.array(["25136" in d and "2880" in d for d in dims]) & (a.kernels["kernel_class"].astype(str) == "gemm").to_numpy()
    assert lm.any()
    assert set(a.kernels["block"].astype(str).to_numpy()[lm]) == {"lm_head"}


def test_serving_step_last_unshaped_gemm_is_the_lm_head():
    # vLLM on an RTX 3090, CUDA graphs: the model's GEMMs are graph-replayed, the vocabulary
    # projection runs eagerly after them, once per step, with no shapes recorded.
    a = tracekit.analyze(shared("torch", "rtx3090_vllm_gpt-oss-20b_decode_bs4_cudagraph.json.gz"),
                         model=ModelOptions(str(shared_model("gpt-oss-20b.config.json"))))
    k = a.kernels
    eager_gemm = (k["kernel_class"].astype(str) == "gemm").to_numpy() & ~k["graph_launch"].to_numpy() & (k["op"] >= 0).to_numpy()
    assert eager_gemm.sum() == 17  # one per step
    assert set(k["block"].astype(str).to_numpy()[eager_gemm]) == {"lm_head"}


def test_resnet_convolutions_are_block_conv():
    a = tracekit.analyze(shared("torch", "v100_resnet50_train_legacy2021.json.gz"))
    k = a.kernels
    conv_ops = k["op_name"].astype(str).str.contains("convolution").to_numpy()
    blocks = k["block"].astype(str).to_numpy()
    assert conv_ops.sum() > 100
    assert set(blocks[conv_ops & (k["kind"].astype(str) == "kernel").to_numpy()]) == {"conv"}
    assert _other_share(a) <= 0.10


def _hand_built_decoder(tmp_path, layers: int = 2) -> str:
    """A Llama-shaped decoder with neutral kernel names (no silu, rotary or norm in any name),
    no ranges, no module frames: hidden 256, 4 query heads x 64, 1 KV head x 64, FFN 688,
    vocabulary 32000, batch 4 x 16 tokens. The blocks can only come from the shapes and order."""
    from synthetic import KinetoBuilder

    b = KinetoBuilder()
    t = [0.0]
    ELEM, GEMM_K, REDUCE = "vectorized_elementwise_kernel<4>", "gemm_kernel_a", "reduce_kernel<512>"

    def op(name, dims, kernel=ELEM, inner=None):
        b.op(name, t[0], 8, dims=dims)
        if inner is not None:  # aten::linear -> aten::mm, as torch records it
            b.op("aten::mm", t[0] + 1, 6, dims=inner)
        b.kernel(kernel, t[0] + 2, 10_000 + t[0], 5)
        t[0] += 10

    def linear(n_out, n_in):
        op("aten::linear", [[4, 16, n_in], [n_out, n_in], []], GEMM_K, inner=[[64, n_in], [n_in, n_out]])

    def rms_norm():
        op("aten::pow", [[4, 16, 256], []])
        op("aten::mean", [[4, 16, 256], [], [], []], REDUCE)
        op("aten::rsqrt", [[4, 16, 1]])
        op("aten::mul", [[4, 16, 256], [4, 16, 1]])
        op("aten::mul", [[256], [4, 16, 256]])  # the weight

    op("aten::embedding", [[32000, 256], [4, 16]], "indexSelectLargeIndex")
    for _ in range(layers):
        rms_norm()
        linear(256, 256), linear(64, 256), linear(64, 256)  # q, k, v
        op("aten::mul", [[4, 4, 16, 64], [1, 1, 16, 64]])  # rotary on the query heads
        op("aten::scaled_dot_product_attention", [[4, 4, 16, 64], [4, 4, 16, 64], [4, 4, 16, 64]], "pytorch_flash::flash_fwd_kernel<X>")
        op("aten::clone", [[4, 16, 4, 64], []])  # the heads transposed back
        linear(256, 256)  # o
        op("aten::add", [[4, 16, 256], [4, 16, 256], []])  # residual
        rms_norm()
        linear(688, 256), linear(688, 256)  # gate, up
        op("aten::silu", [[4, 16, 688]])
        op("aten::mul", [[4, 16, 688], [4, 16, 688]])
        linear(256, 688)  # down
        op("aten::add", [[4, 16, 256], [4, 16, 256], []])  # residual
    rms_norm()
    linear(32000, 256)  # lm_head
    op("aten::_softmax", [[4, 32000], [], []], "cunn_SoftMaxForward")
    op("aten::argmax", [[4, 32000], [], []], REDUCE)
    return b.write(tmp_path / "decoder.json")


def test_hand_built_decoder_blocks_from_shapes_and_order(tmp_path):
    a = tracekit.analyze(_hand_built_decoder(tmp_path))
    blocks_of = _blocks_of(a)

    assert blocks_of("aten::mm", "[[64, 256], [256, 256]]") == {"attention"}  # q / o [256, 256]
    assert blocks_of("aten::mm", "[[64, 256], [256, 64]]") == {"attention"}  # k / v [64, 256]
    assert blocks_of("aten::mm", "[[64, 256], [256, 688]]") == {"ffn"}  # gate / up [688, 256]
    assert blocks_of("aten::mm", "[[64, 688], [688, 256]]") == {"ffn"}  # down [256, 688]
    assert blocks_of("aten::mm", "[[64, 256], [256, 32000]]") == {"lm_head"}  # [32000, 256]
    assert blocks_of("aten::mul", "[[4, 4, 16, 64], [1, 1, 16, 64]]") == {"attention"}  # 4 heads x 64
    assert blocks_of("aten::clone", "[[4, 16, 4, 64], []]") == {"attention"}
    assert blocks_of("aten::silu", "[[4, 16, 688]]") == {"ffn"}  # the FFN width
    assert blocks_of("aten::mul", "[[4, 16, 688], [4, 16, 688]]") == {"ffn"}
    assert blocks_of("aten::mean", "[[4, 16, 256], [], [], []]") == {"norm"}  # a mean over the hidden width
    assert blocks_of("aten::rsqrt", "[[4, 16, 1]]") == {"norm"}  # between that mean and the next projection
    # blocks by role (attribution.roles): norm is the normalisation's own steps, the residual
    # add beside it is elementwise
    assert blocks_of("aten::pow", "[[4, 16, 256], []]") == {"norm"}
    assert blocks_of("aten::mul", "[[4, 16, 256], [4, 16, 1]]") == {"norm"}  # x * rstd
    assert blocks_of("aten::mul", "[[256], [4, 16, 256]]") == {"norm"}  # the weight
    assert blocks_of("aten::add", "[[4, 16, 256], [4, 16, 256], []]") == {"elementwise"}  # residual add before a norm
    # every kernel runs 5 us: 5 norm kernels per RMSNorm x 5 RMSNorms, 2 residual adds x 2 layers
    time = a.blocks.groupby("block")["gpu_time_ns"].sum()
    assert time["norm"] == 25 * 5_000 and time["elementwise"] == 4 * 5_000
    assert blocks_of("aten::_softmax", "[[4, 32000], [], []]") == {"logits"}  # the logits: softmax, sampling
    assert blocks_of("aten::argmax", "[[4, 32000], [], []]") == {"logits"}
    assert time["logits"] == 2 * 5_000 and time["lm_head"] == 1 * 5_000  # the GEMM alone
    assert "other" not in set(a.kernels["block"].astype(str))
