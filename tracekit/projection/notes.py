"""What a device projection rests on, in words: the assumptions, the kernels far below their
roof, and why throughput does (or does not) follow the bandwidth ratio."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from tracekit.hardware import Device
from tracekit.projection import ranges

if TYPE_CHECKING:
    from tracekit.analysis.result import Analysis

# A kernel below this fraction of its binding roof is not limited by that roof (see far_from_roof).
FAR_FROM_ROOF = 0.05


def far_from_roof(a: Analysis) -> dict[str, Any] | None:
    """The costed kernels below FAR_FROM_ROOF of their roof on the source, when they hold at
    least FAR_FROM_ROOF of the busy time: their share, and the (op, shapes) group with the
    most of their time (its kernels, time, and time-weighted efficiency), else None."""
    k = a.kernels
    eff = k["efficiency"].to_numpy(dtype=np.float64)
    excl = k["exclusive_ns"].to_numpy(dtype=np.float64)
    busy = float(excl.sum())
    slow = eff < FAR_FROM_ROOF  # NaN (no cost) is not slow
    if busy <= 0 or excl[slow].sum() < FAR_FROM_ROOF * busy:
        return None
    ops = a.trace.ops if a.trace is not None else None
    op = k["op"].to_numpy()
    dims = ops["input_dims"].to_numpy() if ops is not None and len(ops) else np.zeros(0, dtype=object)
    shapes = np.array([str(dims[o]) if 0 <= o < len(dims) else "" for o in op], dtype=object)
    frame = pd.DataFrame({"op": k["op_name"].astype(object).fillna(k["name"].astype(object)).to_numpy(), "shapes": shapes,
                          "t": excl, "t_min": eff * k["duration_ns"].to_numpy(dtype=np.float64), "d": k["duration_ns"].to_numpy(dtype=np.float64)})[slow]
    g = frame.groupby(["op", "shapes"], sort=False).agg(kernels=("t", "size"), time_ns=("t", "sum"), t_min=("t_min", "sum"), d=("d", "sum"))
    top = g.sort_values("time_ns", ascending=False).iloc[0]
    return {"share": float(excl[slow].sum() / busy), "op": str(top.name[0]), "shapes": str(top.name[1]), "kernels": int(top["kernels"]),
            "time_ns": float(top["time_ns"]), "efficiency": float(top["t_min"] / top["d"]) if top["d"] > 0 else float("nan")}


def rule_shares(rules: dict[str, float], busy: float) -> str:
    return ", ".join(f"{name} {t / busy:.0%}" for name, t in sorted(rules.items(), key=lambda x: -x[1]) if t > 0) if busy > 0 else "no kernel time"


def throughput_why(totals: dict, source: Device, target: Device) -> str | None:
    """Whether the projected rate follows the HBM bandwidth ratio, and why: it does when the
    memory roof set most of the busy time and the steps were not waiting for the host."""
    rate = totals.get("throughput")
    if not rate or rate.get("ratio") is None:
        return None
    busy = totals["busy_ns"]
    rules = totals["rules"]
    bw = target.memory_gbps / source.memory_gbps
    unit = rate["unit"]
    share = {k: v / busy for k, v in rules.items()} if busy > 0 else {}
    head = f"{unit}/s ×{rate['ratio']:.2f} ({rate['measured']:,.2f} → {rate['projected']:,.2f} {unit}/s)"
    if totals.get("host_bound_steps") and totals["host_bound_steps"] == totals.get("steps"):
        return f"{head}: every step is host-bound (its GPU idle, waiting for launches), so the rate follows the host, not the GPU"
    if share.get("memory", 0.0) >= 0.5:
        return (f"{head}: bandwidth-bound ({share['memory']:.0%} of GPU time is set by the HBM roof), so {unit}/s tracks HBM "
                f"bandwidth: {source.memory_gbps:,.0f} → {target.memory_gbps:,.0f} GB/s = ×{bw:.2f}; the rest "
                f"(latency {share.get('latency (kept)', 0.0):.0%}, compute {share.get('compute', 0.0):.0%}) moves less")
    top = max(share, key=share.get) if share else "?"
    return (f"{head}: not bandwidth-bound (the memory roof sets {share.get('memory', 0.0):.0%} of GPU time; the largest part: "
            f"{top} {share.get(top, 0.0):.0%}), so {unit}/s does not track the HBM ratio ×{bw:.2f}")


def device_assumptions(a: Analysis, source: Device, target: Device, totals: dict, steps: pd.DataFrame) -> list[str]:
    share = totals["costed_share"]
    out = [
        (f"each kernel's time splits into the part its roof sets (share s = t_min at η {a.sustained:.0%} of bandwidth / measured) "
         f"and the rest: the roof part goes by the target's roof for the same work (matrix or vector peak for its dtype, "
         f"HBM {source.memory_gbps:,.0f}→{target.memory_gbps:,.0f} GB/s, interconnect {source.interconnect_gbps:,.0f}→"
         f"{target.interconnect_gbps:,.0f} GB/s, host link {source.host_link_gbps:,.0f}→{target.host_link_gbps:,.0f} GB/s); the rest "
         "(launch latency, tails, small grids) keeps its time") if share is not None else "the trace has no kernel time",
        f"GPU time by rule: {rule_shares(totals['rules'], totals['busy_ns'])}",
        "kernels without a cost: attention and GEMM kernels by the matrix peak ratio of the run's dtype (range to the HBM "
        "ratio); others from unchanged to scaled by their link's bandwidth ratio (point: the middle)",
        "host time and launch overhead are projected apart from GPU time: the host timeline keeps its pace (range: another "
        "machine's), each stream is replayed alone (a kernel waits for its launch and its predecessor), so a launch-bound step "
        "stays launch-bound; dependencies across streams are not modelled",
        "a step's time is its GPU window (as `tracekit analyze` reports it), moved with its kernels",
        ranges.assumption(),
        "same software: kernels, libraries and their tuning on the target behave like those measured (a different "
        "attention or GEMM library, or another precision, is not projected)",
    ]
    why = throughput_why(totals, source, target)
    if why:
        out.append(why)
    slow = far_from_roof(a)
    if slow is not None:
        out.append(f"{slow['share']:.0%} of busy time is in costed kernels below {FAR_FROM_ROOF:.0%} of their roof on "
                   f"{source.key} (largest: {slow['op']} {slow['shapes']}, {slow['kernels']} kernels, {slow['time_ns'] / 1e6:,.2f} ms "
                   f"at {slow['efficiency']:.1%}): a roof does not set their time, so they keep it; the target's library may "
                   "choose a faster or slower kernel for the same shapes")
    if len(steps) and steps["host_bound"].any():
        out.append(f"{int(steps['host_bound'].sum())} of {len(steps)} steps are host-bound (their GPU was idle, waiting for "
                   "launches, most of its kernels' window): their time barely moves with the GPU")
    return out
