"""Costs the trace's own structure allows for graph-replayed kernels and ROCm attention:
a trace that records its own graph capture, and aiter's flash attention op."""

from __future__ import annotations

from conftest import shared


def test_a_trace_holding_its_own_graph_capture_is_paired_with_itself():
    """xDiT FLUX.1 (torch.compile + CUDA-graph trees): the trace records the graph's capture
    (CUDAGraphNode.record: the launches between StreamBeginCapture and StreamEndCapture, with
    their ops and shapes) and then its replay, whose kernels carry no op. Without --capture the
    replayed GEMMs take their captured aten::mm / addmm: FLOPs = 2·M·K·N from its input dims
    (+ M·N for addmm's bias add)."""
    import tracekit

    a = tracekit.analyze(shared("torch", "mi300x_xdit_flux1_capture_rank0.json.gz"))
    assert a.meta["capture"]["graphs_captured"] == 1 and a.meta["capture"]["graph_launches_matched"] == 1
    k = a.kernels
    gemm = k[k["capture_op"].astype(bool) & k["op_name"].astype(str).isin(["aten::mm", "aten::addmm"])]
    assert len(gemm) > 400 and gemm["graph_launch"].all()
    dims = a.trace.ops["input_dims"].to_numpy()
    for op_name, op, flops in zip(gemm["op_name"].astype(str), gemm["op"], gemm["flops"]):
        a_dims, b_dims = (dims[op][0], dims[op][1]) if op_name == "aten::mm" else (dims[op][1], dims[op][2])
        bias = a_dims[0] * b_dims[1] if op_name == "aten::addmm" else 0
        assert flops == 2 * a_dims[0] * a_dims[1] * b_dims[1] + bias
    assert a.coverage["modeled_share"] >= 0.9  # 50% before: the replay was half the kernel time


def test_aiter_flash_attention_forward_by_hand():
    """xDiT FLUX.1's joint attention: aiter::fmha_v3_fwd(q, k, v [1, 768, 24, 128] bf16,
    dropout 0, scale, is_causal False, window -1, -1, ...). FLOPs: QK^T and PV, 2 x 2·sq·sk·h·d;
    bytes: q, k, v read once, the output written once."""
    from tracekit.costs import op_cost

    dims = [[1, 768, 24, 128]] * 3 + [[]] * 15
    types = ["c10::BFloat16"] * 3 + ["Scalar"] * 8 + [""] * 7
    concrete = ["", "", "", "0.", "0.0883883", "False", "-1", "-1", "True", "False", "2"] + [""] * 7
    cost = op_cost("aiter::fmha_v3_fwd", dims, types, concrete)
    b, s, h, d = 1, 768, 24, 128
    assert cost.flops == 2 * 2 * b * s * s * h * d
    assert cost.bytes_read == 3 * b * s * h * d * 2 and cost.bytes_written == b * s * h * d * 2
    # a sliding window scores fewer pairs than the square: unknown, not overcounted
    windowed = op_cost("aiter::fmha_v3_fwd", dims, types, concrete[:6] + ["128", "0"] + concrete[8:])
    assert not hasattr(windowed, "flops") and "sliding" in windowed.reason
