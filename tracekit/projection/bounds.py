"""What bounds each kernel on the source GPU, and the rule that moves its time to the target.

A kernel's measured time t splits into the part its roof sets and the rest:

    roof share   s  = min(1, t_sus / t)          t_sus = max(flops / peak(kind, dtype), bytes / (η · bandwidth)),
                                                 η the sustained share of a roof (hardware.DEFAULT_SUSTAINED)
    projected    t' = t · (s · t_sus' / t_sus + (1 − s))

The roof part goes by the target's roof for the same work: the matrix or vector peak for
the kernel's dtype when compute-bound, HBM bandwidth when memory-bound, the interconnect for
collectives and the host link for host copies. The rest (launch latency, tail effects,
small grids: kernels far below both roofs) keeps its time: it is set by clocks, dispatch
and the library's kernel choice, which the device table does not describe (and on the
shared H100 / MI300X pairs it does not follow the SM count: small GEMMs ran faster on the
GPU with the lower per-SM rate, small element-wise kernels slower).

A kernel without a cost goes by its kernel class (tracekit.costs.classify): attention,
GEMM and convolution kernels are compute-bound at the sizes that leave them uncosted
(long sequences, large images), so they take the matrix peak ratio of the run's dominant
matrix dtype, with a range down to the HBM ratio; any other uncosted kernel ranges from
unchanged to scaled by the bandwidth ratio of its link (point: the middle).

Each kernel's measured time is split over the rules (`rule_ns`): the report says which rule
covered how much of the time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.costs.dtypes import dominant_matrix_dtype
from tracekit.hardware import DEFAULT_SUSTAINED, Device
from tracekit.analysis.roofline import roofline

HOST_COPIES = ["HtoD", "DtoH", "HtoH", "Pageable", "Pinned"]
COMPUTE_CLASSES = ("attention", "gemm")  # uncosted: compute-bound at the sizes that leave them uncosted
RULES = ("compute", "memory", "interconnect", "host link", "latency (kept)", "uncosted: compute class", "uncosted: range")


def _ratio(a: float | None, b: float | None) -> float:
    return float(a / b) if a and b else float("nan")


def link_ratios(kernels: pd.DataFrame, source: Device, target: Device) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per kernel: source / target bandwidth of the link it moves data over (HBM, the
    interconnect for collectives, the host link for host copies; 1 where unknown), and the
    masks of host copies and collectives."""
    n = len(kernels)
    host = kernels["copy_kind"].isin(HOST_COPIES).to_numpy()
    comm = (kernels["cost_kind"].astype(object).to_numpy() == "comm") | kernels["collective"].notna().to_numpy()
    ratio = np.full(n, _ratio(source.bandwidth, target.bandwidth))
    ratio[comm] = _ratio(source.interconnect, target.interconnect)
    ratio[host] = _ratio(source.host_link_gbps, target.host_link_gbps)
    return np.where(np.isnan(ratio), 1.0, ratio), host, comm


def _class_compute_ratio(kernels: pd.DataFrame, source: Device, target: Device) -> float:
    """Matrix peak ratio (source / target) in the run's dominant matrix dtype (bf16 where the
    run has no costed matrix work); NaN where either GPU has no such peak."""
    dtype = dominant_matrix_dtype(kernels["cost_kind"], kernels["dtype"], kernels["exclusive_ns"]) or "bf16"
    return _ratio(source.peak_flops("matrix", dtype), target.peak_flops("matrix", dtype))


def kernel_rules(kernels: pd.DataFrame, source: Device, target: Device, sustained: float = DEFAULT_SUSTAINED) -> pd.DataFrame:
    """Per kernel: projected / measured time (point, low, high before the error bands of
    tracekit.projection.ranges), the roof it rests on, the rule that covered most of its
    time, its roof share s, and whether it had a cost. `sustained`: the analysis' η."""
    n = len(kernels)
    t = kernels["duration_ns"].to_numpy(dtype=np.float64)
    t_src = kernels["t_min_sustained_ns"].to_numpy(dtype=np.float64)
    on_target = roofline(kernels, kernels, target, sustained)  # the same η as the analysis
    t_dst = on_target["t_min_sustained_ns"].to_numpy(dtype=np.float64)
    bound = on_target["bound"].astype(object).to_numpy()
    link, host, comm = link_ratios(kernels, source, target)
    kind = kernels["cost_kind"].astype(object).to_numpy()
    dtype = pd.Series(kernels["dtype"].astype(object)).fillna("?").astype(str).to_numpy()

    with np.errstate(divide="ignore", invalid="ignore"):
        roof_ratio = np.where(t_src > 0, t_dst / t_src, np.where(t_src == 0, 1.0, np.nan))
        share = np.where(t > 0, np.minimum(1.0, t_src / t), 1.0)
    costed = ~np.isnan(roof_ratio)
    share = np.where(costed & (t_src > 0), share, np.where(costed, 0.0, np.nan))
    point = np.where(costed, share * roof_ratio + (1.0 - share), np.nan)

    klass = kernels["kernel_class"].astype(object).to_numpy() if "kernel_class" in kernels.columns else np.full(n, None)
    compute_class = ~costed & np.isin(klass, COMPUTE_CLASSES) & ~host & ~comm
    peak = _class_compute_ratio(kernels, source, target)
    if np.isnan(peak):
        compute_class[:] = False
    low = np.where(costed, point, np.minimum(1.0, link))
    high = np.where(costed, point, np.maximum(1.0, link))
    point = np.where(costed, point, (low + high) / 2)
    if compute_class.any():
        point[compute_class] = peak
        low[compute_class] = np.minimum(peak, link[compute_class])
        high[compute_class] = np.maximum(peak, link[compute_class])

    roof_label = np.where(host, "host link", np.where(comm | (bound == "comm"), "interconnect",
                          np.where(bound == "compute", "compute", "memory")))
    rule = np.where(~costed, np.where(compute_class, "uncosted: compute class", "uncosted: range"),
                    np.where(share >= 0.5, roof_label, "latency (kept)"))
    roof = np.where(~costed, np.where(compute_class, "matrix peak (class)", np.char.add("no cost: 1x–", roof_label.astype(str))),
                    np.where(roof_label == "compute", np.char.add(np.where(kind == "matrix", "matrix ", "vector ").astype(str), dtype),
                             roof_label.astype(str)))
    return pd.DataFrame({"ratio": point, "low": low, "high": high, "roof": roof, "rule": rule, "roof_share": share,
                         "costed": costed, "roof_rule": roof_label, "roof_ratio": roof_ratio}, index=kernels.index)


def rule_time(kernels: pd.DataFrame, r: pd.DataFrame) -> dict[str, float]:
    """Measured busy time (exclusive) per rule: a costed kernel's time splits s to its roof's
    rule and 1 − s to "latency (kept)"; an uncosted kernel's goes whole to its uncosted rule."""
    excl = kernels["exclusive_ns"].to_numpy(dtype=np.float64)
    share = r["roof_share"].to_numpy(dtype=np.float64)
    costed = r["costed"].to_numpy()
    out = {x: 0.0 for x in RULES}
    roof = r["roof_rule"].to_numpy()
    for name in ("compute", "memory", "interconnect", "host link"):
        out[name] = float((excl * np.nan_to_num(share))[costed & (roof == name)].sum())
    out["latency (kept)"] = float((excl * (1.0 - np.nan_to_num(share)))[costed].sum())
    rule = r["rule"].to_numpy()
    for name in ("uncosted: compute class", "uncosted: range"):
        out[name] = float(excl[rule == name].sum())
    return out
