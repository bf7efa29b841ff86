"""Which kernels tensor parallelism shards and which it replicates, from their ops' shapes.

  sharded      an operand dim is a per-rank width of the model: with a config (--model),
               a width of the config / the run's TP (q, k, v, fused qkv, o_proj input, FFN
               and expert widths, vocabulary) that is not also a full width; attention ops
               whose head dim is heads / TP; MoE ops of a MoE model (expert weights are split
               over the TP ranks). Without a config: GEMMs with a weight [H, D] or [D, H],
               H the hidden size (the last dim of the norms' input), D != H and D x TP >= H
               (the slice of a projection at least as wide as the hidden size).
  replicated   every other kernel with shapes (norms, the router, embeddings of full width,
               VAE, text encoder, copies of full activations, ...): same work on every rank
  collective   a TP collective (only when sharded kernels were found: otherwise the
               collectives serve data or model parallelism and do not change with TP)
  unknown      no op shapes
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tracekit.analysis.result import Analysis


SHARDED, REPLICATED, COLLECTIVE, UNKNOWN = "sharded", "replicated", "collective", "unknown"
OTHER_COLLECTIVE = "other_collective"  # a collective not of TP: data / model parallelism: unchanged by the TP degree
ROLES = (SHARDED, REPLICATED, COLLECTIVE, OTHER_COLLECTIVE, UNKNOWN)
_GEMM_OPS = re.compile(r"^aten::(linear|addmm|mm|matmul|bmm|baddbmm|_scaled_mm)$|gemm|matmul")
_NORM_OPS = re.compile(r"(?i)norm")
_ATTN_OPS = re.compile(r"(?i)attention|sdpa|flash_attn|reshape_and_cache|paged")
_MOE_OPS = re.compile(r"(?i)moe|fused_experts|grouped_mm")


def op_dims(a: Analysis) -> list:
    """Per kernel: its op's input dims (a list of shapes), [] when it has none."""
    ops = a.trace.ops if a.trace is not None else None
    op = a.kernels["op"].to_numpy()
    if ops is None or not len(ops):
        return [[] for _ in op]
    dims = ops["input_dims"].to_numpy()
    return [list(dims[o]) if o >= 0 and isinstance(dims[o], (list, tuple)) else [] for o in op]


def int_shapes(dims: list) -> list[list[int]]:
    return [list(s) for s in dims if isinstance(s, (list, tuple)) and s and all(isinstance(d, (int, np.integer)) for d in s)]

def hidden_from_norms(a: Analysis, dims: list) -> int | None:
    """The hidden size: the last dim of the norm ops' first input, the one with most kernel time."""
    names = a.kernels["op_name"].astype(object).fillna("").astype(str).to_numpy()
    excl = a.kernels["exclusive_ns"].to_numpy(dtype=np.float64)
    votes: dict[int, float] = {}
    for i in np.flatnonzero([bool(_NORM_OPS.search(n)) for n in names]):
        s = int_shapes(dims[i])
        if s and len(s[0]) >= 2 and s[0][-1] >= 64:
            votes[s[0][-1]] = votes.get(s[0][-1], 0.0) + excl[i]
    return max(votes, key=votes.get) if votes else None


def config_widths(arch, tp: int) -> tuple[set[int], set[int]]:
    """(per-rank widths at TP `tp`, full widths) of a model config: an operand dim among the
    first is a shard."""
    q, kv = arch.heads * arch.head_dim, arch.kv_heads * arch.head_dim
    full = {arch.hidden, q, kv, q + 2 * kv, arch.intermediate, 2 * arch.intermediate, arch.vocab}
    if arch.is_moe:
        full |= {arch.expert_intermediate, 2 * arch.expert_intermediate}
    full.discard(0)
    per_rank = {w // tp for w in full if w % tp == 0 and w // tp >= 32}
    if arch.kv_heads < tp:  # KV heads replicated over groups of ranks: one head per rank
        per_rank.add(arch.head_dim)
    # a per-rank width that equals a full one (gpt-oss at TP 8: q / 8 = 512 = the full KV width) is
    # taken as a shard: under TP the KV projections are split too; only the hidden size is surely whole
    return per_rank - {arch.hidden}, full


def kernel_roles(a: Analysis, tp: int, arch=None) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """(role, reason) per kernel and what the classification rests on (hidden size, widths)."""
    k = a.kernels
    n = len(k)
    dims = op_dims(a)
    names = k["op_name"].astype(object).fillna("").astype(str).to_numpy()
    kclass = k["kernel_class"].astype(object).fillna("").astype(str).to_numpy()
    coll = (kclass == "collective") | k["collective"].notna().to_numpy()
    role = np.full(n, UNKNOWN, dtype=object)
    reason = np.full(n, "no op shapes", dtype=object)
    basis: dict[str, Any] = {"hidden": None, "per_rank_widths": [], "source": None}
    per_rank: set[int] = set()
    heads: set[int] = set()
    moe = False
    hidden = None
    if tp > 1 and arch is not None:
        per_rank, _ = config_widths(arch, tp)
        heads = {h // tp for h in (arch.heads, arch.kv_heads) if h % tp == 0 and h // tp < h}
        moe, hidden = arch.is_moe, arch.hidden
        basis.update(hidden=hidden, per_rank_widths=sorted(per_rank), source=f"model config {arch.path}")
    elif tp > 1:
        hidden = hidden_from_norms(a, dims)
        basis.update(hidden=hidden, source="hidden size from the norms' input (no --model)" if hidden else
                     "no norm op with shapes: the hidden size is unknown, no GEMM can be called sharded (pass --model)")
    for i in range(n):
        if coll[i]:
            role[i], reason[i] = COLLECTIVE, "collective"
            continue
        shapes = int_shapes(dims[i])
        if not shapes:
            continue
        role[i], reason[i] = REPLICATED, "full-size shapes"
        if tp <= 1:
            continue
        if moe and _MOE_OPS.search(names[i]):
            role[i], reason[i] = SHARDED, "MoE experts (split over the TP ranks)"
            continue
        if heads and _ATTN_OPS.search(names[i]) and any(len(s) >= 3 and (s[-2] in heads or s[1] in heads) for s in shapes):
            role[i], reason[i] = SHARDED, f"attention heads / {tp}"
            continue
        if per_rank:
            hit = sorted({d for s in shapes for d in s if d in per_rank})
            if hit:
                role[i], reason[i] = SHARDED, f"width {hit[0]} = config width / {tp}"
            continue
        weights = [s for s in shapes if len(s) == 2]
        if hidden and _GEMM_OPS.search(names[i]) and weights and hidden in weights[-1]:
            s = weights[-1]  # the weight: the last matrix operand (mm, addmm, linear)
            other = s[1] if s[0] == hidden else s[0]
            if other != hidden and other * tp >= hidden:
                role[i], reason[i] = SHARDED, f"weight [{s[0]}, {s[1]}]: {other} x {tp} >= hidden {hidden}"
    if not (role == SHARDED).any():  # no TP sharding: the collectives serve data / model parallelism
        role[coll] = OTHER_COLLECTIVE
        reason[coll] = "collective not of tensor parallelism (no TP-sharded kernel found)"
    return role, reason, basis

def stated_tp(current_tp: int, tp_source: str, guessed: bool, sharded: bool, basis: dict, arch=None) -> tuple[int | None, str]:
    """The run's TP degree as reported. A degree guessed from the job (collective group size,
    world size) stands only if some kernel's shapes are sharded at it: data and model
    parallelism have collectives and ranks too. Else the run has no TP (TP 1) where shapes
    could have shown it (hidden size or model config known), or its degree is unknown (None)."""
    if not guessed or current_tp <= 1 or sharded:
        return current_tp, tp_source
    if basis.get("hidden") is not None or arch is not None:
        return 1, (f"no TP: no kernel has per-rank shapes at TP {current_tp}, so the {tp_source} ({current_tp}) "
                   "is data / model parallelism")
    return None, f"unknown: the {tp_source} ({current_tp}) is not a TP degree, and {basis.get('source')}"
