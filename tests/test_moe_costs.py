"""Mixture-of-experts and indexing costs, against torch's own counts of the project's CPU
recordings of a tiny HF Qwen3-MoE in its three experts forms (fixtures/record_cpu_hf_moe.py)
and, by hand, on the shared H200 Qwen3-MoE generate trace."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from conftest import PROJECT_FIXTURES, shared
from tracekit.analysis.load import load
from tracekit.attribution.widths import infer_widths
from tracekit.costs import Cost, Unknown, op_cost
from tracekit.costs.grouped_gemm import EXPECTED_EXPERTS, expected_experts
from tracekit.costs.index_shapes import index_hints
from tracekit.trace.column_text import as_text

TRUTH = json.loads((PROJECT_FIXTURES / "cpu_hf_moe_truth.json").read_text())
CONFIG = json.loads((PROJECT_FIXTURES / TRUTH["config"]).read_text())
FORMS = list(TRUTH["forms"])


def op_costs(form: str, name: str) -> list:
    """tracekit's cost of every call of `name` in the form's trace, in time order."""
    ops = load(PROJECT_FIXTURES / TRUTH["forms"][form]["trace"]).ops
    hints = index_hints(ops)
    rows = np.flatnonzero(as_text(ops["name"]) == name)
    rows = rows[np.argsort(ops["start"].to_numpy()[rows], kind="stable")]
    strides = ops["input_strides"].to_numpy() if "input_strides" in ops else [None] * len(ops)
    return [op_cost(name, ops["input_dims"].iat[r], ops["input_types"].iat[r], ops["concrete_inputs"].iat[r], hints.get(int(r)),
                    strides[r]) for r in rows.tolist()]


def truth_calls(form: str, name: str) -> list[dict]:
    return [c for c in TRUTH["forms"][form]["calls"] if c["op"] == name]


def test_expected_experts_by_hand():
    assert expected_experts(128, 32) == pytest.approx(128 * (1 - (127 / 128) ** 32))  # 28.4, the figure
    assert round(expected_experts(128, 32), 1) == 28.4
    assert expected_experts(128, 4096) == pytest.approx(128)
    assert expected_experts(6, 1) == pytest.approx(1.0)


@pytest.mark.parametrize("form", FORMS)
def test_every_index_call_writes_the_elements_torch_returned(form):
    """aten::index's result shape comes from its restride child: each call's bytes written are
    the real result's (TorchDispatchMode), in all three forms (weights gathered by expert ids,
    tokens gathered by the eager loop's torch.where, routing weights)."""
    costs, truth = op_costs(form, "aten::index"), truth_calls(form, "aten::index")
    assert len(costs) == len(truth) > 0
    for cost, t in zip(costs, truth):
        assert isinstance(cost, Cost), cost
        assert cost.bytes_written == t["numel"] * t["element_size"]
        assert cost.bytes_read > 0  # the rows it picked (at most the whole table: a small one is read once) and the indices


def test_batched_experts_gather_and_bmm_match_the_flop_counter():
    form = "batched_mm"
    e, h, i = CONFIG["num_experts"], CONFIG["hidden_size"], CONFIG["moe_intermediate_size"]
    costs = op_costs(form, "aten::index")
    weights = [c for c in costs if c.bytes_written % (2 * i * h * 2) == 0 and c.bytes_written >= 2 * i * h * 2]
    # per forward pass and layer: the gate_up [pairs, 2I, H] and down [pairs, H, I] gathers, pairs = rows routed
    rows = [r["rows"] for r in TRUTH["forms"][form]["routed"]]
    assert sorted(c.bytes_written for c in weights) == sorted([r * 2 * i * h * 2 for r in rows] + [r * h * i * 2 for r in rows])
    # the experts' bmm FLOPs: flop_counter's bmm of this form less that of the eager loop (whose
    # experts run as mm); the rest, the same in every form, is attention's, recorded as another op
    bmm = sum(c.flops for c in op_costs(form, "aten::bmm"))
    assert bmm == TRUTH["forms"][form]["flops_by_op"]["aten.bmm"] - TRUTH["forms"]["eager"]["flops_by_op"]["aten.bmm"] > 0


def test_grouped_mm_flops_are_the_experts_flops_of_the_eager_loop():
    """flop_counter does not count _grouped_mm; the same routing runs the same expert FLOPs
    as the eager loop's linears, which it does count (its mm minus the dense mm of the grouped run)."""
    experts = TRUTH["forms"]["eager"]["flops_by_op"]["aten.mm"] - TRUTH["forms"]["grouped_mm"]["flops_by_op"]["aten.mm"]
    costs = op_costs("grouped_mm", "aten::_grouped_mm")
    assert len(costs) == 2 * len(TRUTH["forms"]["grouped_mm"]["routed"])
    assert sum(c.flops for c in costs) == experts


def test_grouped_mm_weight_bytes_are_the_expected_experts_and_say_so():
    e, h, i = CONFIG["num_experts"], CONFIG["hidden_size"], CONFIG["moe_intermediate_size"]
    routed = TRUTH["forms"]["grouped_mm"]["routed"]
    costs = op_costs("grouped_mm", "aten::_grouped_mm")
    for r, (gate_up, down) in zip(routed, zip(costs[::2], costs[1::2])):
        rows = r["rows"]
        touched = expected_experts(e, rows)
        assert gate_up.bytes_read == rows * h * 2 + touched * h * 2 * i * 2
        assert down.bytes_read == rows * i * 2 + touched * i * h * 2
        assert gate_up.bytes_written == rows * 2 * i * 2
        assert gate_up.note.startswith(EXPECTED_EXPERTS) and f"at most {min(e, rows)}" in gate_up.note
        assert 1 <= r["distinct_experts"] <= min(e, rows)  # the router's real choice lies within the bound
    # and, on average over the calls, near the expectation (a random router routes near uniformly)
    actual = np.mean([r["distinct_experts"] for r in routed])
    assert actual == pytest.approx(np.mean([expected_experts(e, r["rows"]) for r in routed]), rel=0.15)


def test_eager_loop_index_add_is_costed_and_nonzero_says_why_not():
    adds = op_costs("eager", "aten::index_add_")
    assert adds and all(isinstance(c, Cost) for c in adds)
    h = CONFIG["hidden_size"]
    assert all(c.flops % h == 0 and c.bytes_written == c.flops * 2 for c in adds)  # bf16 rows of H added
    masks = op_costs("eager", "aten::nonzero")
    assert masks and all(isinstance(c, Unknown) and "mask" in c.reason for c in masks)


@pytest.mark.parametrize("form", FORMS)
def test_widths_of_a_moe_from_its_stacked_experts(form):
    """No --model: the stacked expert weights [E, 2I, H] / [E, H, I] give E and the expert
    widths, so the query's width (heads x head_dim, in and out of H) stays attention's."""
    w = infer_widths(load(PROJECT_FIXTURES / TRUTH["forms"][form]["trace"]))
    e, i = CONFIG["num_experts"], CONFIG["moe_intermediate_size"]
    q = CONFIG["num_attention_heads"] * CONFIG["head_dim"]
    assert w.hidden == CONFIG["hidden_size"] and w.experts == {e}
    assert {i, 2 * i, e} <= w.ffn and q in w.attention and q not in w.ffn


def test_cutlass_kernel_carries_the_grouped_gemm_and_blocks_are_ffn():
    """The shared H200 Qwen3-MoE generate: the prefill's CUTLASS grouped GEMM (not its setup
    kernel) carries 2·R·K·N (R = 512 tokens x top-8); the decode's expert-weight gathers move [32, 1536, 2048] bf16."""
    import tracekit

    a = tracekit.analyze(shared("torch/h200_hf_qwen3-moe-8l_generate_bs4_default.json.gz"))
    k = a.kernels
    names = k["name"].astype(str)
    cutlass = k[names.str.contains("GroupProblemShape") & (k["op_name"].astype(str) == "aten::_grouped_mm")]
    # gate_up [4096 rows, 2048] x [128, 2048, 1536] and down [4096, 768] x [128, 768, 2048], 8 layers each
    assert len(cutlass) == 16 and set(cutlass["flops"]) == {2.0 * 4096 * 2048 * 1536, 2.0 * 4096 * 768 * 2048}
    # the weight bytes are an estimate (the routing is on the device only), and coverage says so with its bound
    [estimate] = a.coverage["estimated"]
    assert estimate["kernels"] == 16 and estimate["time_ns"] == cutlass["duration_ns"].sum()
    assert "128.0 of 128 experts" in estimate["note"] and "at most 128" in estimate["note"]
    setup = k[names.str.contains("prepare_grouped_gemm_data")]
    assert len(setup) == 16 and (setup["flops"] == 0).all() and (setup["bytes_read"] + setup["bytes_written"] < 20_000).all()
    gather = k[names.str.contains("vectorized_gather_kernel")]
    up = gather[gather["bytes_written"] == 32 * 1536 * 2048 * 2]
    assert len(up) == 64 and set(up["bytes_read"]) == {32 * 1536 * 2048 * 2 + 32 * 8}
    is_kernel = k["kind"].astype(str) == "kernel"
    time = k["duration_ns"][is_kernel]
    assert a.coverage["modeled_share"] >= 0.95
    assert time[k["block"][is_kernel].astype(str) == "other"].sum() / time.sum() <= 0.10
    experts = gather[gather["bytes_written"] >= 32 * 768 * 2048 * 2]  # gate_up and down weights of 32 (token, expert) pairs
    assert len(experts) == 128 and (experts["block"].astype(str) == "ffn").all()
    assert math.isclose(time.sum(), a.coverage["kernel_time_ns"])


def test_router_ops_by_hand():
    # the H200 trace's router: topk(scores [4, 128] fp32, k=8) writes 8 values and 8 int64 positions per row
    topk = op_cost("aten::topk", [[4, 128], [], [], [], []], ["float", "Scalar", "Scalar", "Scalar", "Scalar"], ["", "8", "-1", "True", "True"])
    assert (topk.bytes_read, topk.bytes_written) == (4 * 128 * 4, 4 * 8 * (4 + 8))
    # histc of the 4,096 routed expert ids (int32) into 128 bins
    histc = op_cost("aten::histc", [[4096], [], [], []], ["int", "Scalar", "Scalar", "Scalar"], ["", "128", "0", "127"])
    assert (histc.flops, histc.bytes_read, histc.bytes_written) == (4096, 4096 * 4, 128 * 4)
    # floor_divide of int64 ids by a scalar: elementwise
    div = op_cost("aten::floor_divide", [[4096], []], ["long int", "long int"], ["", ""])
    assert (div.bytes_read, div.bytes_written) == (4096 * 8, 4096 * 8)
    # sort of 4,096 int64 keys: values and positions
    sort = op_cost("aten::sort", [[4096], [], []], ["long int", "Scalar", "Scalar"], ["", "-1", "False"])
    assert sort.bytes_written == 4096 * 8 + 4096 * 8
    # an index whose result was not recorded, and a boolean mask's select, say why they have no cost
    unknown = op_cost("aten::index", [[128, 1536, 2048], []], ["c10::BFloat16", ""], ["", ""])
    assert isinstance(unknown, Unknown) and "result shape was not recorded" in unknown.reason
    masked = op_cost("aten::masked_select", [[4, 128], [4, 128]], ["float", "bool"], ["", ""])
    assert isinstance(masked, Unknown) and "mask's values" in masked.reason
