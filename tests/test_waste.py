"""Waste detectors in "what to fix first" (issue 38, analysis/waste_*): each detector on a trace
recorded for it (fixtures/record_cpu_waste.py: one kernel per computing op, the op tree and
shapes as torch recorded them), and on the GPU traces the issue names. Every figure asserted
is derived here from the trace's shapes and a formula."""

from __future__ import annotations

import json
import math
import pathlib

import numpy as np
import pytest

import tracekit
from conftest import PROJECT_FIXTURES, shared

H100 = PROJECT_FIXTURES / "gpu" / "h100"


def _rows(a) -> dict:
    return {c["cause"]: c for c in a.findings.causes}


def _kernels_of(a, op_name: str, dims: list) -> np.ndarray:
    """Kernels inside the steps whose op is `op_name` with input dims starting with `dims`."""
    k, ops = a.kernels, a.trace.ops
    op = k["op"].to_numpy()
    names, all_dims = ops["name"].astype(str).to_numpy(), ops["input_dims"].to_numpy()
    hit = np.array([o >= 0 and names[o] == op_name and all_dims[o][:len(dims)] == dims for o in op])
    return hit & (k["step"].to_numpy() >= 0)


@pytest.fixture(scope="module")
def forms():
    return tracekit.analyze(PROJECT_FIXTURES / "cpu_waste_forms.json.gz", workers=1)


def test_the_recorded_forms_each_give_one_row_with_their_fix(forms):
    rows = _rows(forms)
    for cause in ("waste_copies_rewrite", "waste_copies_layout", "waste_weight_gathers", "waste_unfused_attention",
                  "waste_strided_elementwise"):
        assert cause in rows and rows[cause]["fix"], cause
    # the rows are disjoint slices of the denominator: the running total stays below 100%
    assert max(c["cumulative_share"] or 0 for c in forms.findings.causes) <= 1.0


def test_a_whole_cache_clone_per_layer_is_a_rewrite_of_its_bytes(forms):
    """cache [2, 2, 4, 8, 256, 64] fp32 cloned once per layer (2) per step (2): copy_(dst, src)."""
    shape = [2, 2, 4, 8, 256, 64]
    r = _rows(forms)["waste_copies_rewrite"]
    mine = _kernels_of(forms, "aten::copy_", [shape, shape])
    nbytes = math.prod(shape) * 4
    assert r["evidence"]["kernels"] == mine.sum() == 4 and r["evidence"]["per_step"] == 2
    assert r["evidence"]["tensor_bytes"] == nbytes == 8_388_608
    assert r["evidence"]["bytes_moved"] == 2 * nbytes * 4  # each copy reads and writes the whole cache
    assert r["time_ns"] == pytest.approx(forms.kernels["exclusive_ns"].to_numpy()[mine].sum())
    assert "aten::clone" in r["where"]


def test_layer_norm_on_a_transposed_patch_embedding_is_a_layout_copy(forms):
    """conv(x).flatten(2).transpose(1, 2): [4, 1024, 256] fp32 with strides (262144, 1, 1024);
    layer_norm copies it contiguous, twice in the first block (the sum it returns is contiguous)."""
    shape = [4, 1024, 256]
    r = _rows(forms)["waste_copies_layout"]
    mine = _kernels_of(forms, "aten::copy_", [shape, shape])
    assert r["evidence"]["kernels"] == mine.sum() == 4 and r["evidence"]["per_step"] == 2
    assert r["evidence"]["tensor_bytes"] == math.prod(shape) * 4
    assert r["evidence"]["bytes_needed"] == 0.0
    assert "layer_norm" in r["where"]  # copy_ < clone < contiguous < native_layer_norm
    # the adds take two tensors of that shape too, but compute: not copies
    adds = _kernels_of(forms, "aten::add", [shape, shape])
    assert adds.sum() == 8 and r["evidence"]["kernels"] == mine.sum()


def test_an_add_with_the_transposed_patch_embedding_is_strided_elementwise(forms):
    """`h + residual`, residual = the patch embedding's strided [4, 1024, 256] view (strides
    262144, 1, 1024), once per block (2) per step (2); the `ln + ln` adds (both contiguous) are
    not. The row counts the time above the roofline: the add itself is needed work."""
    shape = [4, 1024, 256]
    r = _rows(forms)["waste_strided_elementwise"]
    k, ops = forms.kernels, forms.trace.ops
    op = k["op"].to_numpy()
    adds = _kernels_of(forms, "aten::add", [shape, shape])
    strided = adds & np.array([o >= 0 and [1024 * 256, 1, 1024] in (ops["input_strides"].iat[o] or []) for o in op])
    assert strided.sum() == r["evidence"]["kernels"] == 4
    assert r["evidence"]["layout"] == {"shape": shape, "strides": [1024 * 256, 1, 1024]}
    above = forms.kernels["exclusive_ns"].to_numpy() - forms.kernels["t_min_sustained_ns"].to_numpy()
    assert r["time_ns"] == pytest.approx(np.clip(above[strided], 0, None).sum())
    assert ".contiguous()" in r["fix"]


def test_gathering_expert_matrices_for_a_bmm_is_a_weight_gather(forms):
    """experts [16, 256, 512] fp32, 8 indices: each gather copies 8 matrices (4 MiB) that a bmm
    then reads; 2 per step."""
    r = _rows(forms)["waste_weight_gathers"]
    per_gather = 8 * 256 * 512 * 4
    assert r["evidence"]["gathers"] == 4 and r["evidence"]["matrices_per_gather"] == 8
    assert r["evidence"]["bytes_moved"] == 4 * 2 * per_gather and r["evidence"]["bytes_needed"] == 0.0
    assert r["evidence"]["bytes_gathered_per_step"] == 2 * per_gather
    mine = _kernels_of(forms, "aten::index", [[16, 256, 512]])
    assert r["time_ns"] == pytest.approx(forms.kernels["exclusive_ns"].to_numpy()[mine].sum())


def test_matmul_softmax_matmul_is_unfused_attention_with_the_fused_bytes(forms):
    """q, k, v [2, 4, 256, 32] fp32, 2 per step: a fused kernel reads Q, K, V and writes O once."""
    r = _rows(forms)["waste_unfused_attention"]
    b, s, d = 2 * 4, 256, 32
    assert r["evidence"]["attentions"] == 4
    assert r["evidence"]["bytes_needed"] == 4 * b * 4 * s * d * 4
    assert r["evidence"]["flops"] == 4 * 4.0 * b * s * s * d
    assert "scaled_dot_product_attention" in r["fix"]


def test_compiled_decode_first_cause_is_the_whole_cache_rewrite():
    """fixtures/gpu/h100 compiled decode: Inductor functionalizes the static cache update into
    kernels that take the whole [8, 2, 16, 8, 1024, 128] bf16 cache as input and output, 8 per
    step (one per layer); the cache is the truth's kv_cache_bytes."""
    a = tracekit.analyze(H100 / "h10080gbhbm3_llama3-8b_8layers_compiled_decode_bs16.json.gz", workers=1)
    truth = json.loads((H100 / "compiled.truth.json").read_text())
    first = a.findings.causes[0]
    assert first["cause"] == "waste_copies_rewrite" and "in place" in first["fix"]
    e = first["evidence"]
    assert e["tensor_bytes"] == truth["kv_cache_bytes"] == 8 * 2 * 16 * 8 * 1024 * 128 * 2
    assert e["per_step"] == truth["layers"]
    k = a.kernels
    decode = (k["step"].to_numpy() >= 0) & (k["kind"] == "kernel").to_numpy()
    assert first["time_ns"] >= 0.55 * k["exclusive_ns"].to_numpy()[decode].sum()
    # the bytes it says were moved fit the device: a copy reads and writes the cache once
    assert e["bytes_moved"] / first["time_ns"] <= 1.05 * a.device.bandwidth / 1e9
    assert e["bytes_moved"] == 2 * truth["kv_cache_bytes"] * e["kernels"]


@pytest.fixture(scope="module")
def train():
    return tracekit.analyze(shared("torch", "h200_hf_tinyllama-1.1b_train_ckpt_bs8x2048.json.gz"), workers=1)


def test_checkpointed_training_names_recompute_and_no_launch_row_on_a_busy_gpu(train):
    rows = _rows(train)
    r = rows["waste_recompute"]
    k = train.kernels
    recompute = (k["phase"] == "recompute").to_numpy() & (k["step"].to_numpy() >= 0) & (k["kind"] == "kernel").to_numpy()
    assert r["time_ns"] == pytest.approx(k["exclusive_ns"].to_numpy()[recompute].sum())
    # 20.1% of the step time (the steps' GPU windows, 430.5 + 427.3 ms, and 1.5 ms idle outside them): each
    # step's window reads 20.2% / 20.1% (tests/test_one_denominator.py); the 18.5% is another model's run
    assert 0.19 <= r["share"] <= 0.21
    # 98% busy: launch calls longer than their kernels are the queue pushing back, counted only
    # as far as the GPU waited for the host
    launch = rows.get("launch_overhead")
    assert launch is None or launch["share"] <= 0.02
    wait = sum(c["time_ns"] for c in train.findings.causes if c["cause"].endswith("host_wait"))
    assert launch is None or launch["time_ns"] <= wait


def test_moe_decode_weight_gather_is_a_row():
    """HF Qwen3-MoE decode, batch 4 x top-8 = 32 (token, expert) pairs per layer: gate_up
    [128, 1536, 2048] and down [128, 2048, 768] gathered 32 at a time, 8 layers, bf16."""
    a = tracekit.analyze(shared("torch", "h200_hf_qwen3-moe-8l_generate_bs4_default.json.gz"), workers=1)
    r = _rows(a)["waste_weight_gathers"]
    per_layer = 32 * (1536 * 2048 + 2048 * 768) * 2
    assert r["evidence"]["bytes_gathered_per_step"] == pytest.approx(8 * per_layer)
    assert "grouped GEMM" in r["fix"]


def test_timesformer_eager_attention_is_unfused_attention():
    """TimeSformer (HF eager attention): 12 layers of space attention over 197 (+1) tokens per
    frame; its time attention over 8 frames has Sk < head dim: no SxS matrix worth fusing away."""
    a = tracekit.analyze(shared("torch", "h100_timesformer_hf_inference.json.gz"), workers=1)
    r = _rows(a)["waste_unfused_attention"]
    assert r["evidence"]["attentions"] == 12
    assert "scaled_dot_product_attention" in r["fix"]


def test_training_steps_give_tflops_and_mfu_with_recompute_apart(train):
    """Per step: FLOPs from the kernels' op shapes over the step's GPU window, within 10% of the
    recorder's truth (FLOPs of the step with its recompute / step time); MFU leaves the
    recompute out, HFU keeps it, both of the H200's dense bf16 peak."""
    truth = json.loads(shared("truth", "h200_hf_tinyllama-1.1b_train_ckpt_bs8x2048.truth.json").read_text())
    expected = truth["flops_step_with_recompute"] / truth["step_s"] / 1e12
    k = train.kernels
    peak = train.device.peak_flops("matrix", "bf16")
    for position, r in enumerate(train.steps.to_dict(orient="records")):
        assert abs(r["achieved_tflops"] / expected - 1) <= 0.10
        seconds = r["duration_ns"] / 1e9
        owner = np.unique(k["step"].to_numpy()[k["step"].to_numpy() >= 0])[position]
        mine = (k["step"].to_numpy() == owner) & (k["kind"] == "kernel").to_numpy()
        redo = np.nansum(k["flops"].to_numpy()[mine & (k["phase"] == "recompute").to_numpy()])
        assert r["recompute_flops"] == pytest.approx(redo) and redo > 0
        assert r["mfu"] == pytest.approx((r["flops"] - redo) / seconds / peak)
        assert r["hfu"] == pytest.approx(r["flops"] / seconds / peak) and r["hfu"] > r["mfu"]


def test_a_convolution_network_has_no_unfused_attention_nor_crash():
    """ResNet-50 training (legacy 2021 trace): its convolutions' backward ops take two [N, C, H, W]
    tensors whose last dims multiply like matrices; no op between them takes a scores matrix
    alone, and they are backward: no attention row."""
    a = tracekit.analyze(shared("torch", "v100_resnet50_train_legacy2021.json.gz"), workers=1)
    assert "waste_unfused_attention" not in _rows(a)


def test_an_inference_pipelines_kv_refresh_is_not_checkpointing():
    # the streaming DiT's `kv_recompute` range names a phase "recompute", but no op of it runs
    # inside a backward node (no autograd op at all): refreshing a KV cache is not the cost of
    # activation checkpointing, so no recompute row, whatever the phase is called
    a = tracekit.analyze(shared("torch/h200_streaming_video_dit1.3b_480p_chunk3_steps2.json.gz"))
    assert (a.kernels["phase"] == "recompute").any()
    causes = [c["cause"] for c in a.findings.causes]
    assert "waste_recompute" not in causes


def test_the_cast_row_names_every_shape_it_counts_weights_apart(train):
    """TinyLlama training under autocast (issue 38 review): the casts row counts the fp32 weights
    cast to bf16 each step ([5632, 2048], [2048, 5632], [2048, 2048], [256, 2048]) beside the
    activations' casts; its sentence says how many of each, not "754 of one 134 MB tensor"."""
    r = _rows(train)["waste_copies_cast"]
    e = r["evidence"]
    tensors = e["tensors"]
    # the breakdown adds up to the row: copies per step of each shape sum to the row's
    assert sum(t["per_step"] for t in tensors) == e["per_step"] == e["kernels"] / 2
    weights = {tuple(t["shape"]) for t in tensors if t["weight"]}
    assert {(5632, 2048), (2048, 5632), (2048, 2048), (256, 2048)} <= weights
    assert (8, 2048, 2048) not in weights  # the normed activation, cast before each projection
    # a weight's bytes: its elements x 4 (the fp32 source, the wider of the two dtypes)
    assert {tuple(t["shape"]): t["bytes"] for t in tensors}[(5632, 2048)] == 5632 * 2048 * 4
    # what the casts move: each reads its fp32 source and writes its bf16 copy, 4 + 2 bytes an
    # element (not twice the wider tensor): fp32 <-> bf16 casts only, so 6 / 4 of the tensors' bytes
    steps = e["kernels"] / e["per_step"]
    assert e["bytes_moved"] == pytest.approx(sum(t["bytes"] / 4 * 6 * t["per_step"] for t in tensors) * steps, rel=1e-9)
    # every weight shape is a matmul's second operand (or its transpose) in the trace
    ops = train.trace.ops
    second = {tuple(d[1]) for n, d in zip(ops["name"].astype(str), ops["input_dims"]) if n == "aten::mm" and len(d) > 1}
    assert all(w in second or w[::-1] in second for w in weights)
    n_weights = sum(t["per_step"] for t in tensors if t["weight"])
    assert f"{e['per_step']:,.0f} per step: {e['per_step'] - n_weights:,.0f} of activations (" in r["what"]
    assert f"; {n_weights:,.0f} of weights (" in r["what"]


def test_qwen_rmsnorm_with_its_casts_is_one_chain_and_no_cast_row():
    """HF Qwen1.5-0.5B inference, bf16 x [16, 559, 1024]: each RMSNorm runs copy_ (fp32 <- bf16),
    pow, mean, add, rsqrt, mul, copy_ (bf16 <- fp32), mul(weight), after the residual add (but
    the first layer's): one chain per norm, 2 per layer x 24 layers and the final norm, casts
    included (the first layer's, 8 links, is the others less their add); no cast is
    left for the casts row. A fused add + RMSNorm reads the two addends (2 X) and writes the
    residual stream and the normed output (2 X), plus the weight [1024] bf16; the first norm
    reads x and the weight and writes its output (2 X + W)."""
    a = tracekit.analyze(shared("torch", "h100_qwen1.5-0.5b_hf_inference.json.gz"), workers=1)
    rows = _rows(a)
    assert "waste_copies_cast" not in rows
    e = rows["waste_unfused_elementwise"]["evidence"]
    assert e["chains"] == 2 * 24 + 1 and e["kernels_per_chain"] == [8, 9]
    assert e["top_chain"] == ["aten::add", "aten::copy_", "aten::pow", "aten::mean", "aten::add", "aten::rsqrt",
                              "aten::mul", "aten::copy_", "aten::mul"]
    x, w = 16 * 559 * 1024 * 2, 1024 * 2
    assert e["bytes_needed"] == 48 * (4 * x + w) + (2 * x + w) == 3_553_658_880


def test_a_copy_rows_sentence_counts_every_shape():
    """The sentence's counts add up to the row's and each shape's bytes are its elements x 4 (fp32)."""
    from tracekit.analysis.waste_copies import sentence

    def t(shape, n, weight):
        return {"shape": shape, "bytes": float(math.prod(shape) * 4), "weight": weight, "per_step": n, "time_ns": n}

    assert sentence(2.0, [t([1024, 1024], 2.0, True)]) == "2 per step of a 4.2 MB weight [1024, 1024]"
    assert (sentence(51.0, [t([1, 64, 512, 512], 48.0, False), t([512, 512], 3.0, True)])
            == "51 per step: 48 of activations [1, 64, 512, 512] (67 MB); 3 of weights [512, 512] (1.0 MB)")
    four = [t([8, 2048, 2048], 376.0, False), t([8, 32, 2048, 64], 88.0, False), t([8, 4, 2048, 64], 44.0, False),
            t([8, 2048, 32000], 2.0, False)]
    assert sentence(510.0, four) == ("510 per step (activations): 376 of [8, 2048, 2048] (134 MB), 88 of [8, 32, 2048, 64] "
                                     "(134 MB) and 46 of 2 other shapes (up to 2,097 MB)")
