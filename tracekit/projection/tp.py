"""The same run at another tensor-parallel degree: sharded blocks shrink, replicated ones do not.

Each kernel gets a role from its op's shapes (the per-rank shapes of tensor parallelism):

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
  unknown      no op shapes: a range from unchanged to scaled like a sharded kernel

At TP N, from the run's TP c:
  sharded      t' = t x c / N              (compute and weight bytes both split N ways)
  replicated   t' = t
  collective   ring: all-reduce 2(N-1)/N x bytes / link, all-gather, reduce-scatter and
               all-to-all (N-1)/N; the kernel keeps its achieved fraction of the link:
               t' = t x f(N) / f(c); the ring time at the device's interconnect is reported
  unknown      t' in [t x c / N, t] (point: the middle)

Step times come from the same per-stream replay as the device projection
(tracekit.projection.replay): host time and launch gaps do not move.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from tracekit.costs.comm import bus_factor
from tracekit.projection.device import aggregate, steps_frame
from tracekit.projection.replay import launch_starts, replay
from tracekit.strict_json import dumps, records
from tracekit.reports.format import UNKNOWN as NO_LABEL  # a kernel without a phase or block label

SHARDED, REPLICATED, COLLECTIVE, UNKNOWN = "sharded", "replicated", "collective", "unknown"
OTHER_COLLECTIVE = "other_collective"  # a collective not of TP: data / model parallelism: unchanged by the TP degree
ROLES = (SHARDED, REPLICATED, COLLECTIVE, OTHER_COLLECTIVE, UNKNOWN)
_GEMM_OPS = re.compile(r"^aten::(linear|addmm|mm|matmul|bmm|baddbmm|_scaled_mm)$|gemm|matmul")
_NORM_OPS = re.compile(r"(?i)norm")
_ATTN_OPS = re.compile(r"(?i)attention|sdpa|flash_attn|reshape_and_cache|paged")
_MOE_OPS = re.compile(r"(?i)moe|fused_experts|grouped_mm")
_COLL_TYPES = [("all_reduce", re.compile(r"(?i)all_?reduce")), ("all_gather", re.compile(r"(?i)all_?gather")),
               ("reduce_scatter", re.compile(r"(?i)reduce_?scatter")), ("all_to_all", re.compile(r"(?i)all_?to_?all")),
               ("send_recv", re.compile(r"(?i)sendrecv|send|recv")), ("broadcast", re.compile(r"(?i)broadcast"))]
TP_BLOCK_COLUMNS = ["phase", "block", "role", "kernels", "measured_ns", "sharded_ns", "replicated_ns", "collective_ns", "other_collective_ns",
                    "unknown_ns", "projected_ns", "low_ns", "high_ns", "ratio"]
TP_COLLECTIVE_COLUMNS = ["collective", "kernels", "measured_ns", "message_bytes", "factor_now", "factor_target",
                         "ring_now_ns", "ring_target_ns", "projected_ns"]


def ring_factor(collective: str, n: int) -> float:
    """Bytes on each rank's link per message byte in a ring of n: all-reduce 2(n-1)/n;
    all-gather, reduce-scatter, all-to-all (n-1)/n; 0 for n = 1; 1 for anything else."""
    if n <= 1:
        return 0.0
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def collective_type(*names: Any) -> str:
    for name in names:
        if isinstance(name, str) and name:
            for label, pattern in _COLL_TYPES:
                if pattern.search(name):
                    return label
    return "other"


@dataclass
class TPProjection:
    path: str | None
    device: Any  # hardware.Device (for the link bandwidth) or None
    current_tp: int
    tp_source: str
    target_tp: int
    kernels: pd.DataFrame  # per kernel: role, reason, ratio, low, high
    blocks: pd.DataFrame
    collectives: pd.DataFrame
    signatures: pd.DataFrame  # per (role, op, shapes): time, for naming what is sharded and replicated
    steps: pd.DataFrame
    totals: dict[str, Any]
    assumptions: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    ranks: pd.DataFrame | None = None  # several ranks: per (op, shapes) whether every rank had it alike
    rank_blocks: pd.DataFrame | None = None  # several ranks: per block, the time alike on every rank and the rest
    analysis: Any = None  # the Analysis it was made from (not serialised)

    def to_dict(self) -> dict[str, Any]:
        out = {"trace": self.path, "device": None if self.device is None else {"key": self.device.key, "name": self.device.name},
               "tp": {"current": self.current_tp, "source": self.tp_source, "target": self.target_tp},
               "totals": self.totals, "steps": records(self.steps), "blocks": records(self.blocks),
               "collectives": records(self.collectives), "signatures": records(self.signatures.head(40)),
               "assumptions": self.assumptions}
        if self.ranks is not None:
            out["ranks"] = records(self.ranks.head(60))
            out["rank_blocks"] = records(self.rank_blocks)
        return out

    def to_json(self) -> str:
        return dumps(self.to_dict())


def _dims_of(a) -> list:
    """Per kernel: its op's input dims (a list of shapes), [] when it has none."""
    ops = a.trace.ops if a.trace is not None else None
    op = a.kernels["op"].to_numpy()
    if ops is None or not len(ops):
        return [[] for _ in op]
    dims = ops["input_dims"].to_numpy()
    return [list(dims[o]) if o >= 0 and isinstance(dims[o], (list, tuple)) else [] for o in op]


def _shapes(dims: list) -> list[list[int]]:
    return [list(s) for s in dims if isinstance(s, (list, tuple)) and s and all(isinstance(d, (int, np.integer)) for d in s)]


def hidden_from_norms(a, dims: list) -> int | None:
    """The hidden size: the last dim of the norm ops' first input, the one with most kernel time."""
    names = a.kernels["op_name"].astype(object).fillna("").astype(str).to_numpy()
    excl = a.kernels["exclusive_ns"].to_numpy(dtype=np.float64)
    votes: dict[int, float] = {}
    for i in np.flatnonzero([bool(_NORM_OPS.search(n)) for n in names]):
        s = _shapes(dims[i])
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


def kernel_roles(a, tp: int, arch=None) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """(role, reason) per kernel and what the classification rests on (hidden size, widths)."""
    k = a.kernels
    n = len(k)
    dims = _dims_of(a)
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
        shapes = _shapes(dims[i])
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


def _message_bytes(k: pd.DataFrame) -> np.ndarray:
    """The message each collective kernel moves: from its own metadata (bus bytes / bus factor), else the op's bytes."""
    read = k["bytes_read"].to_numpy(dtype=np.float64)
    group = k["coll_group_size"].to_numpy()
    name = k["collective"].astype(object).to_numpy()
    out = read.copy()
    for i in np.flatnonzero(group > 0):
        f = bus_factor(str(name[i]), int(group[i]))
        out[i] = read[i] / f if f > 0 else read[i]
    return out


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


def project_tp(a, target_tp: int, current_tp: int, tp_source: str, arch=None, items: pd.DataFrame | None = None,
               guessed: bool = False) -> TPProjection:
    """`guessed`: current_tp comes from the job (collective group size, world size), not from
    --run-tp or the model config: it is a hypothesis the shapes must confirm (stated_tp)."""
    k = a.kernels
    role, reason, basis = kernel_roles(a, current_tp, arch)
    scale = current_tp / target_tp
    n = len(k)
    ctype = np.array([collective_type(c, o, nm) for c, o, nm in zip(k["collective"].astype(object), k["op_name"].astype(object),
                                                                     k["name"].astype(object))], dtype=object) if n else np.zeros(0, dtype=object)
    f_now = np.array([ring_factor(t, current_tp) for t in ctype]) if n else np.zeros(0)
    f_new = np.array([ring_factor(t, target_tp) for t in ctype]) if n else np.zeros(0)
    with np.errstate(divide="ignore", invalid="ignore"):
        coll_ratio = np.where(f_now > 0, f_new / f_now, 1.0)
    ratio = np.ones(n)
    ratio[role == SHARDED] = scale
    is_coll = role == COLLECTIVE
    ratio[is_coll] = coll_ratio[is_coll]
    unknown = role == UNKNOWN
    low, high = ratio.copy(), ratio.copy()
    if (role == SHARDED).any():  # no sharding found: nothing scales with TP, unknown kernels included
        low[unknown], high[unknown] = min(1.0, scale), max(1.0, scale)
    ratio[unknown] = (low[unknown] + high[unknown]) / 2
    r = pd.DataFrame({"ratio": ratio, "low": low, "high": high, "roof": role, "costed": ~unknown, "role": role, "reason": reason,
                      "collective_type": ctype}, index=k.index)

    launched = launch_starts(k, a.trace.launches if a.trace is not None else None)
    duration = k["duration_ns"].to_numpy(dtype=np.float64)
    ends = {col: replay(k, launched, duration * r[col].to_numpy()) for col in ("ratio", "low", "high")}
    steps = steps_frame(a, r, ends, items) if a.trace is not None else pd.DataFrame()
    blocks = _blocks(k, r)
    excl = k["exclusive_ns"].to_numpy(dtype=np.float64)
    collectives = _collectives(k, r, excl, a.device, current_tp, target_tp)
    busy = float(excl.sum())
    by_role = {x: float(excl[role == x].sum()) for x in ROLES}
    step_wall = float(steps["measured_ns"].sum()) if len(steps) else None
    totals = {
        "busy_ns": busy, **{f"{x}_ns": by_role[x] for x in (SHARDED, REPLICATED, COLLECTIVE, UNKNOWN)},
        "other_collective_ns": by_role[OTHER_COLLECTIVE],
        "replicated_share_busy": by_role[REPLICATED] / busy if busy > 0 else None,
        "replicated_share_step": by_role[REPLICATED] / step_wall if step_wall else None,
        "sharded_found": bool(by_role[SHARDED] > 0),
        "busy_projected_ns": float((excl * ratio).sum()), "busy_low_ns": float((excl * low).sum()),
        "busy_high_ns": float((excl * high).sum()),
        "steps": len(steps), "step_measured_ns": step_wall,
        "step_projected_ns": float(steps["projected_ns"].sum()) if len(steps) else None,
        "step_low_ns": float(steps["low_ns"].sum()) if len(steps) else None,
        "step_high_ns": float(steps["high_ns"].sum()) if len(steps) else None,
        "hidden": basis["hidden"], "per_rank_widths": basis["per_rank_widths"], "basis": basis["source"],
        "replicated_blocks": [f"{b['phase']}/{b['block']}" for b in blocks.to_dict(orient="records") if b["role"] == REPLICATED],
        "sharded_blocks": [f"{b['phase']}/{b['block']}" for b in blocks.to_dict(orient="records") if b["role"] == SHARDED],
    }
    totals["busy_ratio"] = totals["busy_projected_ns"] / busy if busy > 0 else None
    totals["step_ratio"] = totals["step_projected_ns"] / step_wall if step_wall else None
    sig = _signatures(k, r, excl, _dims_of(a))
    stated, stated_source = stated_tp(current_tp, tp_source, guessed, bool(by_role[SHARDED] > 0), basis, arch)
    p = TPProjection(a.meta.get("path"), a.device, stated, stated_source, target_tp, r, blocks, collectives, sig, steps, totals)
    p.assumptions = _assumptions(p)
    p.warnings = list(a.warnings)
    return p


def _blocks(k: pd.DataFrame, r: pd.DataFrame) -> pd.DataFrame:
    base = aggregate(k, r, ["phase", "block"])
    excl = k["exclusive_ns"].to_numpy(dtype=np.float64)
    frame = pd.DataFrame({"phase": k["phase"].astype(object).fillna(NO_LABEL).to_numpy(), "block": k["block"].astype(object).fillna(NO_LABEL).to_numpy(),
                          "role": r["role"].to_numpy(), "t": excl})
    split = frame.pivot_table(index=["phase", "block"], columns="role", values="t", aggfunc="sum", fill_value=0.0)
    for x in ROLES:
        base[f"{x}_ns"] = [float(split.at[(p, b), x]) if x in split.columns and (p, b) in split.index else 0.0
                           for p, b in zip(base["phase"], base["block"])]
    # the block's role: the one most of its time has
    base["role"] = base[[f"{x}_ns" for x in ROLES]].idxmax(axis=1).str[:-3]
    return base[TP_BLOCK_COLUMNS]


def _collectives(k: pd.DataFrame, r: pd.DataFrame, excl: np.ndarray, device, c: int, n: int) -> pd.DataFrame:
    mine = (r["role"] == COLLECTIVE).to_numpy()
    if not mine.any():
        return pd.DataFrame(columns=TP_COLLECTIVE_COLUMNS)
    link = device.interconnect if device is not None and device.interconnect_gbps > 0 else None
    frame = pd.DataFrame({"collective": r["collective_type"].to_numpy()[mine], "measured_ns": excl[mine],
                          "message_bytes": _message_bytes(k)[mine], "projected_ns": excl[mine] * r["ratio"].to_numpy()[mine]})
    out = frame.groupby("collective", sort=False).agg(kernels=("measured_ns", "size"), measured_ns=("measured_ns", "sum"),
                                                       message_bytes=("message_bytes", "sum"), projected_ns=("projected_ns", "sum")).reset_index()
    out["factor_now"] = [ring_factor(t, c) for t in out["collective"]]
    out["factor_target"] = [ring_factor(t, n) for t in out["collective"]]
    out["ring_now_ns"] = out["factor_now"] * out["message_bytes"] / link * 1e9 if link else np.nan
    out["ring_target_ns"] = out["factor_target"] * out["message_bytes"] / link * 1e9 if link else np.nan
    return out[TP_COLLECTIVE_COLUMNS].sort_values("measured_ns", ascending=False).reset_index(drop=True)


def _signatures(k: pd.DataFrame, r: pd.DataFrame, excl: np.ndarray, dims: list) -> pd.DataFrame:
    frame = pd.DataFrame({"role": r["role"].to_numpy(), "reason": r["reason"].to_numpy(),
                          "op": k["op_name"].astype(object).fillna("(no op)").to_numpy(),
                          "shapes": [str(_shapes(d)) for d in dims], "block": k["block"].astype(object).fillna(NO_LABEL).to_numpy(),
                          "measured_ns": excl})
    out = frame.groupby(["role", "op", "shapes"], sort=False).agg(block=("block", "first"), reason=("reason", "first"),
                                                                    kernels=("measured_ns", "size"), measured_ns=("measured_ns", "sum"))
    return out.reset_index().sort_values("measured_ns", ascending=False).reset_index(drop=True)


def _assumptions(p: TPProjection) -> list[str]:
    t = p.totals
    c, n = p.current_tp, p.target_tp
    out = [f"the run's TP degree is {c} ({p.tp_source})" if c is not None else f"the run's TP degree is {p.tp_source}"]
    if not t["sharded_found"]:
        out.append(f"no TP-sharded kernel found ({t['basis'] or 'TP 1'}): every kernel is taken as replicated or unknown, the "
                   "collectives as data/model parallelism, and the step as unchanged by the TP degree")
    else:
        out.append(f"sharded kernels ({t['basis']}) take {c}/{n} of their time: compute and weight bytes split {n} ways; "
                   "the activations a sharded GEMM reads whole, and kernels too small to fill the GPU, do not shrink "
                   "(so the figure for a higher TP is optimistic)")
        out.append("replicated kernels (full-size shapes: norms, routers, full embeddings, VAE, text encoder, copies of "
                   "full activations) take the same time at any TP")
        link = f"{p.device.interconnect_gbps:,.0f} GB/s" if p.device is not None else "the link"
        out.append(f"TP collectives follow the ring: all-reduce 2(N-1)/N, all-gather / reduce-scatter / all-to-all (N-1)/N "
                   f"x message bytes / link ({link}); each keeps its measured fraction of the link: t' = t x f({n}) / f({c})")
    if t["unknown_ns"] > 0:
        out.append("kernels without op shapes: range from unchanged to scaled by the TP ratio; the point is the middle")
    out.append("host time and launch gaps are as measured (each stream replayed alone)")
    return out


def compare_ranks(per_rank: list[tuple[int, Any]]) -> pd.DataFrame:
    """Per (phase, block, op, shapes): on how many ranks it ran and its time spread over them.
    alike: the same op with the same shapes on every rank (replicated work, or work sharded
    evenly); differs: shapes or presence differ (model-parallel tables, uneven shards)."""
    rows = []
    for rank, a in per_rank:
        k = a.kernels
        dims = _dims_of(a)
        rows.append(pd.DataFrame({"rank": rank, "phase": k["phase"].astype(object).fillna(NO_LABEL).to_numpy(),
                                  "block": k["block"].astype(object).fillna(NO_LABEL).to_numpy(),
                                  "op": k["op_name"].astype(object).fillna("(no op)").to_numpy(),
                                  "shapes": [str(_shapes(d)) for d in dims], "t": k["exclusive_ns"].to_numpy(dtype=np.float64)}))
    if not rows:
        return pd.DataFrame()
    frame = pd.concat(rows, ignore_index=True)
    per = frame.groupby(["phase", "block", "op", "shapes", "rank"], sort=False)["t"].sum().reset_index()
    g = per.groupby(["phase", "block", "op", "shapes"], sort=False)
    out = g.agg(ranks=("rank", "nunique"), min_ns=("t", "min"), max_ns=("t", "max"), mean_ns=("t", "mean")).reset_index()
    total = len(per_rank)
    out["alike"] = out["ranks"] == total
    with np.errstate(divide="ignore", invalid="ignore"):
        out["spread"] = np.where(out["mean_ns"] > 0, (out["max_ns"] - out["min_ns"]) / out["mean_ns"], np.nan)
    return out.sort_values("mean_ns", ascending=False).reset_index(drop=True)


def rank_blocks(compared: pd.DataFrame) -> pd.DataFrame:
    """Per (phase, block): mean time per rank of the work alike on every rank and of the work
    that differs across ranks (shapes or presence), and which of the two dominates."""
    if compared is None or not len(compared):
        return pd.DataFrame(columns=["phase", "block", "alike_ns", "differs_ns", "alike_share", "verdict"])
    c = compared.assign(alike_ns=np.where(compared["alike"], compared["mean_ns"] * compared["ranks"], 0.0),
                        differs_ns=np.where(compared["alike"], 0.0, compared["mean_ns"] * compared["ranks"]))
    out = c.groupby(["phase", "block"], sort=False)[["alike_ns", "differs_ns"]].sum().reset_index()
    n = int(compared["ranks"].max())
    out[["alike_ns", "differs_ns"]] /= max(n, 1)  # per rank
    total = out["alike_ns"] + out["differs_ns"]
    out["alike_share"] = np.where(total > 0, out["alike_ns"] / total, np.nan)
    out["verdict"] = np.where(out["alike_share"] >= 0.5, "same shapes on every rank", "differs across ranks")
    return out.sort_values("alike_ns", ascending=False).reset_index(drop=True)
