"""Kernels rolled up by a key: time, FLOPs, bytes, roofline minimum, coverage, achieved
rates, efficiency and bound per group; the phase x block table and the kernels by name."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tracekit.costs.unknown import covered, majority_bound, mask_unknown
from tracekit.trace.column_text import as_text as text_of, category_text
from tracekit.trace.grouping import Key, group_rows, key_of, label_column


def rollup_columns(k: pd.DataFrame) -> dict[str, np.ndarray]:
    """The per-kernel values kernel_rollup sums, as plain arrays (taken once per table)."""
    return {
        "time": k["duration_ns"].to_numpy(dtype=np.float64), "flops": k["flops"].to_numpy(dtype=np.float64),
        "bytes": (k["bytes_read"] + k["bytes_written"]).to_numpy(dtype=np.float64),
        "t_min_ns": k["t_min_ns"].to_numpy(dtype=np.float64), "t_min_sustained_ns": k["t_min_sustained_ns"].to_numpy(dtype=np.float64),
        "bound": k["bound"].astype(object).to_numpy(),
    }


def kernel_rollup(columns: dict[str, np.ndarray], keys: dict[str, Key], extra: dict[str, Any] | None = None,
                  firsts: dict[str, np.ndarray] | None = None) -> pd.DataFrame:
    """Group kernels by `keys` (column name -> codes and labels, tracekit.trace.grouping) and sum
    what rolls up (`columns`, from rollup_columns): time, FLOPs, bytes, t_min; derive
    coverage, achieved rates and efficiency over the time of the kernels with a cost, and
    the majority bound. Figures from less than half of a group's time are unknown
    (tracekit.costs.unknown). Rows with a missing key are left out; groups come in order of first
    appearance. `extra`: more per-kernel values to sum; `firsts`: per-kernel values taken
    from each group's first kernel."""
    time, bound = columns["time"], columns["bound"]
    groups = group_rows(list(keys.values()), len(time))
    count, total = groups.size, groups.sum(time)
    flops, nbytes = groups.known_sum(columns["flops"]), groups.known_sum(columns["bytes"])
    t_min, t_min_sustained = groups.known_sum(columns["t_min_ns"]), groups.known_sum(columns["t_min_sustained_ns"])
    costed_ns, roofed_ns = groups.sum(time, ~np.isnan(columns["flops"])), groups.sum(time, ~np.isnan(columns["t_min_ns"]))
    by_bound = {b: groups.sum(time, bound == b) for b in BOUNDS}
    # Over the time of the kernels that have a cost: the FLOPs and bytes are theirs alone.
    costed_or_nan = np.where(costed_ns > 0, costed_ns, np.nan)
    roofed_or_nan = np.where(roofed_ns > 0, roofed_ns, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        g = pd.DataFrame({
            **{name: label_column(key, groups.first) for name, key in keys.items()},
            "count": count, "time_ns": total, "flops": flops, "bytes": nbytes, "t_min_ns": t_min, "t_min_sustained_ns": t_min_sustained,
            **{name: groups.sum(np.asarray(values)) for name, values in (extra or {}).items()},
            **{name: np.asarray(values)[groups.first] for name, values in (firsts or {}).items()},
            "coverage": covered(costed_ns, total),
            "achieved_tflops": flops / costed_or_nan / 1e3, "achieved_tbps": nbytes / costed_or_nan / 1e3,
            "intensity": flops / np.where(nbytes > 0, nbytes, np.nan),
            "efficiency": t_min / roofed_or_nan, "efficiency_sustained": t_min_sustained / roofed_or_nan,
            "bound": majority_bound(by_bound, roofed_ns),
        })
    return mask_unknown(g, g["coverage"], UNKNOWN_BELOW_COVERAGE)


BOUNDS = ("compute", "memory", "comm")
# The figures that describe a group's work: unknown when its costs cover < half its time.
UNKNOWN_BELOW_COVERAGE = ["flops", "bytes", "t_min_ns", "t_min_sustained_ns", "achieved_tflops", "achieved_tbps", "intensity",
                          "efficiency", "efficiency_sustained", "bound"]
BLOCK_COLUMNS = ["phase", "block", "gpu_time_ns", "share", "kernel_time_ns", "count", "flops", "bytes", "achieved_tflops",
                 "achieved_tbps", "efficiency", "efficiency_sustained", "bound", "coverage"]


def block_table(k: pd.DataFrame) -> pd.DataFrame:
    """Phase x block: GPU time (overlap counted once), share of busy time, kernels, FLOPs,
    bytes, achieved TFLOP/s and TB/s, roofline efficiency over modeled kernels, bound, coverage."""
    if k.empty:
        return pd.DataFrame(columns=BLOCK_COLUMNS)
    g = kernel_rollup(rollup_columns(k), {"phase": key_of(k["phase"]), "block": key_of(k["block"])},
                      extra={"gpu_time_ns": k["exclusive_ns"].to_numpy()})
    g = g.rename(columns={"time_ns": "kernel_time_ns"})
    busy = g["gpu_time_ns"].sum()
    g["share"] = g["gpu_time_ns"] / busy if busy else np.nan
    return g[BLOCK_COLUMNS].sort_values("gpu_time_ns", ascending=False).reset_index(drop=True)


def kernel_summary(k: pd.DataFrame, copies: bool = False) -> pd.DataFrame:
    """Every kernel name, by time: count, time, share of kernel time, costs, rates,
    efficiency, bound. Kernels only; with `copies`, the memcpy and memset activities
    instead (share of copy time). Computed once in build; summaries and reports take its head."""
    is_kernel = (k["kind"] == "kernel").to_numpy()
    k = k[~is_kernel if copies else is_kernel]
    g = kernel_rollup(rollup_columns(k), {"name": key_of(k["name"])},
                      extra={"over_peak": k["over_peak"].to_numpy().astype(np.int64)},
                      firsts={"kernel_class": text_of(k["kernel_class"])})
    total = g["time_ns"].sum()
    g["share"] = g["time_ns"] / total if total else np.nan
    cols = ["name", "kernel_class", "count", "time_ns", "flops", "bytes", "t_min_ns", "t_min_sustained_ns", "over_peak", "share",
            "achieved_tflops", "achieved_tbps", "intensity", "efficiency", "efficiency_sustained", "bound", "coverage"]
    return g[cols].sort_values("time_ns", ascending=False).reset_index(drop=True)




def duration_sketches(k: pd.DataFrame, names: list[str], points: int = 20) -> dict[str, list[float]]:
    """Per kernel name in `names`: a sketch of its calls' durations (at most `points` values,
    each the quantile (i + 0.5) / points, or every duration when there are fewer): what
    tracekit.compare.noise resamples to tell a change from noise. Grouped by the name's
    category code (one pass, no string sort), so build can sketch every name at once."""
    if not len(k) or not len(names):
        return {}
    from tracekit.common.sketch import sketch

    cat = k["name"] if isinstance(k["name"].dtype, pd.CategoricalDtype) else k["name"].astype("category")
    categories = np.array(category_text(cat.cat.categories), dtype=object)
    codes = cat.cat.codes.to_numpy()
    # A hash lookup per category: np.isin over object arrays compares every category with
    # every name (quadratic: 100k distinct names took 85 s, issue 39).
    wanted = set(names)
    wanted_code = np.fromiter((c in wanted for c in categories), dtype=bool, count=len(categories))
    rows = np.flatnonzero((codes >= 0) & wanted_code[np.maximum(codes, 0)])
    if not len(rows):
        return {}
    chosen, durations = codes[rows], k["duration_ns"].to_numpy(dtype=np.float64)[rows]
    order = np.lexsort((durations, chosen))  # by name, then duration: a group of few calls is its own sketch
    chosen, durations = chosen[order], durations[order]
    cuts = np.flatnonzero(chosen[1:] != chosen[:-1]) + 1
    starts, ends = np.r_[0, cuts], np.r_[cuts, len(chosen)]
    # Only names with more calls than points need sketch's quantiles (numpy's per-call
    # overhead, ~10 µs, was 8 s for 100k names of one call each); the durations of the
    # others are their sketch, rounded in one pass and sliced per name.
    few = (ends - starts) <= points
    in_few = np.repeat(few, ends - starts)
    rounded = [round(x, 1) for x in durations[in_few].tolist()]
    at = np.cumsum(np.r_[0, np.where(few, ends - starts, 0)])[:-1]  # where each name's values start in `rounded`
    named = categories[chosen[starts]].tolist()  # (category_text: already str)
    return {name: rounded[a:a + hi - lo] if small else sketch(durations[lo:hi], points)
            for name, lo, hi, a, small in zip(named, starts.tolist(), ends.tolist(), at.tolist(), few.tolist())}
