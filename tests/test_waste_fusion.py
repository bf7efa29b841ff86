"""Chains of small elementwise kernels a fusion would remove (issue 38, analysis/waste_fusion), on
the traces recorded for it (fixtures/record_cpu_fusion.py: one kernel per op a GPU runs as one,
the op tree and shapes as torch recorded them) and on a compiled GPU trace. Every figure is
derived here from the recorded shapes (fp32, 4 bytes an element) and the formula in the module's
docstring: moved = each kernel's reads + writes; needed = the first kernel's reads + each later
kernel's reads less the tensor its predecessor handed it + the last kernel's writes, + the
writes of a join: an intermediate that reads a second large tensor from outside after the chain
read one; a read of the size a cast in the chain wrote is that cast's output again (not counted)."""

from __future__ import annotations

import numpy as np
import pytest

import tracekit
from conftest import PROJECT_FIXTURES

H100 = PROJECT_FIXTURES / "gpu" / "h100"
B, S, H = 2, 64, 128
U = B * S * H * 4  # bytes of a [2, 64, 128] activation
G = B * S * 4 * H * 4  # bytes of the MLP's [2, 64, 512] activation
R = B * S * 4  # bytes of RMSNorm's [2, 64, 1] row statistics
W = H * 4  # bytes of the RMSNorm weight [128]
V = B * H * 4  # bytes of an adaLN shift / scale / gate [2, 1, 128]
HS, HH = 256, 1024  # hf_rmsnorm: x [2, 256, 1024] in bf16
XB = B * HS * HH * 2  # bytes of x in bf16 (1 MiB)
XF = B * HS * HH * 4  # bytes of its fp32 copy
RH = B * HS * 4  # bytes of its fp32 row statistics [2, 256, 1]
WH = HH * 2  # bytes of the bf16 norm weight [1024]

# per step, in launch order within each range: (range, first kernel, last kernel + 1, ops, moved, needed)
CHAINS = [
    # normal_, addmm (c_fc), NewGELU: mul(x, .5) pow mul add(x, .) mul tanh add(., 1) mul, addmm, add, ...
    # moved: 1+1 reads per unary op, 2 for add / the last mul, 1 write each: 10 G read + 8 G written;
    # needed: x (G) + the output (G) + add's x (G) + add's sum (an intermediate that reads G from
    # outside: counted as an output, G) + the last mul's 0.5x (G)
    ("gpt2_mlp", 2, 10, ["mul", "pow", "mul", "add", "mul", "tanh", "add", "mul"], 18 * G, 5 * G),
    ("gpt2_mlp", 13, 21, ["mul", "pow", "mul", "add", "mul", "tanh", "add", "mul"], 18 * G, 5 * G),
    # normal_, pow, mean(-1), add(eps), rsqrt, mul(x, r), mul(., w), addmm, ... (x read twice:
    # counted twice; mul(x, r) reads x from outside: its output counted too)
    ("rmsnorm", 1, 7, ["pow", "mean", "add", "rsqrt", "mul", "mul"],
     2 * U + (U + R) + 2 * R + 2 * R + (U + R + U) + (U + W + U), U + U + (U + U) + W),
    ("rmsnorm", 8, 14, ["pow", "mean", "add", "rsqrt", "mul", "mul"],
     2 * U + (U + R) + 2 * R + 2 * R + (U + R + U) + (U + W + U), U + U + (U + U) + W),
    # normal_ x2, layer_norm, add(scale, 1) mul(ln, .) add(., shift), addmm,
    # mul(gate, .) add(x, .) layer_norm, add(scale, 1) mul add, addmm, mul, add (two: no chain).
    # The modulate needs scale (V) + ln(x) (U) + shift (V) read, h (U) written: mul(ln, .) reads
    # the chain's first large input, it merges nothing (its product is no output). The gate chain:
    # mul(gate, h) reads h, then add(x, .) reads x, a second stream: its sum (the residual) is an output
    ("adaln", 3, 6, ["add", "mul", "add"], 2 * V + (U + V + U) + (U + V + U), V + U + U + V),
    ("adaln", 7, 10, ["mul", "add", "native_layer_norm"], (V + U + U) + 3 * U + 2 * U, (V + U) + U + (U + U) + 0),
    ("adaln", 10, 13, ["add", "mul", "add"], 2 * V + (U + V + U) + (U + V + U), V + U + U + V),
    # normal_, then per layer HF's RMSNorm: cast x to fp32, pow, mean(-1), add(eps), rsqrt, mul(h, r),
    # cast to bf16, mul(w, .); then the f32 weight's cast and the mm (not links).
    # moved: (XB + XF) + 2 XF + (XF + RH) + 2 RH + 2 RH + (XF + RH + XF) + (XF + XB) + (WH + XB + XB);
    # needed, as a fused RMSNorm: x (XB) + w (WH) read, the output (XB) written; mul reads h again,
    # the fp32 tensor the first cast wrote: inside the fused kernel
    ("hf_rmsnorm", 1, 9, ["copy_", "pow", "mean", "add", "rsqrt", "mul", "copy_", "mul"],
     4 * XB + 7 * XF + 6 * RH + WH, XB + WH + XB),
    ("hf_rmsnorm", 11, 19, ["copy_", "pow", "mean", "add", "rsqrt", "mul", "copy_", "mul"],
     4 * XB + 7 * XF + 6 * RH + WH, XB + WH + XB),
]


def _row(a):
    return {c["cause"]: c for c in a.findings.causes}.get("waste_unfused_elementwise")


def _by_range(a, step: int) -> dict[str, np.ndarray]:
    """Per user range: the kernels of `step`, in launch order."""
    k, t = a.kernels, a.trace
    names = t.ranges["name"].astype(str).to_numpy()
    where = k["range"].to_numpy()
    order = np.argsort(k["start"].to_numpy(), kind="stable")
    mine = order[(k["step"].to_numpy()[order] == step) & (where[order] >= 0)]
    out: dict[str, list] = {}
    for i in mine:
        out.setdefault(names[where[i]], []).append(int(i))
    return {name: np.array(rows) for name, rows in out.items()}


@pytest.fixture(scope="module")
def eager():
    return tracekit.analyze(PROJECT_FIXTURES / "cpu_fusion_eager.json.gz", workers=1)


def test_the_written_out_chains_are_one_row_with_their_kernels_and_bytes(eager):
    r = _row(eager)
    assert r is not None and "torch.compile" in r["fix"]
    k = eager.kernels
    steps = sorted(int(s) for s in np.unique(k["step"].to_numpy()) if s >= 0)
    assert len(steps) == 2
    ops, read, written = k["op_name"].astype(str).to_numpy(), k["bytes_read"].to_numpy(), k["bytes_written"].to_numpy()
    claimed, moved, needed, saved, best = 0, 0.0, 0.0, 0.0, (0.0, [])
    for step in steps:
        ranges = _by_range(eager, step)
        for name, first, end, chain, m, n in CHAINS:
            rows = ranges[name][first:end]
            assert [o.removeprefix("aten::") for o in ops[rows]] == chain, (name, first)
            # the costs' bytes are the shapes' bytes
            assert read[rows].sum() + written[rows].sum() == m, (name, first)
            claimed += len(rows)
            moved, needed = moved + m, needed + n
            chain_saved = k["exclusive_ns"].to_numpy()[rows].sum() * (1 - n / m)
            saved += chain_saved
            best = max(best, (chain_saved, [f"aten::{o}" for o in chain]))
    e = r["evidence"]
    assert e["kernels"] == claimed == 2 * (8 + 8 + 6 + 6 + 3 + 3 + 3 + 8 + 8)
    assert e["chains"] == 18 and e["per_step"] == 9 and e["kernels_per_chain"] == [3, 8]
    assert e["bytes_moved"] == moved == 98_263_040
    assert e["bytes_needed"] == needed == 15_749_120
    assert e["bytes_needed"] <= e["bytes_moved"]
    # the GELU chain: 18 passes over [2, 64, 512] where a fused kernel needs 5 (2 without the
    # conservative counting of x's re-reads); the row names the chain that saves the most time
    assert e["top_chain"] == best[1]
    # its time: each chain's time x (1 - needed / moved), a share of the denominator
    assert r["time_ns"] == pytest.approx(saved)
    assert r["share"] == pytest.approx(saved / eager.findings.denominator_ns)
    assert max(c["cumulative_share"] or 0 for c in eager.findings.causes) <= 1.0


def test_the_gemms_and_the_lone_gate_residual_pair_are_not_claimed(eager):
    """The addmm between chains breaks them (a GEMM, fused epilogue or not, is matrix work);
    the last DiT block's gate and residual add are two kernels: below the chain length."""
    k = eager.kernels
    for step in sorted(int(s) for s in np.unique(k["step"].to_numpy()) if s >= 0):
        ranges = _by_range(eager, step)
        names = k["op_name"].astype(str).to_numpy()
        claimed = np.zeros(len(k), dtype=bool)
        for name, first, end, *_ in CHAINS:
            claimed[ranges[name][first:end]] = True
        unclaimed = [names[i] for rows in ranges.values() for i in rows if not claimed[i]]
        assert sorted(unclaimed) == sorted(["aten::normal_"] * 5 + ["aten::addmm"] * 8 + ["aten::add"] * 3
                                           + ["aten::native_layer_norm", "aten::mul"] + ["aten::copy_", "aten::mm"] * 2)


def test_hf_rmsnorm_is_one_chain_with_its_casts_and_the_weight_cast_stays_a_cast(eager):
    """HF's RMSNorm on bf16 x: its two activation casts (2 MiB, repeated: the casts row would
    count them) are links of the norm's chain, whose fix is the fusion; the f32 weight [1024, 1024]
    cast each step is the casts row's, and its sentence names a weight of 1024 x 1024 x 4 bytes."""
    causes = {c["cause"]: c for c in eager.findings.causes}
    cast = causes["waste_copies_cast"]
    k = eager.kernels
    names = k["op_name"].astype(str).to_numpy()
    per_step = []
    for step in sorted(int(s) for s in np.unique(k["step"].to_numpy()) if s >= 0):
        rows = _by_range(eager, step)["hf_rmsnorm"]
        per_step.append([names[i] for i in rows[[9, 19]]])
    assert per_step == [["aten::copy_", "aten::copy_"]] * 2
    e = cast["evidence"]
    # 2 steps x 2 layers; copy_kind's bytes: the wider dtype's (fp32) 1024 x 1024 x 4
    assert e["kernels"] == 4 and e["per_step"] == 2
    assert e["tensors"] == [{"shape": [1024, 1024], "bytes": 1024 * 1024 * 4, "weight": True, "per_step": 2.0,
                             "time_ns": e["tensors"][0]["time_ns"]}]
    assert cast["what"].endswith("2 per step of a 4.2 MB weight [1024, 1024]")


def test_the_same_blocks_with_fused_ops_have_no_row():
    """F.gelu(approximate='tanh'), F.rms_norm and addcmul: one kernel where the eager code had a
    chain; what is left between two GEMMs is at most two kernels."""
    a = tracekit.analyze(PROJECT_FIXTURES / "cpu_fusion_fused.json.gz", workers=1)
    assert _row(a) is None
    assert {"aten::gelu", "aten::_fused_rms_norm", "aten::addcmul"} <= set(a.kernels["op_name"].astype(str))


def test_a_compiled_decode_has_no_chain_to_fuse():
    """torch.compile'd decode (fixtures/gpu/h100): Inductor's kernels are fused already (costed
    from their arguments); the rows before it keep their kernels."""
    a = tracekit.analyze(H100 / "h10080gbhbm3_llama3-8b_8layers_compiled_decode_bs16.json.gz", workers=1)
    assert _row(a) is None
    assert a.findings.causes[0]["cause"] == "waste_copies_rewrite"


def test_a_vocabulary_argmax_is_no_link_but_a_hidden_mean_is():
    """A row reduction is a link over a hidden dimension (RMSNorm's mean(-1) over 128 here), not
    over a 128,256-token vocabulary (generate's argmax: a reduction of its own)."""
    from tracekit.analysis.waste_fusion import link_inputs
    from tracekit.costs.inputs import OpInputs

    mean = OpInputs([[2, 64, 128], [], [], []], ["float", "ScalarList", "Scalar", ""], ["", "[-1]", "True", ""])
    assert link_inputs(mean, 2 * 64 * 4) == [(U, U)]
    argmax = OpInputs([[1, 128256], [], []], ["c10::BFloat16", "Scalar", "Scalar"], ["", "-1", "False"])
    assert link_inputs(argmax, 8) is None
    # a batch norm's [C] parameters do not broadcast against [N, C, H, W]: not elementwise
    bn = OpInputs([[32, 256, 14, 14], [256], [256]], ["float", "float", "float"], ["", "", ""])
    assert link_inputs(bn, 32 * 256 * 14 * 14 * 4) is None


def test_streaming_dit_adaln_modulate_gate_and_residual_are_the_chains():
    """Wan-like DiT (h200 streaming video, bf16, x [1, 4680, 1536]): per modulate
    add(scale, 1) [1, 1, 1536] -> mul(x, .) -> add(., shift), and gate -> residual add ->
    the next norm: mul(gate, h) -> add(x, .) -> native_layer_norm (weight and bias [1536])."""
    from conftest import shared

    a = tracekit.analyze(shared("torch", "h200_streaming_video_dit1.3b_480p_chunk3_steps2.json.gz"), workers=1)
    r = _row(a)
    x, v = 4680 * 1536 * 2, 1536 * 2
    k, ops = a.kernels, a.trace.ops
    op = k["op"].to_numpy()
    in_steps = (k["step"].to_numpy() >= 0) & (op >= 0)
    names, dims = ops["name"].astype(str).to_numpy(), ops["input_dims"].to_numpy()
    modulates = sum(1 for o in op[in_steps] if names[o] == "aten::add" and dims[o] == [[1, 1, 1536], [], []])
    norms = sum(1 for o in op[in_steps] if names[o] == "aten::native_layer_norm")
    e = r["evidence"]
    assert modulates == 900 and e["chains"] == 900 + 450 and e["kernels_per_chain"] == [3, 3]
    assert norms > 450  # the first norm of each pass follows a GEMM: not in a chain
    # moved: modulate 2v + 2 (x + v + x); gate/residual/norm (v + 2x) + 3x + (2x + 2v)
    assert e["bytes_moved"] == 900 * (4 * x + 4 * v) + 450 * (7 * x + 3 * v)
    # needed: modulate scale v + x (mul's ln(x): the chain's first large input, no join) + shift v
    # + h x written = 2x + 2v (a fused modulate); gate/residual/norm (gate v + h x) + x (the
    # residual: a second stream) + its sum x (the residual stream, a join's output) + the norm's
    # weight and bias 2v + its output x
    assert e["bytes_needed"] == 900 * (2 * x + 2 * v) + 450 * (4 * x + 3 * v) == 51_766_732_800
    assert 0 < r["time_ns"] < e["chain_time_ns"] and r["cumulative_share"] <= 1.0
