"""The headline's figures: where the GPU time went, what bounds it, how efficient it is (only
where at least half the time has a cost), what is missing, and which causes of the ranked
list (analysis.causes) lead it. The words are tracekit.reports.headline's: this module
decides what is said and with which numbers, reports say it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from tracekit.attribution.program_blocks import PROGRAM_BASIS

from tracekit.costs.unknown import MIN_COVERAGE
from tracekit.trace.grouping import key_of
from tracekit.trace.health import kernel_times_unknown

if TYPE_CHECKING:
    from tracekit.analysis.measured import Measured

HEADLINE_MIN_SHARE = 0.01  # a loss under 1% of the denominator is no headline


@dataclass(frozen=True)
class HowToCost:
    """What would give the uncosted kernel time a cost."""

    recorder: str  # "tensorrt" (layers without shapes), "nsys" (emit_nvtx) or "torch" (record_shapes)
    model_flags: tuple[str, ...] | None  # with --model: the flags its notes ask for (None: no --model)
    graphs: bool  # with --model: most of the uncosted time is CUDA-graph replays
    graph_reason: str | None  # without --model: the top reason where it is graphs / before the capture


@dataclass(frozen=True)
class Headline:
    """The figures of the 3 to 5 headline sentences (tracekit.reports.headline says them)."""

    kind: str  # "gpu"; without GPU activity: "times_lost", "cut_short" or "cpu"
    blocks: tuple[tuple[str, str, float], ...] = ()  # the top 3 (phase, block, share of busy_ns)
    busy_ns: float = 0.0  # the blocks' denominator: GPU busy time of the whole trace (overlap counted once)
    idle_share: float | None = None  # GPU idle / the causes' denominator (None: no denominator)
    denominator: str = ""
    bounds: tuple[tuple[str, float], ...] = ()  # (bound, share of the costed kernel time), >= 0.5%, largest first
    work_covered: float = 0.0  # share of kernel time (communication apart) with a cost
    comm_apart: bool = False  # the trace has communication kernels, left out of the figures
    efficiency: tuple[float, float] | None = None  # costed kernels' share of the sustained roofline, of peak
    costed_without_device: float | None = None  # share of kernel time with a cost where the GPU is unknown
    costed_without_peak: tuple[float, tuple[str, ...]] | None = None  # costed share, and the dtypes the device has no peak for
    coverage_short: float | None = None  # too little has a cost: that share (against MIN_COVERAGE)
    how_to_cost: HowToCost | None = None
    causes: tuple[int, ...] = ()  # rows of the ranked causes the headline names (at most two)
    lost_activities: int = 0  # times_lost: GPU activities with ts 0 and dur 0
    step_walls: tuple[int, float, float] | None = None  # times_lost: steps, their total and median wall (ns)


def _costed_share(k: pd.DataFrame) -> float:
    """The share of GPU kernel time whose kernels have a cost (FLOPs known)."""
    kernel = (k["kind"] == "kernel").to_numpy()
    t = k["duration_ns"].to_numpy(dtype=float)
    total = t[kernel].sum()
    return float(t[kernel & k["flops"].notna().to_numpy()].sum() / total) if total else 0.0


# TensorRT writes its layers as NVTX ranges in the "TensorRT" domain (or names them
# "[TensorRT] ..." / ExecutionContext::enqueue*), and Myelin-fused kernels start with __myl_.
_TENSORRT_RANGE = re.compile(r"(?i)^(\[tensorrt\]|tensorrt\b)|^ExecutionContext::(enqueue|execute)")
_TENSORRT_KERNEL = re.compile(r"^(__myl_|trt_|_trt_)")


def _tensorrt(a: Measured) -> bool:
    if a.trace is None:
        return False
    r = a.trace.ranges
    if len(r):
        domains = {str(d) for d in r["domain"].astype("category").cat.categories}
        names = [str(n)[:128] for n in r["name"].astype("category").cat.categories]
        # the nsys parser writes an NVTX domain as "nvtx:<name>"
        if any(d.lower().removeprefix("nvtx:") == "tensorrt" for d in domains) or any(_TENSORRT_RANGE.search(n) for n in names):
            return True
    kernels = a.kernels["name"].astype("category").cat.categories if len(a.kernels) else []
    return any(_TENSORRT_KERNEL.search(str(n)[:64]) for n in kernels)


def _how_to_cost(a: Measured) -> HowToCost:
    reasons = pd.Series({r["reason"]: r["time_ns"] for r in a.coverage.get("top_unmodeled") or []}, dtype=float)
    # a TensorRT engine: layers are NVTX ranges without shapes; no PyTorch op to record
    recorder = "tensorrt" if _tensorrt(a) else "nsys" if a.meta.get("format") == "nsys" else "torch"
    if recorder != "tensorrt" and a.meta.get("blocks_basis") == PROGRAM_BASIS:  # no framework op: no shapes to record, no model
        return HowToCost("program", None, False, None)
    notes = getattr(a, "model_notes", None)
    if notes is not None:  # --model was given: say what it lacked, not to pass it again
        flags = tuple(f for f in ("--batch", "--context") if any(f in n for n in notes))
        return HowToCost(recorder, flags, bool(len(reasons) and "graph" in str(reasons.idxmax())), None)
    top = str(reasons.idxmax()) if len(reasons) else ""
    graph_reason = top if top and ("graph" in top or "before the capture" in top) else None
    return HowToCost(recorder, None, False, graph_reason)


def _block_shares(a: Measured) -> list[tuple[tuple[str, str], float]]:
    """Phase x block shares of GPU time: the blocks table's own figures, so the headline and
    the table never print two numbers for one thing."""
    return [((r["phase"], r["block"]), r["share"]) for r in a.blocks.to_dict(orient="records")]


def headline(a: Measured, f) -> Headline:
    """What the headline says, in figures: where the GPU time went, what bounds it, how
    efficient it is (only where at least half the time has a cost), what is missing, and the
    largest wins (the ranked causes' rows)."""
    c = a.coverage
    facts: dict = {"kind": "gpu", "denominator": f.denominator}
    if len(a.blocks):
        facts["blocks"] = tuple((phase, block, share) for (phase, block), share in _block_shares(a)[:3])
        # a block's share is of the GPU's busy time (the blocks table's, kernels before the first
        # step included), the idle share of the step time: two denominators, each said where printed
        facts["busy_ns"] = float(a.blocks["gpu_time_ns"].sum())
        idle = (f.idle["idle_ns"].sum() if len(f.idle) else 0.0) + float(f.outside.get("idle_ns") or 0.0)
        facts["idle_share"] = idle / f.denominator_ns if f.denominator_ns else None
    k = a.kernels
    # kernels only: a costed memcpy says nothing of what bounds the kernels; communication
    # apart: a collective that spins while it waits for its peers is not interconnect-bound,
    # and its loss is its exposed time (a cause below), not a roofline gap
    kernel = (k["kind"] == "kernel").to_numpy()
    comm = kernel & (k["block"] == "collective").to_numpy()
    work = kernel & ~comm
    modeled = k["t_min_ns"].notna().to_numpy() & work
    t_all = k["duration_ns"].to_numpy(dtype=float)
    covered = float(c.get("modeled_share") or 0.0)
    work_covered = float(t_all[modeled].sum() / t_all[work].sum()) if t_all[work].sum() else 0.0
    facts["work_covered"], facts["comm_apart"] = work_covered, bool(comm.any())
    if modeled.any() and work_covered >= HEADLINE_MIN_SHARE:  # the bound of 0.3% of the time says nothing of the run
        t = t_all[modeled]
        bound = key_of(k["bound"], missing="nan")
        time_by_bound = np.bincount(bound[0][modeled] + 1, weights=t, minlength=len(bound[1]))  # code -1 (missing) first
        present = np.bincount(bound[0][modeled] + 1, minlength=len(bound[1])) > 0
        labels = np.r_[bound[1][-1:], bound[1][:-1]]
        by_bound = pd.Series(time_by_bound[present], index=labels[present]).sort_index().sort_values(ascending=False) / t.sum()
        facts["bounds"] = tuple((str(b), float(v)) for b, v in by_bound.items() if v >= 0.005)
    t_min_sustained, t_min = k["t_min_sustained_ns"].to_numpy(dtype=float), k["t_min_ns"].to_numpy(dtype=float)
    measured = t_all[modeled].sum()
    if a.device is not None and work_covered >= MIN_COVERAGE and measured > 0:
        facts["efficiency"] = (t_min_sustained[modeled].sum() / measured, t_min[modeled].sum() / measured)
    elif a.device is None and (share := _costed_share(k)) >= MIN_COVERAGE:
        facts["costed_without_device"] = share  # FLOPs and bytes are known, no roofline to hold them against
    elif t_all[work].sum() and (share := float(t_all[work & k["flops"].notna().to_numpy()].sum() / t_all[work].sum())) \
            >= MIN_COVERAGE:
        # the same kernels as work_covered (communication apart) have a cost, but no roofline
        # time: the device table has no peak for their dtype (int64 fills)
        no_roof = work & k["flops"].notna().to_numpy() & ~modeled
        dtypes = tuple(sorted({str(d) for d in k["dtype"].astype(object).to_numpy()[no_roof] if isinstance(d, str)}))
        facts["costed_without_peak"] = (share, dtypes)
    else:
        facts["coverage_short"] = work_covered if comm.any() else covered
        facts["how_to_cost"] = _how_to_cost(a)
    # What to fix first, ranked by time: the first two GPU-time causes of at least
    # HEADLINE_MIN_SHARE of the one denominator (the ranked list's own rows and figures)
    facts["causes"] = tuple([i for i, c in enumerate(f.causes) if c.get("cumulative_share") is not None
                             and f.denominator_ns and c["time_ns"] >= HEADLINE_MIN_SHARE * f.denominator_ns][:2])
    return Headline(**facts)


def cpu_headline(a: Measured) -> Headline:
    """No GPU activity: the profiler lost every GPU time (the GPU annotations' windows are the
    steps), the trace is cut short, or it is a CPU-only profile."""
    if kernel_times_unknown(a.meta):
        lost = sum(p["count"] for p in a.meta.get("health") or [] if p["kind"] in ("kernel", "memcpy", "memset")
                   and p["problem"].startswith("have ts 0"))
        walls = None
        if len(a.steps):
            wall = a.steps["duration_ns"].to_numpy(dtype=np.float64)
            walls = (len(wall), float(wall.sum()), float(np.median(wall)))
        return Headline(kind="times_lost", lost_activities=lost, step_walls=walls)
    if any("cut short" in w for w in a.warnings):  # a GPU trace may have lost its GPU events
        return Headline(kind="cut_short")
    return Headline(kind="cpu")
