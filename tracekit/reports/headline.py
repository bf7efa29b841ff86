"""The headline in words: at most four short lines from the figures tracekit.analysis.headline
chose (where the time went, the bound, the first cause, the number to watch), and each ranked cause (analysis.causes) as a sentence in that list's own figures."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracekit.analysis.causes import IDLE_WHAT, STEP_TIME, STEP_TIME_MEANS
from tracekit.attribution.rules import phased
from tracekit.common.format import FLAG, cut, duration, middle, percent, percent_against, rounded_percent
from tracekit.costs.unknown import MIN_COVERAGE

if TYPE_CHECKING:
    from tracekit.analysis.findings import Findings
    from tracekit.analysis.headline import Headline, HowToCost
    from tracekit.analysis.result import Analysis

HEADLINE_NAME = 60  # characters of an op, kernel or host-code name in the headline
_RECORD = {"tensorrt": "a TensorRT engine records its layers without tensor shapes (emit_nvtx does not apply to it)",
           "nsys": "record with torch.autograd.profiler.emit_nvtx(record_shapes=True)",
           "torch": "record with torch.profiler.profile(record_shapes=True)",
           # a program no framework launched (CUDA C++, Kokkos, OpenMP offload): its kernels have
           # no tensor shapes to record, and no model config describes them; measured bytes do
           "program": "no framework op launched these kernels, so none has tensor shapes to cost: pass --ncu NCU.csv "
                      "--bytes measured (Nsight Compute's DRAM bytes per kernel)"}



def sentence(c: dict[str, Any], denominator: str, causes: list[dict[str, Any]]) -> str:
    """One cause of the ranked list as a sentence, with its share of the one denominator."""
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
        return (f"Communication no compute hides takes {duration(c['time_ns'])} ({share}), most of it in "
                f"{middle(c['where'], HEADLINE_NAME)} ({duration(e['exposed_ns'])}).")
    if kind == "recoverable":
        # the op with its shapes cut at an element boundary, or the kernel's one label (trace_labels)
        name = (f"{middle(e['op'], HEADLINE_NAME)} {cut(e['shapes'], max(HEADLINE_NAME - len(e['op']) - 1, 20))}".strip()
                if "op" in e else middle(c["where"], HEADLINE_NAME))
        return (f"Kernel time above the sustained roofline is {duration(c['time_ns'])} ({share}); the largest part is "
                f"{name}: {duration(e['recoverable_ns'])}.")
    fix = f" Fix: {c['fix']}." if c.get("fix") else ""
    return f"{c['what']}: {duration(c['time_ns'])} ({share}), most of it in {middle(c['where'], HEADLINE_NAME)}.{fix}"


def _profiler_clause(causes: list[dict[str, Any]]) -> str:
    """For a host-bound verdict: how much of the host's launch-call time is above the same
    call's fastest runs (what the profiler's instrumentation adds, at most)."""
    p = next((c for c in causes if c["cause"] == "profiler_overhead"), None)
    if p is None:
        return ""
    e = p["evidence"]
    return (f"; of the {duration(e['launch_ns'])} the host spent in launch calls, {duration(p['time_ns'])} is above the "
            f"same call's fastest runs (the profiler's own share at most: a profiled eager run is slower on the host)")


def cause_sentences(f: Findings) -> list[dict[str, Any]]:
    """The ranked causes, each with its sentence (summary.json's what_to_fix_first.causes)."""
    return [{**c, "sentence": sentence(c, f.denominator, f.causes)} for c in f.causes]


def _how_to_cost(h: HowToCost) -> str:
    record = _RECORD[h.recorder]
    if h.model_flags is not None:  # --model was given: say what it lacked, not to pass it again
        flags = h.model_flags
        missing = f"pass {' and '.join(flags)} to complete the model's steps" if flags else "the model's blocks did not cover the rest"
        return f"{missing}{', or pass --capture CAPTURE.json (the graph capture profile)' if h.graphs else ''}, or {record}"
    if h.graph_reason is not None:
        return f"most of it is {h.graph_reason.split(':')[0]}: pass --model config.json to cost it from the model"
    return record if h.recorder == "program" else f"{record}, or pass --model config.json"


def _no_gpu(h: Headline) -> list[str]:
    if h.kind == "times_lost":
        text = (f"The profiler lost the times of every GPU activity ({h.lost_activities:,} kernels, copies and memsets have ts 0 and dur 0): "
                "kernel-level figures (GPU time, idle, shares, efficiency) are unknown.")
        if h.step_walls is not None:
            n, total, median = h.step_walls
            text += f" The {n:,} steps are the GPU annotations' windows ({duration(total)} in all, median {duration(median)})."
        else:
            text += " No GPU annotation kept its time either: the trace has no step on the GPU."
        return [text]
    if h.kind == "cut_short":
        return ["The part of the trace that could be read (it is cut short) holds no GPU activity: "
                "its ops are costed against CPU time, with no roofline."]
    return ["The trace holds no GPU activity (a CPU-only profile): its ops are costed against CPU time, with no roofline. "
            "To record GPU kernels: torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], "
            "record_shapes=True), or nsys profile --trace=cuda,nvtx."]


def headline(f: Findings, efficiency_flagged: bool = False) -> list[str]:
    """At most four short lines, one job each: where the GPU time went, what bounds it (and how
    efficient it is, only where at least half the time has a cost, else what is missing), the
    first cause of the ranked list, and the one number to watch (what every share is of).
    `efficiency_flagged`: the efficiency is past its physical limit (a flag): marked beside it."""
    h = f.headline
    if h.kind != "gpu":
        return _no_gpu(h)
    lines = []
    if h.blocks:
        parts = [f"{phased(phase, block)} {percent(share)}" for phase, block, share in h.blocks]
        where = f"GPU time went to {', '.join(parts)} (of the GPU's busy time, {duration(h.busy_ns)}, whole trace)"
        if h.idle_share is not None:
            of = f" ({duration(f.denominator_ns)})" if f.denominator_ns else ""
            where += f"; the GPU was idle {rounded_percent(h.idle_share)} of the {h.denominator}{of}"
        lines.append(where + ".")
    lines.append(_bound(h, FLAG if efficiency_flagged else ""))
    if h.causes:
        lines.append(sentence(f.causes[h.causes[0]], f.denominator, f.causes))
    if f.denominator_ns:
        means = f" ({STEP_TIME_MEANS})" if f.denominator.startswith(STEP_TIME) else ""
        lines.append(f"The number to watch: the {f.denominator}{means}, {duration(f.denominator_ns)} here; every share in "
                     "'What to fix first' is of it.")
    return lines[:4]


def _bound(h: Headline, mark: str = "") -> str:
    """What bounds the costed kernels and how far they are from the roofline, in one line; or
    why no efficiency can be stated, and what would give one."""
    apart = " (communication apart)" if h.comm_apart else ""
    bound = ""
    if h.bounds:
        parts = [f"{rounded_percent(v)} {b}-bound" for b, v in h.bounds]
        of = (f"the kernel time with a cost{apart}" if h.work_covered >= MIN_COVERAGE
              else f"the {rounded_percent(h.work_covered)} of kernel time with a cost{apart}")
        bound = f"Of {of}, {parts[0].replace(' ', ' is ', 1)}{' and ' + parts[1] if len(parts) > 1 else ''}"
    if h.efficiency is not None:
        sustained, peak = h.efficiency
        runs = f"{bound}; they run" if bound else "Kernels run"
        return (f"{runs} at {rounded_percent(sustained)}{mark} of the sustained roofline ({rounded_percent(peak)}{mark} of peak), "
                f"over {rounded_percent(h.work_covered)} of GPU kernel time{apart}.")
    if h.costed_without_device is not None:
        why = (f"{rounded_percent(h.costed_without_device)} of GPU kernel time has a cost (FLOPs and bytes), but the GPU is not in the "
               "device table: pass --device NAME (see `tracekit devices`) to state an efficiency.")
    elif h.costed_without_peak is not None:
        share, dtypes = h.costed_without_peak
        why = (f"{rounded_percent(share)} of GPU kernel time has a cost (FLOPs and bytes), but the device table "
               f"has no peak for its dtype ({', '.join(dtypes) or 'not recorded'}), so no roofline time and no "
               "efficiency can be stated.")
    else:
        why = (f"only {percent_against(h.coverage_short, MIN_COVERAGE)} of GPU kernel time{apart} has a cost, "
               f"too little to state an efficiency; {_how_to_cost(h.how_to_cost)}.")
    return f"{bound}; {why}" if bound else why[0].upper() + why[1:]


def efficiency_flagged(a: Analysis) -> bool:
    """Whether the headline's roofline efficiency (coverage: sum t_min / sum time of the costed
    kernels) is past its physical limit: the headline marks it as the tables mark theirs."""
    from tracekit.analysis.plausibility import flagged

    return (0, "efficiency") in flagged(getattr(a, "flags", None) or [], "coverage")
