"""The headline: 3 to 5 plain sentences, where the GPU time went, what bounds it, how
efficient it is (only where at least half the time has a cost), what is missing, and the
first causes of the ranked list (analysis.causes), in that list's own figures."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from tracekit.analysis.causes import IDLE_WHAT
from tracekit.costs.unknown import MIN_COVERAGE
from tracekit.common.format import duration, middle, percent, percent_against, rounded_percent
from tracekit.trace.grouping import key_of
from tracekit.trace.health import kernel_times_unknown

if TYPE_CHECKING:
    from tracekit.analysis.measured import Measured

HEADLINE_MIN_SHARE = 0.01  # a loss under 1% of the denominator is no headline
HEADLINE_NAME = 60  # characters of an op, kernel or host-code name in the headline


def sentence(c: dict[str, Any], denominator: str, causes: list[dict[str, Any]]) -> str:
    """One cause of the ranked list as a sentence, with its share of the one denominator."""
    from tracekit.trace.kernel_names import labels

    share = f"{rounded_percent(c['share'])} of {denominator}"
    e = c["evidence"]
    kind = c["cause"]
    if kind.startswith("idle_"):
        h = e.get("host")
        host = f"; the host was in {h['kind']} {middle(h['name'], HEADLINE_NAME)} for {duration(h['idle_ns'])} of it" if h else ""
        category = kind.removeprefix("idle_outside_").removeprefix("idle_")
        first_wait = next((x for x in causes if x["cause"].endswith("host_wait")), None) is c
        profiler = _profiler_clause(causes) if first_wait else ""
        return (f"{duration(c['time_ns'])} ({share}) is GPU idle {e['where']}, {IDLE_WHAT.get(category, category)}"
                f"{host}{profiler}.")
    if kind == "copies":
        return (f"Copies and memsets no kernel hides take {duration(c['time_ns'])} ({share}), most of it "
                f"{middle(e['copy'], HEADLINE_NAME)} ({duration(e['copy_ns'])} in {e['calls']:,} calls).")
    if kind == "exposed_communication":
        top = e["kernel"]
        return (f"Communication no compute hides takes {duration(c['time_ns'])} ({share}), most of it in "
                f"{middle(labels([top])[top], HEADLINE_NAME)} ({duration(e['exposed_ns'])}).")
    if kind == "recoverable":
        name = (f"{e['op']} {e['shapes']}".strip() if "op" in e else labels([e["kernel"]])[e["kernel"]])
        return (f"Kernel time above the sustained roofline is {duration(c['time_ns'])} ({share}); the largest part is "
                f"{middle(name, HEADLINE_NAME)}: {duration(e['recoverable_ns'])}.")
    return f"{c['what']}: {duration(c['time_ns'])} ({share})."


def _profiler_clause(causes: list[dict[str, Any]]) -> str:
    """For a host-bound verdict: how much of the host's launch-call time is above the same
    call's fastest runs (what the profiler's instrumentation adds, at most)."""
    p = next((c for c in causes if c["cause"] == "profiler_overhead"), None)
    if p is None:
        return ""
    e = p["evidence"]
    return (f"; of the {duration(e['launch_ns'])} the host spent in launch calls, {duration(p['time_ns'])} is above the "
            f"same call's fastest runs (the profiler's own share at most: a profiled eager run is slower on the host)")


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


def _how_to_cost(a: Measured) -> str:
    reasons = pd.Series({r["reason"]: r["time_ns"] for r in a.coverage.get("top_unmodeled") or []}, dtype=float)
    fmt = a.meta.get("format")
    if _tensorrt(a):  # a TensorRT engine: layers are NVTX ranges without shapes; no PyTorch op to record
        record = "a TensorRT engine records its layers without tensor shapes (emit_nvtx does not apply to it)"
    elif fmt == "nsys":
        record = "record with torch.autograd.profiler.emit_nvtx(record_shapes=True)"
    else:
        record = "record with torch.profiler.profile(record_shapes=True)"
    notes = getattr(a, "model_notes", None)
    if notes is not None:  # --model was given: say what it lacked, not to pass it again
        flags = [f for f in ("--batch", "--context") if any(f in n for n in notes)]
        missing = f"pass {' and '.join(flags)} to complete the model's steps" if flags else "the model's blocks did not cover the rest"
        graphs = len(reasons) and "graph" in str(reasons.idxmax())
        return f"{missing}{', or pass --capture CAPTURE.json (the graph capture profile)' if graphs else ''}, or {record}"
    if len(reasons):
        top = str(reasons.idxmax())
        if "graph" in top or "before the capture" in top:
            return f"most of it is {top.split(':')[0]}: pass --model config.json to cost it from the model"
    return f"{record}, or pass --model config.json"


def _block_shares(a: Measured) -> list[tuple[tuple[str, str], float]]:
    """Phase x block shares of GPU time: the blocks table's own figures, so the headline and
    the table never print two numbers for one thing."""
    return [((r["phase"], r["block"]), r["share"]) for r in a.blocks.to_dict(orient="records")]


def headline(a: Measured, f) -> list[str]:
    """3 to 5 plain sentences: where the GPU time went, what bounds it, how efficient it is
    (only where at least half the time has a cost), what is missing, and the largest win."""
    c = a.coverage
    b = a.blocks
    sentences = []
    if len(b):
        shares = _block_shares(a)
        parts = [f"{phase} / {block} {percent(share)}" for (phase, block), share in shares[:3]]
        idle = (f.idle["idle_ns"].sum() if len(f.idle) else 0.0) + float(f.outside.get("idle_ns") or 0.0)
        where = f"GPU time went to {', '.join(parts)} (of all GPU time, as in the blocks table)"
        if f.denominator_ns:
            where += f"; the GPU was idle {rounded_percent(idle / f.denominator_ns)} of the {f.denominator}"
        sentences.append(where + ".")
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
    apart = " (communication apart)" if comm.any() else ""
    if modeled.any() and work_covered >= HEADLINE_MIN_SHARE:  # the bound of 0.3% of the time says nothing of the run
        t = t_all[modeled]
        bound = key_of(k["bound"], missing="nan")
        time_by_bound = np.bincount(bound[0][modeled] + 1, weights=t, minlength=len(bound[1]))  # code -1 (missing) first
        present = np.bincount(bound[0][modeled] + 1, minlength=len(bound[1])) > 0
        labels = np.r_[bound[1][-1:], bound[1][:-1]]
        by_bound = pd.Series(time_by_bound[present], index=labels[present]).sort_index().sort_values(ascending=False) / t.sum()
        parts = [f"{rounded_percent(v)} {b}-bound" for b, v in by_bound.items() if v >= 0.005]
        if parts:
            of = (f"the kernel time with a cost{apart}" if work_covered >= MIN_COVERAGE
                  else f"the {rounded_percent(work_covered)} of kernel time with a cost{apart}")
            sentences.append(f"Of {of}, {parts[0].replace(' ', ' is ', 1)}"
                             f"{' and ' + parts[1] if len(parts) > 1 else ''}.")
    t_min_sustained, t_min = k["t_min_sustained_ns"].to_numpy(dtype=float), k["t_min_ns"].to_numpy(dtype=float)
    measured = t_all[modeled].sum()
    if a.device is not None and work_covered >= MIN_COVERAGE and measured > 0:
        sentences.append(f"Those kernels run at {rounded_percent(t_min_sustained[modeled].sum() / measured)} of the sustained roofline "
                         f"({rounded_percent(t_min[modeled].sum() / measured)} of peak), over {rounded_percent(work_covered)} of GPU "
                         f"kernel time{apart}.")
    elif a.device is None and (share := _costed_share(k)) >= MIN_COVERAGE:
        # costs without a device: FLOPs and bytes are known, no roofline to hold them against
        sentences.append(f"{rounded_percent(share)} of GPU kernel time has a cost (FLOPs and bytes), but the GPU is not in the "
                         "device table: pass --device NAME (see `tracekit devices`) to state an efficiency.")
    else:
        sentences.append(f"Only {percent_against(work_covered if comm.any() else covered, MIN_COVERAGE)} of GPU kernel time{apart} has a cost, "
                         f"too little to state an efficiency; {_how_to_cost(a)}.")
    # What to fix first, ranked by time: the first two GPU-time causes of at least
    # HEADLINE_MIN_SHARE of the one denominator (the ranked list's own rows and figures)
    gpu_rows = [c for c in f.causes if c.get("cumulative_share") is not None]
    sentences += [c["sentence"] for c in gpu_rows if f.denominator_ns and c["time_ns"] >= HEADLINE_MIN_SHARE * f.denominator_ns][:2]
    return sentences[:5]


def lost_times_headline(a: Measured) -> str:
    """The trace's GPU activities had no times (trace.health): what is known is the GPU
    annotations' windows, used as the steps."""
    lost = sum(p["count"] for p in a.meta.get("health") or [] if p["kind"] in ("kernel", "memcpy", "memset")
               and p["problem"].startswith("have ts 0"))
    text = (f"The profiler lost the times of every GPU activity ({lost:,} kernels, copies and memsets have ts 0 and dur 0): "
            "kernel-level figures (GPU time, idle, shares, efficiency) are unknown.")
    if len(a.steps):
        wall = a.steps["duration_ns"].to_numpy(dtype=np.float64)
        text += (f" The {len(wall):,} steps are the GPU annotations' windows ({duration(float(wall.sum()))} in all, "
                 f"median {duration(float(np.median(wall)))}).")
    else:
        text += " No GPU annotation kept its time either: the trace has no step on the GPU."
    return text


def cpu_headline(a: Measured) -> list[str]:
    if kernel_times_unknown(a.meta):
        return [lost_times_headline(a)]
    if any("cut short" in w for w in a.warnings):  # a GPU trace may have lost its GPU events
        return ["The part of the trace that could be read (it is cut short) holds no GPU activity: "
                "its ops are costed against CPU time, with no roofline."]
    return ["The trace holds no GPU activity (a CPU-only profile): its ops are costed against CPU time, with no roofline."]
