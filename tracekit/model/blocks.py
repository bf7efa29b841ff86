"""Per step and per block of the model: FLOPs and the minimum bytes one GPU (one rank) moves.

Rules (the ones LLM serving simulators use, counted per rank):
- Weights are read once per step, whatever the batch; tensor parallelism splits the
  projections (KV heads are replicated when there are fewer of them than ranks).
- MoE: a step reads only the experts its tokens activate. Expected distinct experts for T
  tokens each choosing k of E: E·(1 - (1 - k/E)^T). That is exact for uniform, independent
  routing; real routers are skewed, which activates fewer experts, so it is an upper bound
  on expert bytes (it tends to E within a few dozen tokens, where the bound is tight).
- Attention core: 2·(d_qk + d_v) FLOPs per (query, key) pair per query head, pairs exact
  from the batch's sq/sk sums; the KV cache is read once per attention layer (every attended
  key once), capped at the window on sliding-window layers.
- Recurrent mixers (Gated DeltaNet, Mamba): each request's fixed state (convolution state +
  SSM / delta-rule state) is read and written once per layer per step, whatever its tokens;
  no KV cache grows (`state_bytes` = read + written).
- Weights: each matrix in its stored format, scales included (tracekit.model.quant).
- Activations are read and written once per block (input in, output out).
- Tensor parallelism: two all-reduces of T·hidden per layer (after o_proj and after the
  FFN), counted as ring bus bytes 2·(tp-1)/tp of the message.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.model.batch import StepBatch
from tracekit.model.architecture import Architecture

# model block -> (attribution block whose kernels it is spread over, kernel family)
BLOCKS: dict[str, tuple[str, str]] = {
    "attention projections": ("attention", "gemm"),
    "attention core": ("attention", "attention"),
    "attention elementwise": ("attention", "vector"),  # rotary embedding, KV-cache write, output gate
    "linear attention projections": ("attention", "gemm"),  # Gated DeltaNet in/out projections
    "linear attention core": ("attention", "vector"),  # causal conv + delta-rule recurrence on the fixed state
    "mamba projections": ("attention", "gemm"),
    "mamba core": ("attention", "vector"),  # causal conv + selective scan on the fixed state
    "ffn": ("ffn", "gemm"),  # dense FFN, or MoE router + routed and shared experts
    "ffn elementwise": ("ffn", "vector"),  # activation (silu · up), routing
    "norm": ("norm", "norm"),  # RMSNorm with its fused residual add
    "embedding": ("embedding", "vector"),
    "lm head": ("lm_head", "gemm"),
    "collective": ("collective", "collective"),
}
# Blocks attribution names specifically enough that any kernel in them is theirs, whatever
# its class (a fused add + RMSNorm kernel whose name the classifier cannot read is still a norm).
WHOLE_BLOCKS = frozenset({"norm", "embedding", "collective"})
# kernel classes (tracekit.costs.classify) each family's model cost may be spread over
FAMILIES: dict[str, frozenset[str]] = {
    "gemm": frozenset({"gemm"}), "attention": frozenset({"attention"}), "norm": frozenset({"norm"}),
    "vector": frozenset({"elementwise", "copy", "other", "triton", "routing"}), "collective": frozenset({"collective"}),
}
COLUMNS = ["block", "layer", "flops", "bytes_read", "bytes_written", "weight_bytes", "kv_bytes", "state_bytes", "kind", "dtype"]


@dataclass(frozen=True)
class Parallel:
    tp: int = 1
    ep: int = 1
    source: str = "default (one GPU)"


def expected_experts(experts: int, top_k: int, tokens: float) -> float:
    """Expected distinct experts activated by `tokens` tokens each choosing top_k of `experts`."""
    if tokens <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


@dataclass
class StepCosts:
    """The COLUMNS of one step as numpy arrays, one entry per (block, layer): a step's
    costs are built and read many times per trace, and plain arrays keep that cheap."""

    columns: dict[str, np.ndarray]

    def __getitem__(self, column: str) -> np.ndarray:
        return self.columns[column]

    def __len__(self) -> int:
        return len(self.columns["block"])

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.columns, columns=COLUMNS)

    def totals(self) -> dict[str, dict]:
        """Per model block, in the model's order: summed FLOPs and bytes (NaN when any
        layer's is unknown), weight and KV bytes, and the block's kind and dtype."""
        names, first, inverse = np.unique(self["block"], return_index=True, return_inverse=True)
        sums = {c: np.bincount(inverse, weights=self[c], minlength=len(names))  # NaN stays NaN
                for c in ("flops", "bytes_read", "bytes_written", "weight_bytes", "kv_bytes", "state_bytes")}
        out = {}
        for i in np.argsort(first):
            out[str(names[i])] = {**{c: float(v[i]) for c, v in sums.items()}, "kind": str(self["kind"][first[i]]),
                                  "dtype": str(self["dtype"][first[i]])}
        return out


def step_blocks(arch: Architecture, batch: StepBatch, par: Parallel = Parallel()) -> StepCosts:
    """One entry per (block, layer) for the step on one rank (layer -1: once per step).
    KV-dependent figures are NaN when the batch's KV lengths are unknown."""
    rows: list[dict] = []
    for layer in range(arch.layers):
        rows += _layer(arch, batch, par, layer)
    rows += _once(arch, batch, par)
    text = ("block", "kind", "dtype")
    return StepCosts({c: np.array([r[c] for r in rows], dtype=object if c in text else np.int64 if c == "layer" else np.float64)
                      for c in COLUMNS})


def _row(block, layer, flops, read, written, kind, dtype, weights=0.0, kv=0.0, state=0.0) -> dict:
    return {"block": block, "layer": layer, "flops": float(flops), "bytes_read": float(read), "bytes_written": float(written),
            "weight_bytes": float(weights), "kv_bytes": float(kv), "state_bytes": float(state), "kind": kind, "dtype": dtype}


def heads_per_rank(arch: Architecture, tp: int) -> tuple[float, float]:
    return arch.heads / tp, max(arch.kv_heads / tp, 1.0)


def _layer(arch: Architecture, batch: StepBatch, par: Parallel, layer: int) -> list[dict]:
    t, a, h, tp = batch.tokens, arch.act_bytes, arch.hidden, par.tp
    mixer, ffn = arch.mixer(layer), arch.ffn_kind(layer)
    rows: list[dict] = []
    if mixer in ("attention", "attention+mamba2"):
        rows += _attention(arch, batch, tp, layer)
    if mixer == "linear_attention":
        rows += _gated_deltanet(arch, batch, tp, layer)
    if mixer in ("mamba2", "mamba", "attention+mamba2"):
        rows += _mamba(arch, batch, tp, layer)
    if ffn != "none":
        compute = arch.format("experts" if ffn == "moe" else "ffn", layer).compute_dtype or arch.act_dtype
        rows += _ffn(arch, t, par, layer, compute)
    # one RMSNorm with its fused residual add per sub-layer: read x and residual, write both; weights once
    n = (mixer != "none") + (ffn != "none")
    norm = _row("norm", layer, n * 4 * t * h, n * (2 * t * h * a + h * a), n * 2 * t * h * a, "vector", arch.act_dtype, weights=n * h * a)
    if arch.qk_norm and mixer in ("attention", "attention+mamba2"):  # per-head RMSNorm of queries and keys
        hq, hkv = heads_per_rank(arch, tp)
        qk = t * (hq + hkv) * arch.head_dim
        norm["flops"] += 4 * qk
        norm["bytes_read"] += qk * a + 2 * arch.head_dim * a
        norm["bytes_written"] += qk * a
        norm["weight_bytes"] += 2 * arch.head_dim * a
    rows.append(norm)
    if tp > 1:
        bus = 2 * (tp - 1) / tp * t * h * a
        rows.append(_row("collective", layer, n * t * h, n * bus, 0.0, "comm", arch.act_dtype))
    return rows


def _attention(arch: Architecture, batch: StepBatch, tp: int, layer: int) -> list[dict]:
    t, a = batch.tokens, arch.act_bytes
    rows = [_projections(arch, t, tp, layer), _core(arch, batch, tp, layer)]
    hq, hkv = heads_per_rank(arch, tp)
    d = arch.head_dim
    # rotary: read and write q and k; KV-cache write: the new tokens' keys and values (in the cache's dtype)
    kv_width = (arch.kv_lora_rank + arch.qk_rope_dim) if arch.is_mla else hkv * 2 * d
    rope = t * (hq + hkv) * d * a
    kv_write = t * kv_width * arch.kv_bytes
    flops, read, written = 3 * t * (hq + hkv) * d, rope + t * kv_width * a, rope + kv_write
    if arch.attn_output_gate:  # sigmoid(gate) * attention output: read both, write the product
        flops += 5 * t * hq * d
        read += 2 * t * hq * d * a
        written += t * hq * d * a
    rows.append(_row("attention elementwise", layer, flops, read, written, "vector", arch.act_dtype))
    return rows


def _projections(arch: Architecture, t: int, tp: int, layer: int) -> dict:
    hq, hkv = heads_per_rank(arch, tp)
    h, d, a = arch.hidden, arch.head_dim, arch.act_bytes
    if arch.is_mla:
        qk = arch.qk_nope_dim + arch.qk_rope_dim
        q = [(hq * qk, arch.q_lora_rank), (arch.q_lora_rank, h)] if arch.q_lora_rank else [(hq * qk, h)]
        shapes = q + [(arch.kv_lora_rank + arch.qk_rope_dim, h), (hq * (arch.qk_nope_dim + arch.v_head_dim), arch.kv_lora_rank),
                      (h, hq * arch.v_head_dim)]
        outs = hq * qk + arch.kv_lora_rank + arch.qk_rope_dim
        o_in = hq * arch.v_head_dim
    else:
        q_rows = hq * d * (2 if arch.attn_output_gate else 1)  # the output gate comes out of the query projection
        shapes = [(q_rows, h), (hkv * d, h), (hkv * d, h), (h, hq * d)]
        outs = q_rows + 2 * hkv * d
        o_in = hq * d
    params = sum(n * k for n, k in shapes)
    w = arch.format("attention", layer)
    weight_bytes = w.matrices_bytes(shapes) + (outs * a if arch.attention_bias else 0.0)
    read = weight_bytes + t * h * a + t * o_in * a
    written = t * outs * a + t * h * a
    return _row("attention projections", layer, 2 * t * params, read, written, "matrix", w.compute_dtype or arch.act_dtype, weights=weight_bytes)


def _core(arch: Architecture, batch: StepBatch, tp: int, layer: int) -> dict:
    hq, hkv = heads_per_rank(arch, tp)
    a, window = arch.act_bytes, arch.windows[layer] if arch.windows else None
    if arch.is_mla:  # the compressed latent KV and the rope key: one "head" per token
        d_qk, d_v, per_token = arch.qk_nope_dim + arch.qk_rope_dim, arch.v_head_dim, (arch.kv_lora_rank + arch.qk_rope_dim) * arch.kv_bytes
    else:
        d_qk = d_v = arch.head_dim
        per_token = hkv * 2 * arch.head_dim * arch.kv_bytes
    pairs, keys = batch.pairs(window), batch.kv_read(window)
    nan = float("nan")
    flops = 2.0 * pairs * hq * (d_qk + d_v) if pairs is not None else nan
    kv = keys * per_token if keys is not None else nan
    t = batch.tokens
    return _row("attention core", layer, flops, kv + t * hq * d_qk * a, t * hq * d_v * a, "matrix", arch.act_dtype, kv=kv)


def _recurrent_core(arch: Architecture, batch: StepBatch, tp: int, layer: int, block: str, small: float, flops: float,
                    read: float, written: float) -> dict:
    """A fixed state per request, read and written once per step (whatever its tokens)."""
    state = batch.requests * arch.state_bytes_per_request(layer) / tp
    return _row(block, layer, flops, read + small + state, written + state, "matrix", arch.act_dtype, weights=small, state=2 * state)


def gdn_shapes(arch: Architecture, tp: int) -> list[tuple[float, float]]:
    """The Gated DeltaNet projection matrices [rows, inputs] per rank, in launch order."""
    g, h = arch.linear, arch.hidden
    kd, vd, nv = g.key_heads * g.key_dim / tp, g.heads * g.head_dim / tp, g.heads / tp
    if arch.model_type.startswith("qwen3_next"):  # fused in_proj_qkvz and in_proj_ba
        return [(2 * kd + 2 * vd, h), (2 * nv, h), (h, vd)]
    return [(2 * kd + vd, h), (vd, h), (nv, h), (nv, h), (h, vd)]  # Qwen3.5: in_proj_qkv, _z, _b, _a, out_proj


def _gated_deltanet(arch: Architecture, batch: StepBatch, tp: int, layer: int) -> list[dict]:
    """Qwen3-Next / Qwen3.5 linear attention: projections to q, k, v, the output gate z and the
    per-head b, a; a causal conv over q, k, v; the delta-rule recurrence on a per-head
    [key_dim x value_dim] state; a gated RMSNorm; out_proj."""
    g, t, h, a = arch.linear, batch.tokens, arch.hidden, arch.act_bytes
    kd, vd, nv = g.key_heads * g.key_dim / tp, g.heads * g.head_dim / tp, g.heads / tp
    shapes = gdn_shapes(arch, tp)
    w = arch.format("linear_attention", layer)
    wb = w.matrices_bytes(shapes)
    params = sum(n * k for n, k in shapes)
    outs = 2 * kd + 2 * vd + 2 * nv
    proj = _row("linear attention projections", layer, 2 * t * params, wb + t * h * a + t * vd * a, t * outs * a + t * h * a,
                "matrix", w.compute_dtype or arch.act_dtype, weights=wb)
    conv_dim = 2 * kd + vd
    small = conv_dim * g.conv_kernel * a + 2 * nv * 4 + g.head_dim * a  # conv1d weight, A_log and dt_bias (fp32), norm weight
    # per token: conv over conv_dim; per value head: decay, k·S, k ⊗ delta, q·S on the [key_dim x value_dim] state (~7 FLOPs per entry)
    flops = t * (2 * conv_dim * g.conv_kernel + 7 * nv * g.key_dim * g.head_dim + 6 * vd)
    core = _recurrent_core(arch, batch, tp, layer, "linear attention core", small, flops,
                           read=t * (conv_dim + 2 * nv + vd) * a, written=t * vd * a)
    return [proj, core]


def _mamba(arch: Architecture, batch: StepBatch, tp: int, layer: int) -> list[dict]:
    """Mamba-2 (in_proj to z, x, B, C, dt; conv; SSD scan on a [head_dim x state] state per
    head; gated norm; out_proj) or Mamba-1 (in_proj, conv, x_proj, dt_proj, selective scan)."""
    m, t, h, a = arch.ssm, batch.tokens, arch.hidden, arch.act_bytes
    inner = m.inner / tp
    if m.dt_rank:  # Mamba-1 (Jamba)
        shapes = [(2 * inner, h), (m.dt_rank + 2 * m.state, inner), (inner, m.dt_rank), (h, inner)]
        conv_dim = inner
        small = conv_dim * m.conv_kernel * a + inner * m.state * 4 + inner * 4  # conv, A_log [inner, N] and D (fp32)
    else:
        nh = m.heads / tp
        shapes = [(2 * inner + 2 * m.groups * m.state + nh, h), (h, inner)]
        conv_dim = inner + 2 * m.groups * m.state
        small = conv_dim * m.conv_kernel * a + 3 * nh * 4 + inner * a  # conv, A_log / D / dt_bias (fp32), norm weight
    w = arch.format("mamba", layer)
    wb = w.matrices_bytes(shapes)
    params = sum(n * k for n, k in shapes)
    proj = _row("mamba projections", layer, 2 * t * params, wb + t * h * a + t * inner * a, t * (shapes[0][0] + h) * a,
                "matrix", w.compute_dtype or arch.act_dtype, weights=wb)
    # per token: conv, and per state entry decay, B·x and C·h (~6 FLOPs)
    flops = t * (2 * conv_dim * m.conv_kernel + 6 * inner * m.state + 6 * inner)
    core = _recurrent_core(arch, batch, tp, layer, "mamba core", small, flops, read=t * (conv_dim + inner) * a, written=t * inner * a)
    return [proj, core]


def ffn_shapes(arch: Architecture, width: float) -> list[tuple[float, float]]:
    h = arch.hidden
    return [(width, h), (width, h), (h, width)] if arch.gated_ffn else [(width, h), (h, width)]


def _ffn(arch: Architecture, t: int, par: Parallel, layer: int, compute: str) -> list[dict]:
    h, a, tp = arch.hidden, arch.act_bytes, par.tp
    mats = 3 if arch.gated_ffn else 2
    if arch.ffn_kind(layer) != "moe":
        width = arch.intermediate / tp
        params = mats * h * width
        wb = arch.format("ffn", layer).matrices_bytes(ffn_shapes(arch, width))
        act = _activation(arch, "ffn elementwise", layer, t * width, mats)
        return [_row("ffn", layer, 2 * t * params, wb + t * h * a + t * width * a, t * (mats - 1) * width * a + t * h * a, "matrix", compute, weights=wb), act]
    e, k = arch.experts, arch.top_k
    # Experts are split over EP ranks when EP is used, else each expert is sharded over TP.
    shard = tp if par.ep == 1 else 1
    local = e / par.ep
    width = arch.expert_intermediate / shard
    per_expert = mats * h * width
    active = expected_experts(e, k, t) * local / e
    expert_bytes = active * arch.format("experts", layer).matrices_bytes(ffn_shapes(arch, width))
    routed = t * k / par.ep  # token-expert assignments this rank computes
    router_params = h * e
    router_bytes = router_params * arch.embedding_weights.bytes_per_param + (e * a if arch.router_bias else 0.0)
    flops = 2 * routed * per_expert + 2 * t * router_params
    read = expert_bytes + router_bytes + t * h * a + routed * width * a
    written = t * e * a + routed * (mats - 1) * width * a + t * h * a
    weights = expert_bytes + router_bytes
    if arch.shared_experts:
        s_width = arch.shared_experts * arch.shared_intermediate / tp
        s_params = mats * h * s_width
        s_bytes = arch.format("shared_experts", layer).matrices_bytes(ffn_shapes(arch, s_width))
        flops += 2 * t * s_params
        read += s_bytes + t * s_width * a
        written += t * (mats - 1) * s_width * a
        weights += s_bytes
    act = _activation(arch, "ffn elementwise", layer, routed * width, mats)
    # routing: softmax / top-k over the router logits
    act["bytes_read"] += t * e * a
    act["flops"] += 2 * t * e
    return [_row("ffn", layer, flops, read, written, "matrix", compute, weights=weights), act]


def _activation(arch: Architecture, block: str, layer: int, elements: float, mats: int) -> dict:
    """silu(gate) · up (gated) or the activation alone: read the inputs, write the product."""
    a = arch.act_bytes
    reads = 2 if mats == 3 else 1
    return _row(block, layer, 4 * elements, reads * elements * a, elements * a, "vector", arch.act_dtype)


def _once(arch: Architecture, batch: StepBatch, par: Parallel) -> list[dict]:
    t, h, a, tp, v = batch.tokens, arch.hidden, arch.act_bytes, par.tp, arch.vocab
    e = arch.embedding_weights.bytes_per_param
    rows = [
        # the embedding gathers T rows of the table (ids in, rows out); the table is not read whole
        _row("embedding", -1, 0.0, t * h * e + t * 8, t * h * a, "vector", arch.act_dtype, weights=t * h * e),
        # the final norm
        _row("norm", -1, 4 * t * h, t * h * a + h * a, t * h * a, "vector", arch.act_dtype, weights=h * a),
    ]
    n = batch.logit_tokens if batch.logit_tokens is not None else batch.requests
    head = v * h / tp * e  # read once even when tied to the embedding: a GEMM reads it all
    rows.append(_row("lm head", -1, 2 * n * h * v / tp, head + n * h * a, n * v / tp * a, "matrix", arch.act_dtype, weights=head))
    if tp > 1:
        # vocab-parallel embedding all-reduce and the logits all-gather
        msg = t * h * a
        rows.append(_row("collective", -1, t * h, 2 * (tp - 1) / tp * msg + (tp - 1) / tp * n * v * a, 0.0, "comm", arch.act_dtype))
    return rows

