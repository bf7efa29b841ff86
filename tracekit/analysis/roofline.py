"""The roofline: how close each kernel runs to what the device allows.

    t_min      = max(flops / peak(kind, dtype), bytes / bandwidth)
    efficiency = t_min / measured time           (also against sustained bandwidth)
    bound      = whichever term of t_min is larger: compute, memory, or comm

Bandwidth is HBM for kernels, the interconnect for collectives and the host link for
host<->device copies. Groups aggregate as sum(t_min) / sum(measured). Efficiency over 100%
is flagged (cache-resident data, or a model error), never clipped.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.costs.dtypes import dominant_matrix_dtype
from tracekit.trace.grouping import group_rows, key_of, label_column
from tracekit.hardware import DEFAULT_SUSTAINED, Device

OVER_PEAK = 1.05  # efficiencies above this are counted as "above the roofline"
ROOFLINE_COLUMNS = ["t_min_ns", "t_min_sustained_ns", "efficiency", "efficiency_sustained", "bound", "intensity",
                    "achieved_tflops", "achieved_tbps", "over_peak"]


def roofline(kernels: pd.DataFrame, costs: pd.DataFrame, device: Device | None, sustained: float = DEFAULT_SUSTAINED) -> pd.DataFrame:
    """Roofline columns for every kernel (NaN where its cost is unknown)."""
    if device is None or not len(kernels):
        empty = pd.DataFrame({c: np.full(len(kernels), np.nan) for c in ROOFLINE_COLUMNS}, index=kernels.index)
        return empty.assign(bound=pd.Categorical([None] * len(kernels)), over_peak=np.zeros(len(kernels), dtype=bool))
    measured = (kernels["end"] - kernels["start"]).to_numpy(dtype=np.float64)
    flops = costs["flops"].to_numpy(dtype=np.float64)
    nbytes = (costs["bytes_read"] + costs["bytes_written"]).to_numpy(dtype=np.float64)
    kind = costs["cost_kind"].astype(object).to_numpy()

    # one peak per distinct (cost kind, dtype); kernels missing either have none
    cost_kind, dtype = key_of(costs["cost_kind"]), key_of(costs["dtype"])
    groups = group_rows([cost_kind, dtype], len(kernels))
    peaks = [device.peak_flops(k, d) if k in ("matrix", "vector", "comm") else None
             for k, d in zip(label_column(cost_kind, groups.first), label_column(dtype, groups.first))]
    peak = np.array([p if p else np.nan for p in peaks] + [np.nan])[groups.group]  # group -1 (none): the last, NaN
    bandwidth = np.full(len(kernels), device.bandwidth)
    bandwidth[kind == "comm"] = device.interconnect if device.interconnect else np.nan
    host = kernels["copy_kind"].isin(["HtoD", "DtoH", "HtoH", "Pageable", "Pinned"]).to_numpy()
    bandwidth[host] = device.host_link_gbps * 1e9

    # No FLOPs needs no compute peak; FLOPs without a peak for their dtype leave t_min unknown.
    t_compute = np.where(flops > 0, flops / peak * 1e9, 0.0)
    t_memory = nbytes / bandwidth * 1e9
    t_min = np.maximum(t_compute, t_memory)
    t_min_sustained = np.maximum(t_compute, t_memory / sustained)
    with np.errstate(divide="ignore", invalid="ignore"):
        efficiency = np.where(measured > 0, t_min / measured, np.nan)
        efficiency_sustained = np.where(measured > 0, t_min_sustained / measured, np.nan)
        intensity = np.where(nbytes > 0, flops / nbytes, np.nan)
        # A 0 ns activity (whole-microsecond timestamps in old traces) has no rate, not an infinite one.
        achieved_tflops = np.where(measured > 0, flops / measured / 1e3, np.nan)
        achieved_tbps = np.where(measured > 0, nbytes / measured / 1e3, np.nan)
    # Collectives are bound by communication whatever their FLOPs (a reduction's adds never
    # dominate a link); other work by whichever roofline term is larger.
    bound = np.where(np.isnan(t_min), None, np.where(kind == "comm", "comm", np.where(t_compute >= t_memory, "compute", "memory")))
    return pd.DataFrame({
        "t_min_ns": t_min, "t_min_sustained_ns": t_min_sustained,
        "efficiency": efficiency, "efficiency_sustained": efficiency_sustained,
        "bound": pd.Categorical(bound), "intensity": intensity,
        "achieved_tflops": achieved_tflops, "achieved_tbps": achieved_tbps,
        "over_peak": efficiency > OVER_PEAK,
    }, index=kernels.index)


def group_efficiency(t_min: pd.Series, measured: pd.Series) -> float:
    """sum(t_min) / sum(measured) over the kernels with a t_min."""
    known = t_min.notna()
    total = measured[known].sum()
    return float(t_min[known].sum() / total) if total > 0 else float("nan")


def roof_flops(device: Device, kernels: pd.DataFrame) -> tuple[float, str]:
    """Peak FLOP/s (and its label) of the roof for this run: the matrix peak of its dominant
    matrix dtype, else the fp32 vector peak."""
    dtype = dominant_matrix_dtype(kernels["cost_kind"], kernels["dtype"], kernels["end"] - kernels["start"]) \
        if len(kernels) and "cost_kind" in kernels else None
    peak = device.peak_flops("matrix", dtype) if dtype else None
    if peak:
        return peak, f"matrix {dtype}"
    fp32 = device.vector_tflops.get("fp32") or max(device.vector_tflops.values(), default=0.0)
    return fp32 * 1e12, "vector fp32"
