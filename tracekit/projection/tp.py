"""The same run at another tensor-parallel degree: sharded blocks shrink, replicated ones do not.

Each kernel gets a role from its op's shapes (the per-rank shapes of tensor parallelism;
tracekit.projection.tp_roles): sharded, replicated, a TP collective, another collective
(data / model parallelism), or unknown (no op shapes).

At TP N, from the run's TP c:
  sharded      t' = t x c / N              (compute and weight bytes both split N ways)
  replicated   t' = t
  collective   ring: all-reduce 2(N-1)/N x bytes / link, all-gather, reduce-scatter and
               all-to-all (N-1)/N; the kernel keeps its achieved fraction of the link:
               t' = t x f(N) / f(c); the ring time at the device's interconnect is reported
  unknown      t' in [t x c / N, t] (point: the middle)

With a target GPU as well (--to with --tp), each kernel's TP ratio is multiplied by its
device ratio (tracekit.projection.device: what bounds it on the source, the error bands):
t' = t x tp_ratio x device_ratio, the collectives by the ring and by the two interconnects.

Step times come from the same per-stream replay as the device projection
(tracekit.projection.replay): host time and launch gaps do not move (on another GPU, the
range replays the host at the paces of tracekit.projection.ranges.HOST).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from tracekit.costs.comm import bus_factor
from tracekit.projection import ranges
from tracekit.projection.bounds import rule_time
from tracekit.projection.device import aggregate, device_ratios, replayed
from tracekit.projection.notes import rule_shares
from tracekit.projection.projected_steps import step_totals, steps_frame, throughput
from tracekit.projection.tp_roles import (COLLECTIVE, OTHER_COLLECTIVE, REPLICATED, ROLES, SHARDED, UNKNOWN, int_shapes, kernel_roles,
                                          op_dims, stated_tp)
from tracekit.strict_json import dumps, records

if TYPE_CHECKING:
    from tracekit.analysis.result import Analysis

_NO_LABEL = "\0"  # a kernel without a phase or block label, as a pivot key only (never shown)
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
    target: Any = None  # with --to: the GPU projected onto as well (hardware.Device)

    def to_dict(self) -> dict[str, Any]:
        out = {"trace": self.path, "device": None if self.device is None else {"key": self.device.key, "name": self.device.name},
               "target": None if self.target is None else {"key": self.target.key, "name": self.target.name},
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


def project_tp(a: Analysis, target_tp: int, current_tp: int, tp_source: str, arch=None, items: pd.DataFrame | None = None,
               guessed: bool = False, target=None) -> TPProjection:
    """`guessed`: current_tp comes from the job (collective group size, world size), not from
    --run-tp or the model config: it is a hypothesis the shapes must confirm (stated_tp).
    `target`: another GPU (hardware.Device) to project onto as well; None: the same GPU."""
    k = a.kernels
    role, reason, basis = kernel_roles(a, current_tp, arch)
    r = tp_ratios(k, role, reason, current_tp, target_tp)
    if target is not None:
        dev = device_ratios(a, target)
        for col in ("ratio", "low", "high"):
            r[col] = r[col].to_numpy() * dev[col].to_numpy()
        r["rule"] = dev["rule"].to_numpy()
    ends = replayed(a, r, same_machine=target is None)
    steps = steps_frame(a, r["ratio"].to_numpy(dtype=np.float64), ends, items)
    blocks = _blocks(k, r)
    excl = k["exclusive_ns"].to_numpy(dtype=np.float64)
    collectives = _collectives(k, r, excl, a.device, current_tp, target_tp)
    busy = float(excl.sum())
    by_role = {x: float(excl[role == x].sum()) for x in ROLES}
    st = step_totals(steps)
    step_wall = st["step_measured_ns"]
    totals = {
        "busy_ns": busy, **{f"{x}_ns": by_role[x] for x in (SHARDED, REPLICATED, COLLECTIVE, UNKNOWN)},
        "other_collective_ns": by_role[OTHER_COLLECTIVE],
        "replicated_share_busy": by_role[REPLICATED] / busy if busy > 0 else None,
        "replicated_share_step": by_role[REPLICATED] / step_wall if step_wall else None,
        "sharded_found": bool(by_role[SHARDED] > 0),
        "busy_projected_ns": float((excl * r["ratio"]).sum()), "busy_low_ns": float((excl * r["low"]).sum()),
        "busy_high_ns": float((excl * r["high"]).sum()), **st, "throughput": throughput(steps),
        "hidden": basis["hidden"], "per_rank_widths": basis["per_rank_widths"], "basis": basis["source"],
        # [phase, block] pairs (null: no label)
        "replicated_blocks": [[b["phase"], b["block"]] for b in blocks.to_dict(orient="records") if b["role"] == REPLICATED],
        "sharded_blocks": [[b["phase"], b["block"]] for b in blocks.to_dict(orient="records") if b["role"] == SHARDED],
    }
    totals["busy_ratio"] = totals["busy_projected_ns"] / busy if busy > 0 else None
    if target is not None:
        totals["rules"] = rule_time(k, dev)
    sig = _signatures(k, r, excl, op_dims(a))
    stated, stated_source = stated_tp(current_tp, tp_source, guessed, bool(by_role[SHARDED] > 0), basis, arch)
    p = TPProjection(a.meta.get("path"), a.device, stated, stated_source, target_tp, r, blocks, collectives, sig, steps, totals,
                     target=target)
    p.assumptions = _assumptions(p)
    p.warnings = list(a.warnings)
    return p


def tp_ratios(k: pd.DataFrame, role: np.ndarray, reason: np.ndarray, current_tp: int, target_tp: int) -> pd.DataFrame:
    """Per kernel: projected / measured time at TP `target_tp` from its role (point, low, high)."""
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
    return pd.DataFrame({"ratio": ratio, "low": low, "high": high, "roof": role, "costed": ~unknown, "role": role, "reason": reason,
                         "collective_type": ctype}, index=k.index)


def _blocks(k: pd.DataFrame, r: pd.DataFrame) -> pd.DataFrame:
    base = aggregate(k, r, ["phase", "block"])
    excl = k["exclusive_ns"].to_numpy(dtype=np.float64)
    frame = pd.DataFrame({"phase": k["phase"].astype(object).fillna(_NO_LABEL).to_numpy(), "block": k["block"].astype(object).fillna(_NO_LABEL).to_numpy(),
                          "role": r["role"].to_numpy(), "t": excl})
    split = frame.pivot_table(index=["phase", "block"], columns="role", values="t", aggfunc="sum", fill_value=0.0)
    for x in ROLES:
        keys = [(_NO_LABEL if p is None else p, _NO_LABEL if b is None else b) for p, b in zip(base["phase"], base["block"])]
        base[f"{x}_ns"] = [float(split.at[key, x]) if x in split.columns and key in split.index else 0.0 for key in keys]
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
                          "shapes": [str(int_shapes(d)) for d in dims], "block": k["block"].astype(object).to_numpy(),
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
    if p.target is not None:
        out.append(f"on {p.target.name}: each kernel's TP ratio times its device ratio (what bounds it on {p.device.key if p.device else '?'}: "
                   f"{rule_shares(t['rules'], t['busy_ns'])}); a sharded kernel keeps the roof share it had at TP {c}")
        out.append(ranges.assumption())
        out.append("host time and launch gaps: the host timeline keeps its pace (range: another machine's); each stream replayed alone")
    else:
        out.append("host time and launch gaps are as measured (each stream replayed alone)")
    return out
