"""Coverage of the cost model: the share of GPU kernel time that has a cost, by source,
and the kernels without one with the reason; the capture's efficiency where it is known."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tracekit.costs.unknown import MIN_COVERAGE
from tracekit.analysis.roofline import OVER_PEAK, group_efficiency
from tracekit.strict_json import records
from tracekit.trace.grouping import Key, group_rows, key_of, label_column


def coverage(k: pd.DataFrame) -> dict[str, Any]:
    is_kernel = (k["kind"] == "kernel").to_numpy()
    time = k["duration_ns"].to_numpy(dtype=np.float64)
    modeled = k["flops"].notna().to_numpy()
    total = float(time[is_kernel].sum())
    modeled_time = float(time[is_kernel & modeled].sum())
    source = key_of(k["cost_source"])
    by_source = _summed_by(source, time, is_kernel & modeled)
    name, reason = key_of(k["name"]), key_of(k["unknown_reason"])
    unmodeled = is_kernel & ~modeled
    groups = group_rows([(name[0][unmodeled], name[1]), (reason[0][unmodeled], reason[1])], int(unmodeled.sum()))
    rows = np.flatnonzero(unmodeled)[groups.first]
    names, reasons = label_column(name, rows), label_column(reason, rows)
    # in the order groupby(sort=True) gives (by name, then reason), so ties sort as they always did
    order = sorted(range(len(rows)), key=lambda i: (names[i], reasons[i]))
    top_unmodeled = pd.DataFrame({"name": names[order], "reason": reasons[order],
                                  "time_ns": groups.sum(time[unmodeled])[order], "count": groups.size[order]})
    top_unmodeled = top_unmodeled.sort_values("time_ns", ascending=False).head(10)
    top_unmodeled["share"] = top_unmodeled["time_ns"] / total if total else np.nan
    with_tmin = is_kernel & k["t_min_ns"].notna().to_numpy()
    over = with_tmin & (k["efficiency"].to_numpy() > OVER_PEAK)
    known = total > 0 and modeled_time / total >= MIN_COVERAGE
    captured = _from_capture(k, time, is_kernel & modeled, total)
    return {
        "kernel_time_ns": total,
        "modeled_time_ns": modeled_time,
        "modeled_share": modeled_time / total if total else None,
        "modeled_share_by_source": {s: float(v) / total for s, v in by_source.items()} if total else {},
        "kernels": int(is_kernel.sum()),
        "kernels_modeled": int((is_kernel & modeled).sum()),
        "copies_time_ns": float(time[~is_kernel].sum()),
        # unknown (None), not 0/0, when the costed kernels have no time (every `dur` negative or missing: health says so)
        "over_peak_share": float(time[over].sum() / time[with_tmin].sum()) if time[with_tmin].sum() > 0 else None,
        "over_peak_kernels": int(over.sum()),
        # Efficiency of the whole capture is a measurement only when most kernel time is costed.
        "efficiency": group_efficiency(k["t_min_ns"][is_kernel], k["duration_ns"][is_kernel]) if known else None,
        "efficiency_sustained": group_efficiency(k["t_min_sustained_ns"][is_kernel], k["duration_ns"][is_kernel]) if known else None,
        "min_coverage": MIN_COVERAGE,
        "top_unmodeled": records(top_unmodeled),
        "estimated": _estimated(k, time, is_kernel, total),
        **captured,
    }


def _from_capture(k: pd.DataFrame, time: np.ndarray, costed: np.ndarray, total: float) -> dict[str, Any]:
    """With graph-capture pairing: the share of kernel time costed through a captured op
    (from its shapes or its kernel arguments, not the model)."""
    if "capture_op" not in k or not k["capture_op"].any() or not total:
        return {}
    mine = costed & k["capture_op"].to_numpy(dtype=bool) & (k["cost_source"].astype(object) != "model").to_numpy()
    return {"modeled_share_from_capture": float(time[mine].sum()) / total}


def _summed_by(key: Key, values: np.ndarray, mask: np.ndarray) -> dict[str, float]:
    """{label: sum of values} over the masked rows with a known key, by label (groupby's order)."""
    codes, labels = key
    rows = mask & (codes >= 0)
    sums = np.bincount(codes[rows], weights=values[rows], minlength=len(labels) - 1)
    present = np.bincount(codes[rows], minlength=len(labels) - 1) > 0
    return dict(sorted((labels[c], sums[c]) for c in np.flatnonzero(present)))


def _estimated(k: pd.DataFrame, time: np.ndarray, is_kernel: np.ndarray, total: float) -> list[dict[str, Any]]:
    """The kernel time whose cost is an estimate (a grouped GEMM's expected experts, where
    the routing is not recorded), per note: the note states the estimate and its bound."""
    if "cost_estimate" not in k:
        return []
    note = k["cost_estimate"].astype(object).to_numpy()
    rows = is_kernel & (note != None)  # noqa: E711 (elementwise on an object array)
    if not rows.any():
        return []
    frame = pd.DataFrame({"note": note[rows], "time_ns": time[rows]})
    g = frame.groupby("note", sort=False)["time_ns"].agg(["sum", "size"]).sort_values("sum", ascending=False)
    return [{"note": str(n), "kernels": int(r["size"]), "time_ns": float(r["sum"]), "share": float(r["sum"]) / total if total else None}
            for n, r in g.iterrows()]
