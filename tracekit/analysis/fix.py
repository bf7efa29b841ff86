"""Recoverable kernel time, ranked: what the roofline says could go.

Recoverable time is measured time minus the time the work would take at the sustained
roofline (`t_min_sustained_ns`), per kernel, never below zero (a kernel faster than the
roofline has nothing to give back). Time is GPU time the kernel holds alone (`exclusive_ns`:
compute owns the time it covers, then copies, then communication, whose time is its exposed
time), so that the lines of a table never add up to more than the GPU's busy time; the
roofline minimum is scaled to that time. With steps, only the kernels the steps own count.
Summed per op (name and input shapes), per kernel name and per phase x block, ranked, with
each line's share of the basis: the ranked causes' one denominator (analysis.causes), GPU busy
time where there is none."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from tracekit.analysis.ops import shape_key
from tracekit.attribution.rules import phased
from tracekit.trace.grouping import Key, group_rows, label_column

if TYPE_CHECKING:
    from tracekit.analysis.measured import Measured

FIX_COLUMNS = ["what", "detail", "count", "time_ns", "t_min_ns", "recoverable_ns", "share", "cumulative_share"]


def work(k: pd.DataFrame, in_steps: bool) -> dict[str, np.ndarray]:
    """Per kernel: the GPU time it holds alone, its roofline minimum at sustained bandwidth
    scaled to that time, and the recoverable rest (never below zero; NaN where the kernel has
    no cost). With steps, kernels no step owns have no time here (shares are of step time)."""
    duration = k["duration_ns"].to_numpy(dtype=np.float64)
    time = k["exclusive_ns"].to_numpy(dtype=np.float64)
    if in_steps:
        time = np.where(k["step"].to_numpy() >= 0, time, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        held = np.where(duration > 0, time / duration, 0.0)  # the part of the kernel's time it holds alone
    t_min = k["t_min_sustained_ns"].to_numpy(dtype=np.float64) * held
    # Communication's loss is its exposed time (the headline's own line), not a roofline gap:
    # a collective that spins while it waits for its peers is waiting, not slow.
    comm = (k["block"] == "collective").to_numpy()
    t_min[comm] = np.nan
    return {"time_ns": time, "t_min_ns": t_min, "recoverable_ns": np.clip(time - t_min, 0, None)}


def basis(a: Measured) -> tuple[str, float]:
    if len(a.steps):
        return "step time", float(a.steps["duration_ns"].sum())
    busy = float(a.devices["busy_ns"].sum()) if len(a.devices) else 0.0
    return "GPU busy time", busy


def _without_scalars(dims) -> str:
    # trailing scalar inputs ([]) say nothing of the work
    return "" if dims is None else re.sub(r"(, \[\])+\]$", "]", str(dims))


def op_shapes(a: Measured) -> Key:
    """Per kernel: a code for its op's input shapes (-1 for a kernel without an op: those
    are not ranked by op)."""
    op = a.kernels["op"].to_numpy()
    linked = op >= 0
    if a.trace is None or not len(a.trace.ops) or not linked.any():  # no shapes recorded: ""
        return np.zeros(len(op), dtype=np.int64), np.array(["", None], dtype=object)
    codes = np.full(len(op), -1, dtype=np.int64)
    codes[linked], labels = shape_key(a.trace.ops["input_dims"].to_numpy(), op[linked], _without_scalars)
    return codes, labels


def ranked(work: dict[str, np.ndarray], keys: dict[str, Key], basis_ns: float, rows: np.ndarray | None = None) -> pd.DataFrame:
    """Per group: time, roofline minimum and recoverable time of its kernels with a cost,
    ranked by recoverable time, with its share of the basis and the running total."""
    costed = ~np.isnan(work["t_min_ns"]) if rows is None else rows & ~np.isnan(work["t_min_ns"])
    if not costed.any():
        return pd.DataFrame(columns=FIX_COLUMNS)
    chosen = {name: (codes[costed], labels) for name, (codes, labels) in keys.items()}
    groups = group_rows(list(chosen.values()), int(costed.sum()), dropna=False)
    g = pd.DataFrame({
        **{name: label_column(key, groups.first) for name, key in chosen.items()},
        "count": groups.size, "time_ns": groups.sum(work["time_ns"][costed]),
        "t_min_ns": groups.float_sum(work["t_min_ns"][costed]), "recoverable_ns": groups.float_sum(work["recoverable_ns"][costed]),
    })
    names = list(keys)
    g = g[g["recoverable_ns"] > 0].sort_values("recoverable_ns", ascending=False, kind="stable").reset_index(drop=True)
    g["what"] = g[names[0]].astype(str) if len(names) == 1 or names[0] != "phase" else pd.Series(
        [phased(p, b) for p, b in zip(g["phase"].astype(str), g["block"].astype(str))], index=g.index, dtype=object)
    g["detail"] = g[names[1]].astype(str) if len(names) > 1 and names[0] != "phase" else ""
    g["share"] = g["recoverable_ns"] / basis_ns if basis_ns else np.nan
    g["cumulative_share"] = g["share"].cumsum()
    return g[FIX_COLUMNS]
