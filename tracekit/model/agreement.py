"""Where both sources cost the same kernels: the trace's own costs (op shapes, graph-capture
pairing's captured shapes, Inductor's kernel arguments, identical kernels) against the model's.

The model costs each block group of a step as a whole and spreads that over the group's
kernels by time (tracekit.model.fill); op shapes win where a kernel has them. So the model's
figure for the kernels the trace costed is its group cost times their share of the group's
kernel time: exact where the trace costed the whole group, a time-weighted share where it
costed part. Per phase x group, summed over the steps:

    difference = trace-costed / model-costed - 1   (FLOPs, and bytes)

null where the trace costed less than half of the group's kernel time (tracekit.costs.unknown:
a figure from less than half of the time it describes is not a measurement), or where the
model's cost is unknown (KV lengths missing).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.common.format import MIN_COVERAGE
from tracekit.model.fill import SOURCE

AGREEMENT_COLUMNS = ["phase", "group", "blocks", "kernels", "kernel_time_ns", "trace_share", "trace_flops", "model_flops",
                     "flops_difference", "trace_bytes", "model_bytes", "bytes_difference"]


def agreement(groups: pd.DataFrame, group_of: np.ndarray, kernels: pd.DataFrame, costs: pd.DataFrame,
              labels: pd.DataFrame) -> pd.DataFrame:
    """One row per phase x block group whose kernels the trace costed, in part or whole
    (`groups`, `group_of`: tracekit.model.fill.spread's; `costs` after it filled them;
    `labels`: tracekit.attribution's, for the phase)."""
    if not len(groups) or not len(kernels):
        return pd.DataFrame(columns=AGREEMENT_COLUMNS)
    time = (kernels["end"] - kernels["start"]).to_numpy(dtype=np.float64)
    source = costs["cost_source"].astype(object).to_numpy()
    by_trace = costs["flops"].notna().to_numpy() & (source != SOURCE) & (group_of >= 0)
    nbytes = (costs["bytes_read"] + costs["bytes_written"]).to_numpy(dtype=np.float64)
    flops = costs["flops"].to_numpy(dtype=np.float64)
    phase = labels["phase"].astype(object).to_numpy()
    members = group_of >= 0
    n = len(groups)
    group_time = np.bincount(group_of[members], weights=time[members], minlength=n)
    trace_time = np.bincount(group_of[by_trace], weights=time[by_trace], minlength=n)
    share = np.divide(trace_time, group_time, out=np.zeros(n), where=group_time > 0)
    frame = pd.DataFrame({
        "phase": _main_phases(phase, time, group_of, n),
        "group": groups["group"].to_numpy(), "blocks": groups["blocks"].to_numpy(),
        "kernels": np.bincount(group_of[by_trace], minlength=n), "kernel_time_ns": group_time, "trace_time_ns": trace_time,
        "trace_flops": np.bincount(group_of[by_trace], weights=flops[by_trace], minlength=n),
        "trace_bytes": np.bincount(group_of[by_trace], weights=nbytes[by_trace], minlength=n),
        "model_flops": groups["flops"].to_numpy(dtype=np.float64) * share,
        "model_bytes": groups["bytes"].to_numpy(dtype=np.float64) * share,
    })
    frame = frame[frame["trace_time_ns"] > 0]
    if not len(frame):
        return pd.DataFrame(columns=AGREEMENT_COLUMNS)
    out = frame.groupby(["phase", "group", "blocks"], sort=False, as_index=False).sum(min_count=1)
    out["trace_share"] = out["trace_time_ns"] / out["kernel_time_ns"]
    comparable = out["trace_share"].to_numpy() >= MIN_COVERAGE
    for what in ("flops", "bytes"):
        model = out[f"model_{what}"].to_numpy(dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            diff = out[f"trace_{what}"].to_numpy(dtype=np.float64) / model - 1.0
        out[f"{what}_difference"] = np.where(comparable & (model > 0) & np.isfinite(diff), diff, np.nan)
    return out.sort_values("kernel_time_ns", ascending=False, kind="stable")[AGREEMENT_COLUMNS].reset_index(drop=True)


def _main_phases(phase: np.ndarray, time: np.ndarray, group_of: np.ndarray, n: int) -> np.ndarray:
    """Per group: the phase of most of its kernel time (ties: the first label in sorted order);
    None for a group without kernels. One weighted count over (group, phase), not a scan per group."""
    out = np.full(n, None, dtype=object)
    members = group_of >= 0
    if not n or not members.any():
        return out
    labels, codes = np.unique(phase[members].astype(str), return_inverse=True)
    weight = np.bincount(group_of[members] * len(labels) + codes, weights=time[members], minlength=n * len(labels))
    has = np.bincount(group_of[members], minlength=n) > 0
    out[has] = labels[weight.reshape(n, len(labels)).argmax(axis=1)][has]
    return out
