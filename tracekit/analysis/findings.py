"""What to fix first, and the headline: computed from an Analysis, rendered by reports/.

Recoverable time is what the roofline says could go: measured time minus the time the
work would take at the sustained roofline (`t_min_sustained_ns`), per kernel, never below
zero (a kernel faster than the roofline has nothing to give back). Time is GPU time the
kernel holds alone (`exclusive_ns`: compute owns the time it covers, then copies, then
communication, whose time is its exposed time), so that the lines of a table never add up to
more than the GPU's busy time; the roofline minimum is scaled to that time. With steps,
only the kernels the steps own count, and shares are of the step time (GPU busy time where
the trace has no steps). Summed per op (name and input shapes), per kernel name and per
phase x block, ranked, with each line's share and the running total.

Overhead that no roofline shows is measured apart: the GPU's idle time inside the steps,
split by cause (timeline.idle_gaps: waiting for the host, for a synchronisation, other),
and kernels that ran shorter than the host call that launched them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import re
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis.idle_host import charges as idle_charges, host_behind_idle, launching_records, top_by_cause
from tracekit.analysis.ops import shape_key
from tracekit.strict_json import records
from tracekit.trace.grouping import Key, group_rows, key_of, label_column
from tracekit.trace.health import kernel_times_unknown
from tracekit.parsers.launch_api import SYNC_API
from tracekit.trace.timeline import IDLE_CATEGORIES, difference, idle_gaps, union
from tracekit.costs.unknown import MIN_COVERAGE
from tracekit.reports.format import duration, middle, rounded_percent

# Below this share of kernel time with a cost, a group efficiency is not a measurement.

FIX_COLUMNS = ["what", "detail", "count", "time_ns", "t_min_ns", "recoverable_ns", "share", "cumulative_share"]


@dataclass
class Findings:
    headline: list[str]
    basis: str  # "step time" or "GPU busy time": what the shares are of
    basis_ns: float
    fix_ops: pd.DataFrame = field(default_factory=pd.DataFrame)
    fix_kernels: pd.DataFrame = field(default_factory=pd.DataFrame)
    fix_blocks: pd.DataFrame = field(default_factory=pd.DataFrame)
    idle: pd.DataFrame = field(default_factory=pd.DataFrame)  # one row per category
    idle_window: str = ""  # where idle time was counted
    idle_window_ns: float = 0.0
    short_kernels: dict[str, Any] = field(default_factory=dict)
    idle_host: pd.DataFrame = field(default_factory=pd.DataFrame)  # host code behind GPU idle (analysis.idle_host)
    idle_host_by_cause: dict[str, dict] = field(default_factory=dict)  # per idle category: the host record most behind it
    causes: list[dict[str, Any]] = field(default_factory=list)  # ranked_causes: what to act on, by time, with evidence
    # GPU idle inside the steps' host ranges but outside their GPU windows (a step's host
    # range that outlasts its kernels: a blocking copy, a stalled scheduler)
    outside: dict[str, Any] = field(default_factory=dict)

    def to_dict(self, top: int = 15) -> dict[str, Any]:
        return {
            "basis": self.basis, "basis_ns": self.basis_ns,
            "ops": records(self.fix_ops.head(top)), "kernels": records(self.fix_kernels.head(top)),
            "blocks": records(self.fix_blocks.head(top)),
            "idle": {"window": self.idle_window, "window_ns": self.idle_window_ns, "categories": records(self.idle)},
            "short_kernels": self.short_kernels,
            "idle_host": records(self.idle_host.head(top)),
            "idle_host_by_cause": self.idle_host_by_cause,
            "causes": self.causes,
            "idle_outside_gpu_windows": self.outside,
        }


def compute(a) -> Findings:
    k = a.kernels
    basis, basis_ns = _basis(a)
    if k.empty:
        return Findings(headline=_cpu_headline(a), basis=basis, basis_ns=basis_ns)
    work = _work(k, in_steps=len(a.steps) > 0)
    op_name = key_of(k["op_name"], missing="nan")
    linked = (k["op"].to_numpy() >= 0) & (op_name[0] >= 0)
    windows, window_name = _idle_windows(a)
    launches = launch_context(a)
    gaps = gaps_of(a, windows, launches)
    window_ns = float(sum(int((w[:, 1] - w[:, 0]).sum()) for w in windows.values()))
    f = Findings(headline=[], basis=basis, basis_ns=basis_ns,
                 fix_ops=_ranked(work, {"op": op_name, "shapes": _shapes(a)}, basis_ns, linked),
                 fix_kernels=_ranked(work, {"kernel": key_of(k["name"], missing="nan")}, basis_ns),
                 fix_blocks=_ranked(work, {"phase": key_of(k["phase"], missing="nan"), "block": key_of(k["block"], missing="nan")}, basis_ns),
                 idle=_idle_table(gaps, window_ns), idle_window=window_name, idle_window_ns=window_ns,
                 short_kernels=_short_kernels(a))
    launching = launching_records(a)  # the host records gaps are charged to, once for both sets of gaps
    charged = idle_charges(a, gaps, launching)
    idle_by_cause = dict(zip(f.idle["category"], f.idle["idle_ns"])) if len(f.idle) else {}
    f.idle_host, f.idle_host_by_cause = host_behind_idle(charged, gaps), top_by_cause(charged, idle_by_cause)
    f.outside = _idle_outside_gpu_windows(a, windows, launches, launching)
    f.causes = ranked_causes(a, f)
    f.headline = headline(a, f)
    return f


def _lost_times_headline(a) -> str:
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


def _work(k: pd.DataFrame, in_steps: bool) -> dict[str, np.ndarray]:
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


def _basis(a) -> tuple[str, float]:
    if len(a.steps):
        return "step time", float(a.steps["duration_ns"].sum())
    busy = float(a.devices["busy_ns"].sum()) if len(a.devices) else 0.0
    return "GPU busy time", busy


def _without_scalars(dims) -> str:
    # trailing scalar inputs ([]) say nothing of the work
    return "" if dims is None else re.sub(r"(, \[\])+\]$", "]", str(dims))


def _shapes(a) -> Key:
    """Per kernel: a code for its op's input shapes (-1 for a kernel without an op: those
    are not ranked by op)."""
    op = a.kernels["op"].to_numpy()
    linked = op >= 0
    if a.trace is None or not len(a.trace.ops) or not linked.any():  # no shapes recorded: ""
        return np.zeros(len(op), dtype=np.int64), np.array(["", None], dtype=object)
    codes = np.full(len(op), -1, dtype=np.int64)
    codes[linked], labels = shape_key(a.trace.ops["input_dims"].to_numpy(), op[linked], _without_scalars)
    return codes, labels


def _ranked(work: dict[str, np.ndarray], keys: dict[str, Key], basis_ns: float, rows: np.ndarray | None = None) -> pd.DataFrame:
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
    g["what"] = g[names[0]].astype(str) if len(names) == 1 or names[0] != "phase" else g["phase"] + " / " + g["block"]
    g["detail"] = g[names[1]].astype(str) if len(names) > 1 and names[0] != "phase" else ""
    g["share"] = g["recoverable_ns"] / basis_ns if basis_ns else np.nan
    g["cumulative_share"] = g["share"].cumsum()
    return g[FIX_COLUMNS]


def _idle_outside_gpu_windows(a, windows: dict[int, np.ndarray], launches=None, launching=None) -> dict[str, Any]:
    """Steps measure their time on the GPU; where a step's host range reaches past its GPU
    window (before its first kernel, after its last), GPU idle time there is invisible to
    the step figures. Measured here: that idle time, by cause, with the host record behind
    it, and the steps' wall time (host range and GPU window together)."""
    s = a.steps
    if not len(s) or "host_start_ns" not in s:
        return {}
    gpu_lo, gpu_hi = s["start_ns"].to_numpy(np.int64), (s["start_ns"] + s["duration_ns"]).to_numpy(np.int64)
    host_lo, host_hi = s["host_start_ns"].to_numpy(np.int64), (s["host_start_ns"] + s["host_duration_ns"]).to_numpy(np.int64)
    wall = union(np.column_stack([np.minimum(gpu_lo, host_lo), np.maximum(gpu_hi, host_hi)]))
    wall_ns = float((wall[:, 1] - wall[:, 0]).sum())
    outside = {d: difference(wall, w) for d, w in windows.items()}
    if not any(len(o) for o in outside.values()):
        return {"wall_ns": wall_ns, "idle_ns": 0.0}
    gaps = gaps_of(a, outside, launches)
    if not len(gaps):
        return {"wall_ns": wall_ns, "idle_ns": 0.0}
    by_cause = gaps.groupby("category")["idle_ns"].sum()
    host = top_by_cause(idle_charges(a, gaps, launching), by_cause.to_dict())
    cause = str(by_cause.idxmax())
    return {"wall_ns": wall_ns, "idle_ns": float(gaps["idle_ns"].sum()), "gaps": int(len(gaps)),
            "by_cause": {str(c): float(v) for c, v in by_cause.items()}, "main_cause": cause, "host": host.get(cause)}


def _idle_windows(a) -> tuple[dict[int, np.ndarray], str]:
    """Where idle time counts: inside the steps (the same windows on every device), or,
    in a trace without steps, from each device's first activity to its last."""
    k = a.kernels
    devices = [int(d) for d in np.unique(k["device"].to_numpy())]
    if len(a.steps):
        steps = a.steps
        iv = union(np.column_stack([steps["start_ns"].to_numpy(np.int64), (steps["start_ns"] + steps["duration_ns"]).to_numpy(np.int64)]))
        return {d: iv for d in devices}, "inside steps"
    out = {}
    for d in devices:
        on = k["device"].to_numpy() == d
        out[d] = np.array([[int(k["start"].to_numpy()[on].min()), int(k["end"].to_numpy()[on].max())]], dtype=np.int64)
    return out, "from first to last GPU activity"


def gaps_of(a, windows: dict[int, np.ndarray], launches: tuple | None = None) -> pd.DataFrame:
    """Idle gaps of an analysis' devices inside `windows`, by cause (timeline.idle_gaps).
    `launches`: launch_context(a), when already made."""
    launch_start, sync_calls, launch_end = launch_context(a) if launches is None else launches
    return idle_gaps(a.kernels, launch_start, sync_calls, windows, launch_end)


def launch_context(a) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What the idle rules read of the host's calls: per kernel its launch call's start and end
    (-1: none), and the synchronizing calls (start, end, pid)."""
    k = a.kernels
    launch_start = np.full(len(k), -1, dtype=np.int64)
    launch_end = launch_start
    sync_calls = np.zeros((0, 3), dtype=np.int64)
    if a.trace is not None and len(a.trace.launches):
        launches = a.trace.launches
        row = k["launch"].to_numpy()
        launch_start = np.where(row >= 0, launches["start"].to_numpy()[np.maximum(row, 0)], -1)
        launch_end = np.where(row >= 0, launches["end"].to_numpy()[np.maximum(row, 0)], -1)
        name = key_of(launches["name"], missing="nan")  # one search per distinct call name
        is_sync = np.array([bool(SYNC_API.search(str(n))) for n in name[1]], dtype=bool)[name[0]]
        sync_calls = launches.loc[is_sync, ["start", "end", "pid"]].to_numpy(np.int64)
    return launch_start, sync_calls, launch_end


def _idle_table(gaps: pd.DataFrame, window_ns: float) -> pd.DataFrame:
    total = float(gaps["idle_ns"].sum()) if len(gaps) else 0.0
    rows = []
    for cat in IDLE_CATEGORIES:
        mine = gaps[gaps["category"] == cat] if len(gaps) else gaps
        t = float(mine["idle_ns"].sum()) if len(mine) else 0.0
        rows.append({"category": cat, "gaps": int(len(mine)), "idle_ns": t,
                     "share_of_idle": t / total if total else np.nan, "share_of_window": t / window_ns if window_ns else np.nan})
    return pd.DataFrame(rows)


def _short_kernels(a) -> dict[str, Any]:
    """Kernels that ran for less time than the host call that launched them: launching
    them costs more than running them (fuse them, or capture them in a CUDA graph)."""
    k = a.kernels
    if a.trace is None or not len(a.trace.launches):
        return {"count": 0, "time_ns": 0.0, "launch_ns": 0.0, "kernels": 0, "top": []}
    launches = a.trace.launches
    row = k["launch"].to_numpy()
    # A graph launch issues all of its kernels in one call: no kernel of it is "behind" it.
    is_kernel = (k["kind"] == "kernel").to_numpy() & (row >= 0) & ~k["graph_launch"].to_numpy(dtype=bool)
    call = np.where(row >= 0, (launches["end"] - launches["start"]).to_numpy()[np.maximum(row, 0)], 0)
    short = is_kernel & (k["duration_ns"].to_numpy() < call)
    name = key_of(k["name"], missing="nan")
    groups = group_rows([(name[0][short], name[1])], int(short.sum()), dropna=False)
    names = label_column((name[0][short], name[1]), groups.first)
    # by name first (groupby's order), so that equal counts rank as they always did
    order = sorted(range(groups.n), key=lambda i: names[i])
    top = pd.DataFrame({"size": groups.size[order], "sum": groups.sum(k["duration_ns"].to_numpy()[short])[order]},
                       index=names[order]).sort_values("size", ascending=False).head(5)
    return {"count": int(short.sum()), "time_ns": float(k["duration_ns"].to_numpy()[short].sum()),
            "launch_ns": float(call[short].sum()), "kernels": int(is_kernel.sum()),
            "top": [{"name": n, "count": int(r["size"]), "time_ns": float(r["sum"])} for n, r in top.iterrows()]}


# -- the headline ---------------------------------------------------------------------------





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


def _tensorrt(a) -> bool:
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


def _how_to_cost(a) -> str:
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


HEADLINE_MIN_SHARE = 0.01  # a loss under 1% of the step (or busy) time is no headline
HEADLINE_NAME = 60  # characters of an op, kernel or host-code name in the headline


def _cause(kind: str, time_ns: float, of_ns: float, evidence: dict[str, Any], sentence: str) -> dict[str, Any]:
    """`of_ns`: what the share is of: the basis (step time, or GPU busy time) for time the
    GPU spent working, the idle window (steps, or first to last GPU activity) for idle time."""
    return {"cause": kind, "time_ns": float(time_ns), "share": float(time_ns) / of_ns if of_ns else None,
            "evidence": evidence, "sentence": sentence}


def _recoverable_cause(f: Findings) -> dict[str, Any] | None:
    """The single largest recoverable item: an op (name + shapes) or, where the time has no
    op (graph replays, model-costed kernels), a kernel."""
    op = f.fix_ops.iloc[0] if len(f.fix_ops) else None
    kernel = f.fix_kernels.iloc[0] if len(f.fix_kernels) else None
    if op is not None and (kernel is None or op["recoverable_ns"] >= kernel["recoverable_ns"]):
        name = middle(f"{op['what']} {op['detail']}".strip(), HEADLINE_NAME)
        return _cause("recoverable", op["recoverable_ns"], f.basis_ns,
                      {"op": str(op["what"]), "shapes": str(op["detail"]), "time_ns": float(op["time_ns"]), "t_min_ns": float(op["t_min_ns"])},
                      f"The largest recoverable time at the sustained roofline is {name}: "
                      f"{duration(op['recoverable_ns'])} ({rounded_percent(op['share'])} of {f.basis}).")
    if kernel is not None:
        from tracekit.trace.kernel_names import labels

        name = str(kernel["what"])
        return _cause("recoverable", kernel["recoverable_ns"], f.basis_ns,
                      {"kernel": name, "time_ns": float(kernel["time_ns"]), "t_min_ns": float(kernel["t_min_ns"])},
                      f"The largest recoverable time at the sustained roofline is in {middle(labels([name])[name], HEADLINE_NAME)}: "
                      f"{duration(kernel['recoverable_ns'])} ({rounded_percent(kernel['share'])} of {f.basis}).")
    return None


def _exposed_comm_cause(a, f: Findings) -> dict[str, Any] | None:
    """Communication no compute kernel hides (its exclusive time), inside the basis."""
    k = a.kernels
    comm = (k["block"] == "collective").to_numpy() & (k["kind"] == "kernel").to_numpy()
    if len(a.steps):
        comm &= k["step"].to_numpy() >= 0
    if not comm.any() or not f.basis_ns:
        return None
    time = k["exclusive_ns"].to_numpy(dtype=np.float64)
    exposed = float(time[comm].sum())
    if exposed <= 0:
        return None
    names = key_of(k["name"], missing="nan")
    by_name = np.bincount(names[0][comm], weights=time[comm], minlength=len(names[1]))
    from tracekit.trace.kernel_names import labels

    top = str(names[1][int(np.argmax(by_name))])
    return _cause("exposed_communication", exposed, f.basis_ns,
                  {"kernel": top, "exposed_ns": float(by_name.max()), "comm_kernel_time_ns": float(k["duration_ns"].to_numpy()[comm].sum())},
                  f"Communication no compute hides takes {duration(exposed)} ({rounded_percent(exposed / f.basis_ns)} of "
                  f"{f.basis}), most of it in {middle(labels([top])[top], HEADLINE_NAME)} ({duration(float(by_name.max()))}).")


_IDLE_CAUSE = {"host_wait": "waiting for the host to launch work", "sync": "waiting on synchronisations",
               "queued": "work queued behind other work (event waits, other streams)"}


def _idle_causes(f: Findings) -> list[dict[str, Any]]:
    """GPU idle time by cause, each named by the host code most behind it. Idle with no
    cause recorded ("other") is in the first sentence's idle share, not a cause."""
    out = []
    for row in f.idle.to_dict(orient="records") if len(f.idle) else []:
        if row["category"] not in _IDLE_CAUSE or not row["idle_ns"] > 0:
            continue
        h = f.idle_host_by_cause.get(row["category"])
        where = _host_clause(h)
        out.append(_cause(f"idle_{row['category']}", row["idle_ns"], f.idle_window_ns, {"gaps": int(row["gaps"]), "host": h},
                          f"{duration(row['idle_ns'])} of GPU idle time {f.idle_window} is {_IDLE_CAUSE[row['category']]}{where}."))
    return out


def _host_clause(h: dict | None) -> str:
    """'; the host was in KIND NAME for T of it', for the host record behind an idle cause."""
    return f"; the host was in {h['kind']} {middle(h['name'], HEADLINE_NAME)} for {duration(h['idle_ns'])} of it" if h else ""


def _outside_cause(f: Findings) -> dict[str, Any] | None:
    o = f.outside
    if not o or not o.get("idle_ns"):
        return None
    cause = _IDLE_CAUSE.get(o["main_cause"], "nothing recorded")
    where = _host_clause(o.get("host"))
    return _cause("idle_outside_gpu_windows", o["idle_ns"], o["wall_ns"], o,
                  f"The steps' host ranges outlast their kernels: {duration(o['idle_ns'])} more GPU idle time "
                  f"({rounded_percent(o['idle_ns'] / o['wall_ns'])} of the steps' wall time, {duration(o['wall_ns'])}) lies outside "
                  f"their GPU windows, mostly {cause}{where}.")


def ranked_causes(a, f: Findings) -> list[dict[str, Any]]:
    """What the user can act on, ranked by time: the largest recoverable item at the
    roofline, communication no compute hides, GPU idle by cause, and GPU idle the steps'
    host ranges hold outside their GPU windows."""
    found = [c for c in (_recoverable_cause(f), _exposed_comm_cause(a, f), *_idle_causes(f), _outside_cause(f)) if c is not None]
    return sorted(found, key=lambda c: -c["time_ns"])


def _block_shares(a) -> tuple[list[tuple[tuple[str, str], float]], str]:
    """Phase x block shares of GPU time for the headline's first line, in the same scope as
    the idle share beside it: inside the steps where the trace has steps (kernels launched
    before the capture or between steps are not the steps' time), else the whole capture."""
    k = a.kernels
    if not len(a.steps):
        return [((r["phase"], r["block"]), r["share"]) for r in a.blocks.to_dict(orient="records")], ""
    inside = k["step"].to_numpy() >= 0
    time = pd.Series(k["exclusive_ns"].to_numpy(dtype=np.float64)[inside])
    by = time.groupby([k["phase"].astype(str).to_numpy()[inside], k["block"].astype(str).to_numpy()[inside]]).sum()
    total = by.sum()
    if not total:
        return [], "inside the steps "
    by = by.sort_values(ascending=False, kind="stable") / total
    return [(key, float(v)) for key, v in by.items()], "inside the steps "


def headline(a, f: Findings) -> list[str]:
    """3 to 5 plain sentences: where the GPU time went, what bounds it, how efficient it is
    (only where at least half the time has a cost), what is missing, and the largest win."""
    c = a.coverage
    b = a.blocks
    sentences = []
    if len(b):
        shares, scope = _block_shares(a)
        parts = [f"{phase} / {block} {rounded_percent(share)}" for (phase, block), share in shares[:3]]
        idle = f.idle["idle_ns"].sum() if len(f.idle) else 0.0
        where = f"GPU time {scope}went to {', '.join(parts)}"
        if f.idle_window_ns:
            where += f"; the GPU was idle {rounded_percent(idle / f.idle_window_ns)} of the time {f.idle_window}"
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
        sentences.append(f"Only {rounded_percent(work_covered if comm.any() else covered)} of GPU kernel time{apart} has a cost, "
                         f"too little to state an efficiency; {_how_to_cost(a)}.")
    # What to fix first, ranked by time across the kinds of loss a user can act on: the
    # largest recoverable item at the roofline, communication no compute hides, and GPU idle
    # by cause. Lines under HEADLINE_MIN_SHARE of the basis are not headline material.
    # one yardstick for every kind of loss: the larger of the basis and the idle window
    whole = max(f.basis_ns, f.idle_window_ns, float(f.outside.get("wall_ns") or 0.0))
    sentences += [c["sentence"] for c in f.causes if whole and c["time_ns"] >= HEADLINE_MIN_SHARE * whole][:2]
    return sentences[:5]


def _cpu_headline(a) -> list[str]:
    if kernel_times_unknown(a.meta):
        return [_lost_times_headline(a)]
    if any("cut short" in w for w in a.warnings):  # a GPU trace may have lost its GPU events
        return ["The part of the trace that could be read (it is cut short) holds no GPU activity: "
                "its ops are costed against CPU time, with no roofline."]
    return ["The trace holds no GPU activity (a CPU-only profile): its ops are costed against CPU time, with no roofline."]
