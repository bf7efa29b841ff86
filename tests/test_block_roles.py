"""Blocks by role (attribution/roles.py): `norm` is normalisation work; residual adds,
modulations, gates and copies get block `elementwise` (or the FFN / attention their op tree
or tensors say).

fixtures/cpu_roles_dit.json.gz (fixtures/record_cpu_roles.py): a 2-layer DiT-like block,
hidden 128, batch 2 x 48 tokens, an HF-style RMSNorm written out (pow, mean, + eps, rsqrt,
x * rstd, weight * x), adaLN modulation `norm(x) * (1 + scale) + shift`, gates and residuals
`x + gate * y`; 2 profiled steps x 2 layers x 2 norms = 8 of each norm / modulation op. No
module frames, no ranges in the model: only the ops' names, shapes and tree say what is what.
Kernel times are the ops' CPU times, so the shares are checked against the kernels' own sums."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import tracekit
from conftest import shared

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures"


def _ops_view(a):
    """(per kernel: its op's chain of (name, dims text) up the tree, block, duration)."""
    ops = a.trace.ops
    names, dims, parent = ops["name"].astype(str).to_numpy(), ops["input_dims"].to_numpy(), ops["parent"].to_numpy()

    def chain(o):
        out = []
        while o >= 0:
            out.append((names[o], str(dims[o])))
            o = parent[o]
        return out

    k = a.kernels
    return [chain(o) for o in k["op"].to_numpy()], k["block"].astype(str).to_numpy(), k["duration_ns"].to_numpy()


def _block_time(a, block):
    b = a.blocks
    return int(b.loc[b["block"] == block, "gpu_time_ns"].sum())


@pytest.fixture(scope="module")
def dit():
    return tracekit.analyze(str(FIXTURES / "cpu_roles_dit.json.gz"))


# the RMSNorm's own ops, as (op name, input dims) of the op itself or one enclosing the kernel's op
RMS_NORM = {("aten::pow", "[[2, 48, 128], []]"), ("aten::mean", "[[2, 48, 128], [], [], []]"),
            ("aten::add", "[[2, 48, 1], [], []]"), ("aten::rsqrt", "[[2, 48, 1]]"),
            ("aten::mul", "[[2, 48, 128], [2, 48, 1]]"), ("aten::mul", "[[128], [2, 48, 128]]")}
# residual adds, modulation (scale, shift) and gates on the hidden state
ROLES = {("aten::add", "[[2, 48, 128], [2, 48, 128], []]"), ("aten::mul", "[[2, 48, 128], [2, 1, 128]]"),
         ("aten::add", "[[2, 48, 128], [2, 1, 128], []]"), ("aten::mul", "[[2, 1, 128], [2, 48, 128]]")}


def test_dit_rms_norm_is_norm_and_residual_modulation_gate_are_elementwise(dit):
    chains, blocks, durations = _ops_view(dit)
    in_norm = np.array([any(link in RMS_NORM for link in c) for c in chains])
    role = np.array([bool(c) and c[0] in ROLES for c in chains])
    assert in_norm.sum() >= 6 * 8 and role.sum() == 4 * 8  # every form recorded 8 times
    assert set(blocks[in_norm]) == {"norm"}
    assert set(blocks[role]) == {"elementwise"}
    # norm is exactly the RMSNorm's kernels: its time in the blocks table is their sum
    assert _block_time(dit, "norm") == int(durations[in_norm].sum())
    assert _block_time(dit, "elementwise") >= int(durations[role].sum()) > 0
    # the activation between the FFN's GEMMs keeps its block (its FFN width, 512)
    gelu = np.array([bool(c) and c[0][0] == "aten::gelu" for c in chains])
    assert gelu.sum() == 4 and set(blocks[gelu]) == {"ffn"}


def test_waste_forms_layer_norm_is_norm_and_its_residual_elementwise():
    """record_cpu_waste.py's dit_layout: `layer_norm(h) + layer_norm(h)`, then `h + residual`
    on [4, 1024, 256]: 4 adds per step, 2 steps. The layer_norm's kernels (its input's
    layout copy included: aten::contiguous inside aten::layer_norm) are the norm block."""
    a = tracekit.analyze(str(FIXTURES / "cpu_waste_forms.json.gz"))
    chains, blocks, durations = _ops_view(a)
    in_norm = np.array([any(name == "aten::layer_norm" for name, _ in c) for c in chains])
    add = np.array([bool(c) and c[0] == ("aten::add", "[[4, 1024, 256], [4, 1024, 256], []]") for c in chains])
    assert add.sum() == 8 and set(blocks[add]) == {"elementwise"}
    assert set(blocks[in_norm]) == {"norm"}
    assert _block_time(a, "norm") == int(durations[in_norm].sum())


def test_qwen15_eager_rms_norm_and_residual_adds():
    """Qwen1.5-0.5B HF inference (hidden 1024, batch 16 x 559): Qwen2RMSNorm written out in
    Python, 49 norms (2 per layer x 24 + the final one); 48 residual adds."""
    a = tracekit.analyze(shared("torch", "h100_qwen1.5-0.5b_hf_inference.json.gz"))
    chains, blocks, durations = _ops_view(a)
    forms = {("aten::pow", "[[16, 559, 1024], []]"), ("aten::mean", "[[16, 559, 1024], [], [], []]"),
             ("aten::add", "[[16, 559, 1], [], []]"), ("aten::rsqrt", "[[16, 559, 1]]"),
             ("aten::mul", "[[16, 559, 1024], [16, 559, 1]]"), ("aten::mul", "[[1024], [16, 559, 1024]]")}
    in_norm = np.array([any(link in forms for link in c) for c in chains])
    residual = np.array([bool(c) and c[0] == ("aten::add", "[[16, 559, 1024], [16, 559, 1024], []]") for c in chains])
    assert residual.sum() == 48 and set(blocks[residual]) == {"elementwise"}
    assert in_norm.sum() == 6 * 49 and set(blocks[in_norm]) == {"norm"}
    # the float32 casts around each norm (2 per norm, fp16 <-> fp32) are the norm's too
    cast = np.array([bool(c) and c[0][0] == "aten::copy_" and len(c) > 1 and c[1][0] == "aten::_to_copy"
                     and "[16, 559, 1024]" in c[0][1] for c in chains])
    assert cast.sum() == 2 * 49 and set(blocks[cast]) == {"norm"}
    has_op = a.kernels["op"].to_numpy() >= 0
    assert int(durations[has_op & (blocks == "norm")].sum()) == int(durations[in_norm | cast].sum())
    # kernels launched before the capture (no op) are norm only as identical kernels of those
    names = a.kernels["name"].astype(str).to_numpy()
    assert set(names[~has_op & (blocks == "norm")]) <= set(names[in_norm | cast])
    assert _block_time(a, "elementwise") >= int(durations[residual].sum())
