"""The ranks of one job side by side: which ops ran with the same shapes on every rank (a
kernel without a phase or block label: null)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tracekit.projection.tp_roles import int_shapes, op_dims


def compare_ranks(per_rank: list[tuple[int, Any]]) -> pd.DataFrame:
    """Per (phase, block, op, shapes): on how many ranks it ran and its time spread over them.
    alike: the same op with the same shapes on every rank (replicated work, or work sharded
    evenly); differs: shapes or presence differ (model-parallel tables, uneven shards)."""
    rows = []
    for rank, a in per_rank:
        k = a.kernels
        dims = op_dims(a)
        rows.append(pd.DataFrame({"rank": rank, "phase": k["phase"].astype(object).to_numpy(),
                                  "block": k["block"].astype(object).to_numpy(),
                                  "op": k["op_name"].astype(object).fillna("(no op)").to_numpy(),
                                  "shapes": [str(int_shapes(d)) for d in dims], "t": k["exclusive_ns"].to_numpy(dtype=np.float64)}))
    if not rows:
        return pd.DataFrame()
    frame = pd.concat(rows, ignore_index=True)
    per = frame.groupby(["phase", "block", "op", "shapes", "rank"], sort=False, dropna=False)["t"].sum().reset_index()
    g = per.groupby(["phase", "block", "op", "shapes"], sort=False, dropna=False)
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
    out = c.groupby(["phase", "block"], sort=False, dropna=False)[["alike_ns", "differs_ns"]].sum().reset_index()
    n = int(compared["ranks"].max())
    out[["alike_ns", "differs_ns"]] /= max(n, 1)  # per rank
    total = out["alike_ns"] + out["differs_ns"]
    out["alike_share"] = np.where(total > 0, out["alike_ns"] / total, np.nan)
    out["verdict"] = np.where(out["alike_share"] >= 0.5, "same shapes on every rank", "differs across ranks")
    return out.sort_values("alike_ns", ascending=False).reset_index(drop=True)
