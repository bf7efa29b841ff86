"""tracekit's FLOPs against torch.utils.flop_counter, on real models recorded here.

Each model runs forward and backward twice on the CPU: once under FlopCounterMode, once
under torch.profiler with record_shapes. tracekit costs the recorded ops; for every op torch
counts, the totals must be equal. Intended differences are asserted with their reason:
- addmm / baddbmm: tracekit adds M*N for the bias add, torch counts only the product;
- causal attention: tracekit counts the S(S+1)/2 pairs of the score matrix a causal kernel computes;
- GQA: torch's sdpa_flop_count requires equal head counts; tracekit counts the query heads;
- grouped convolution backward: torch counts the weight gradient with all input channels
  (groups x the work done); tracekit counts Cin / groups, as for the forward.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")  # the test extra pins the CPU build
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402
from torch.utils import flop_counter  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import tracekit  # noqa: E402
from tracekit.costs import Cost, op_cost  # noqa: E402


class Block(nn.Module):
    """A transformer block: pre-norm, fused QKV with bias, causal GQA attention, GELU MLP."""

    def __init__(self, dim=64, heads=8, kv_heads=2, hidden=128):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, dim // heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, (heads + 2 * kv_heads) * self.hd)
        self.out = nn.Linear(dim, dim, bias=False)
        self.up, self.down = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm(x)).split([self.heads * self.hd, self.kv_heads * self.hd, self.kv_heads * self.hd], -1)
        q = q.view(b, s, self.heads, self.hd).transpose(1, 2)
        k = k.view(b, s, self.kv_heads, self.hd).transpose(1, 2)
        v = v.view(b, s, self.kv_heads, self.hd).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.out(a.transpose(1, 2).reshape(b, s, d))
        return x + self.down(F.gelu(self.up(x)))


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 16, 3, padding=2, dilation=2, groups=2, bias=False)
        self.up = nn.ConvTranspose2d(16, 4, 2, stride=2)
        self.fc = nn.Linear(4 * 16 * 16, 10)

    def forward(self, x):
        x = F.relu(self.bn(self.c1(x)))
        x = self.up(self.c2(x))
        return self.fc(x.flatten(1))


MODELS = {
    "transformer_block": (Block, lambda: torch.randn(2, 16, 64)),
    "mlp": (lambda: nn.Sequential(nn.Linear(32, 96), nn.ReLU(), nn.Linear(96, 96), nn.Tanh(), nn.Linear(96, 8)), lambda: torch.randn(24, 32)),
    "conv_net": (ConvNet, lambda: torch.randn(2, 3, 16, 16)),
}


def _step(model, x):
    model(x).square().mean().backward()


def _record(name, tmp_path):
    make_model, make_input = MODELS[name]
    torch.manual_seed(0)
    model, x = make_model(), make_input()
    with FlopCounterMode(display=False) as counter:
        _step(model, x)
    counted = {str(op).split(".")[-1]: n for op, n in counter.get_flop_counts()["Global"].items()}
    model.zero_grad()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        _step(model, x)
    path = tmp_path / f"{name}.json"
    prof.export_chrome_trace(str(path))
    return counted, tracekit.load(path)


def _tracekit_flops(trace, op_name):
    ops = trace.ops[trace.ops["name"] == f"aten::{op_name}"]
    total, costs = 0.0, []
    for dims, types, concrete in zip(ops["input_dims"], ops["input_types"], ops["concrete_inputs"]):
        cost = op_cost(f"aten::{op_name}", dims, types, concrete)
        assert isinstance(cost, Cost), (op_name, dims, cost)
        total += cost.flops
        costs.append((dims, cost))
    return total, costs


@pytest.mark.parametrize("name", list(MODELS))
def test_flops_equal_torch_for_every_op_torch_counts(name, tmp_path):
    counted, trace = _record(name, tmp_path)
    assert counted, "FlopCounterMode counted nothing"
    for op_name, torch_flops in counted.items():
        ours, costs = _tracekit_flops(trace, op_name)
        assert costs, f"the profiler recorded no aten::{op_name}"
        if op_name in ("addmm", "baddbmm"):
            # Intended: the bias add, M*N per call (batch*M*N for baddbmm), which torch ignores.
            bias_adds = sum(math.prod(d[1][:-1]) * d[2][-1] for d, _ in costs)
            assert ours == torch_flops + bias_adds, op_name
        elif op_name == "convolution_backward":
            # Intended: torch counts a grouped conv's weight gradient over all Cin channels.
            overcount = sum(_grouped_weight_grad_overcount(trace, d) for d, _ in costs)
            assert overcount > 0  # the model has a grouped conv, so the difference is exercised
            assert ours == torch_flops - overcount, op_name
        else:
            assert ours == torch_flops, op_name


def _grouped_weight_grad_overcount(trace, dims):
    """(groups - 1) x the weight-gradient FLOPs, for a convolution_backward call with groups > 1."""
    ops = trace.ops[trace.ops["name"] == "aten::convolution_backward"]
    row = next(i for i, d in zip(ops.index, ops["input_dims"]) if d is dims)
    concrete = ops.at[row, "concrete_inputs"]
    groups, mask = int(concrete[9]), concrete[10]
    if groups == 1 or "True" not in mask.split(",")[1]:
        return 0
    grad_out, w = dims[0], dims[2]
    return (groups - 1) * 2 * grad_out[0] * math.prod(w) * math.prod(grad_out[2:])


def test_the_models_exercise_the_families_that_matter(tmp_path):
    counted = {}
    for name in MODELS:
        counted.update(_record(name, tmp_path)[0])
    assert {"addmm", "mm", "convolution", "convolution_backward"} <= set(counted)


def test_attention_matches_torch_sdpa_count_with_its_intended_differences(tmp_path):
    _, trace = _record("transformer_block", tmp_path)
    fwd = trace.ops[trace.ops["name"] == "aten::_scaled_dot_product_flash_attention_for_cpu"]
    bwd = trace.ops[trace.ops["name"] == "aten::_scaled_dot_product_flash_attention_for_cpu_backward"]
    assert len(fwd) == 1 and len(bwd) == 1
    q, k, v = fwd["input_dims"].iat[0][:3]
    assert q == [2, 8, 16, 8] and k == [2, 2, 16, 8]  # GQA: 8 query heads over 2 KV heads
    expanded = [k[0], q[1], k[2], k[3]]  # what repeating KV heads would give torch's counter
    torch_fwd = flop_counter.sdpa_flop_count(q, expanded, expanded)
    torch_bwd = flop_counter.sdpa_backward_flop_count(q, q, expanded, expanded)
    ours_fwd = op_cost("aten::_scaled_dot_product_flash_attention_for_cpu", *fwd[["input_dims", "input_types", "concrete_inputs"]].iloc[0])
    ours_bwd = op_cost("aten::_scaled_dot_product_flash_attention_for_cpu_backward", *bwd[["input_dims", "input_types", "concrete_inputs"]].iloc[0])
    # Intended: square causal attention computes the S(S+1)/2 (query, key) pairs on and below
    # the diagonal; torch counts all S² of the score matrix.
    s = q[2]
    assert ours_fwd.flops == pytest.approx(torch_fwd * (s + 1) / (2 * s))
    assert ours_bwd.flops == pytest.approx(torch_bwd * (s + 1) / (2 * s))
    # Bytes follow the 2 KV heads actually stored, not the 8 the FLOPs are counted on.
    es = 4
    assert ours_fwd.bytes_read == (math.prod(q) + 2 * math.prod(k)) * es


@pytest.mark.parametrize("sq, sk", [(16, 16), (1, 40), (7, 20)])
def test_non_causal_attention_equals_torch_exactly(sq, sk):
    q, kv = [3, 4, sq, 32], [3, 4, sk, 32]
    dims = [q, kv, kv, [], [], [], []]
    types = ["c10::BFloat16"] * 3 + ["Scalar", "Scalar", "", "Scalar"]
    ours = op_cost("aten::_scaled_dot_product_flash_attention", dims, types, ["", "", "", "0.", "False", "False", ""])
    assert ours.flops == flop_counter.sdpa_flop_count(q, kv, kv)
    grad_dims = [q, q, kv, kv, q, [3, 4, sq], [], [], [], [], [], [], [], [], []]
    grad_types = ["c10::BFloat16"] * 5 + ["float"] + [""] * 9
    ours_bwd = op_cost("aten::_scaled_dot_product_flash_attention_backward", grad_dims, grad_types, [""] * 11 + ["False"] + [""] * 3)
    assert ours_bwd.flops == flop_counter.sdpa_backward_flop_count(q, q, kv, kv)
