"""The parts of a step's blocks that run as kernels of their own, in launch order, with
what each reads (tracekit.model.placement puts them on their kernels): an MoE layer's
router, grouped gate/up and down GEMMs and combine; the fixed matrices of the attention
projections and of a dense FFN. The per-block totals are tracekit.model.blocks'."""

from __future__ import annotations

from tracekit.model.batch import StepBatch
from tracekit.model.blocks import Parallel, expected_experts, ffn_shapes, gdn_shapes, heads_per_rank
from tracekit.model.architecture import Architecture


MOE_PARTS = ("router", "gate_up", "down", "combine")


def moe_parts(arch: Architecture, batch: StepBatch, par: Parallel = Parallel()) -> tuple[int, dict[str, tuple]] | None:
    """Per MoE layer of a step: (FLOPs, bytes read, bytes written, output (rows, columns)) of each kernel an MoE FFN
    launches, in launch order: the router GEMM (E x hidden), the grouped gate/up GEMM (the
    active experts' gate and up matrices), the grouped down GEMM (their down matrices), and
    the combine that sums each token's k expert outputs (reads T·k rows, writes T rows).
    Returns (MoE layers, per-layer parts); None when the model has no MoE layer, or has
    shared experts (their GEMMs interleave with the routed ones)."""
    moe = [layer for layer in range(arch.layers) if arch.ffn_kind(layer) == "moe"]
    if not moe or arch.shared_experts:
        return None
    layer = moe[0]
    t, h, a = batch.tokens, arch.hidden, arch.act_bytes
    e, k = arch.experts, arch.top_k
    width = arch.expert_intermediate / (par.tp if par.ep == 1 else 1)
    active = expected_experts(e, k, t) / par.ep
    routed = t * k / par.ep
    fmt = arch.format("experts", layer)
    up_rows = 2 * width if arch.gated_ffn else width
    router = h * e * arch.embedding_weights.bytes_per_param + (e * a if arch.router_bias else 0.0)
    return len(moe), {
        "router": (2.0 * t * h * e, router + t * h * a, t * e * a, (t, e)),
        "gate_up": (2.0 * routed * up_rows * h, active * fmt.matrix_bytes(up_rows, h) + t * h * a, routed * up_rows * a,
                    (routed, up_rows)),
        "down": (2.0 * routed * width * h, active * fmt.matrix_bytes(h, width) + routed * width * a, routed * h * a, (routed, h)),
        "combine": (routed * h, routed * h * a, t * h * a, (t, h)),
    }


def projection_parts(arch: Architecture, batch: StepBatch, par: Parallel = Parallel()) -> dict[str, tuple[list[int], list[tuple]]]:
    """Per block whose GEMMs are a fixed list of matrices, in launch order: the layers that
    have it and, per layer, the (FLOPs, bytes read, bytes written, input bytes) of each
    matrix's GEMM, and its output (rows, columns) (its weights in their stored format, its input and output activations):
    `attention projections` (q with its output gate, k, v, o; MHA / GQA; a bias is not
    counted), `linear attention projections` (Gated DeltaNet: in_proj_qkvz, in_proj_ba,
    out_proj, or Qwen3.5's in_proj_qkv, _z, _b, _a, out_proj) and a dense `ffn` (gate, up,
    down, or up, down)."""
    t, h, a, tp = batch.tokens, arch.hidden, arch.act_bytes, par.tp
    out: dict[str, tuple[list[int], list[tuple]]] = {}
    attention = [layer for layer in range(arch.layers) if arch.mixer(layer) == "attention"]
    if attention and not arch.is_mla:
        hq, hkv = heads_per_rank(arch, tp)
        d = arch.head_dim
        q_rows = hq * d * (2 if arch.attn_output_gate else 1)
        fmt = arch.format("attention", attention[0])
        out["attention projections"] = (attention, [_gemm(fmt, n, k, t, a) for n, k in
                                                    ((q_rows, h), (hkv * d, h), (hkv * d, h), (h, hq * d))])
    linear = [layer for layer in range(arch.layers) if arch.mixer(layer) == "linear_attention"]
    if linear:
        fmt = arch.format("linear_attention", linear[0])
        out["linear attention projections"] = (linear, [_gemm(fmt, n, k, t, a) for n, k in gdn_shapes(arch, tp)])
    dense = [layer for layer in range(arch.layers) if arch.ffn_kind(layer) not in ("moe", "none")]
    if dense and not any(arch.ffn_kind(layer) == "moe" for layer in range(arch.layers)):  # "ffn" names MoE layers too
        width = arch.intermediate / tp
        fmt = arch.format("ffn", dense[0])
        out["ffn"] = (dense, [_gemm(fmt, n, k, t, a) for n, k in ffn_shapes(arch, width)])
    return out


def _gemm(fmt, n: float, k: float, t: float, a: float) -> tuple[float, float, float, float, tuple[float, float]]:
    """(FLOPs, bytes read, bytes written, input bytes, output (rows, columns)) of one [n, k]
    matrix's GEMM over t tokens."""
    return 2.0 * t * n * k, fmt.matrix_bytes(n, k) + t * k * a, t * n * a, t * k * a, (t, n)
