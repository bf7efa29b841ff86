"""The report's sections as rows of display strings, shared by the terminal, Markdown and
HTML renderers. Cells hold raw text (trace names included): each renderer passes every
cell through its medium's function in reports/text.py. Each column has a priority, so a
narrow terminal drops the least useful columns first; priority 0 marks the columns that
carry the table's answer (the name, the why, the time, Δ, ratio, recoverable, coverage):
they are never dropped, and their text elides in the middle or wraps."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.analysis.causes import STEP_TIME, STEP_TIME_MEANS
from tracekit.attribution.rules import UNKNOWN_PHASE
from tracekit.reports.section import Named, Section
from tracekit.trace.kernel_names import labels, trace_labels
from tracekit.trace.readable_names import demangle
from tracekit.common.format import FLAG, duration, number, percent, si, text
from tracekit.strict_json import records

if TYPE_CHECKING:  # `info` renders Sections without loading the analysis (and pandas)
    from tracekit.analysis import Analysis


class Labels:
    """The one label of each kernel name of an analysis (trace_labels: the same in every table,
    cause, `info` and the bundle)."""

    def __init__(self, a: Analysis):
        self.map = trace_labels(a.kernels["name"].unique() if len(a.kernels) else [])

    def __call__(self, name: str) -> Named:
        name = str(name)
        label = self.map.get(name) or labels([name])[name]
        return Named(label, demangle(name))




def flag_marks(a: Analysis, table: str):
    """mark(row, figure, cell): the cell with FLAG appended (once) where the plausibility pass
    flagged that figure, or one of those figures (a tuple: a cell that shows several), of that row."""
    from tracekit.analysis.plausibility import flagged

    found = flagged(getattr(a, "flags", None) or [], table)

    def mark(row: int, figure: str | tuple[str, ...], cell: str) -> str:
        figures = (figure,) if isinstance(figure, str) else figure
        return cell + FLAG if any((row, f) in found for f in figures) else cell

    return mark


def headline(a: Analysis) -> list[str]:
    from tracekit.reports.headline import efficiency_flagged, headline as words

    return words(a.findings, efficiency_flagged=efficiency_flagged(a)) if a.findings is not None else []


def fix_first(a: Analysis) -> Section:
    """The one ranked list of every cause (analysis.causes), each in time and as a share of
    the same denominator; the running total counts the GPU-time rows only (host-time rows
    overlap the host-wait idle)."""
    f = a.findings
    head = ["#", "cause", "where (host code, op, kernel, copy)", "time", "share", "cumulative"]
    rows = [[str(i + 1), c["what"] + (f" [fix {i + 1}]" if c.get("fix") else ""), c["where"], duration(c["time_ns"]), percent(c["share"]), percent(c.get("cumulative_share"))]
            for i, c in enumerate(f.causes)]
    return Section(f"What to fix first: every cause, in time and share of {f.denominator} ({duration(f.denominator_ns)})",
                   head, rows, [3, 0, 0, 0, 0, 2], flex=1, left=(1, 2), wrap=(1,),
                   note=f"share: of {f.denominator}{_means(f.denominator)}; cumulative: GPU-time rows only (idle, copies, exposed communication, recoverable kernel time are "
                        "disjoint slices of the denominator); host-time rows ('—') overlap the host-wait idle. The tables "
                        "below break each row down.")


def fixes(a: Analysis) -> Section | None:
    """Each cause's fix in full, numbered like the causes (the ranked list and the first screen
    name it by that number); None when no cause has one."""
    rows = [[str(i + 1), c["fix"]] for i, c in enumerate(a.findings.causes) if c.get("fix")]
    if not rows:
        return None
    return Section("Fixes (numbered like the causes above)", ["fix", "what to change"], rows, [0, 0], flex=1, left=(1,), wrap=(1,))


def _means(denominator: str) -> str:
    """What the step time is, said where it is the denominator."""
    return f" ({STEP_TIME_MEANS})" if denominator.startswith(STEP_TIME) else ""


def _held(f) -> str:
    """The recoverable tables' time: GPU time each kernel holds alone (compute owns what it
    overlaps), in the steps where the trace has steps: less than the blocks table's GPU time."""
    return "time alone in steps" if f.basis.startswith(STEP_TIME) else "time alone"


def fix_ops(a: Analysis, top: int) -> Section:
    f = a.findings
    head = ["#", "op", "input shapes", "GPU activities", _held(f), "roofline min", "recoverable", f"of {f.basis}", "cumulative"]
    rows = [[str(i + 1), r["what"], r["detail"], f"{r['count']:,}", duration(r["time_ns"]), duration(r["t_min_ns"]), duration(r["recoverable_ns"]),
             percent(r["share"]), percent(r["cumulative_share"])] for i, r in enumerate(f.fix_ops.head(top).to_dict(orient="records"))]
    return Section("Recoverable kernel time by op (recoverable = time - roofline minimum at sustained bandwidth)", head, rows,
                   [4, 0, 0, 3, 2, 2, 0, 0, 1], flex=2, note=_coverage_note(a), left=(1, 2))


def fix_kernels(a: Analysis, top: int, label: Labels) -> Section:
    f = a.findings
    head = ["#", "kernel", "calls", _held(f), "roofline min", "recoverable", f"of {f.basis}", "cumulative"]
    rows = [[str(i + 1), label(r["what"]), f"{r['count']:,}", duration(r["time_ns"]), duration(r["t_min_ns"]), duration(r["recoverable_ns"]),
             percent(r["share"]), percent(r["cumulative_share"])] for i, r in enumerate(f.fix_kernels.head(top).to_dict(orient="records"))]
    return Section("Recoverable kernel time by kernel", head, rows, [4, 0, 3, 2, 2, 0, 0, 1], flex=1, terminal=False, left=(1,))


def fix_blocks(a: Analysis, top: int) -> Section:
    f = a.findings
    head = ["phase / block", "GPU activities", _held(f), "roofline min", "recoverable", f"of {f.basis}", "cumulative"]
    rows = [[r["what"], f"{r['count']:,}", duration(r["time_ns"]), duration(r["t_min_ns"]), duration(r["recoverable_ns"]), percent(r["share"]),
             percent(r["cumulative_share"])] for r in f.fix_blocks.head(top).to_dict(orient="records")]
    return Section("Recoverable kernel time by block", head, rows, [0, 1, 2, 1, 0, 0, 2],
                   note="recoverable = the sum over the group's kernels of max(0, time - roofline minimum): a kernel "
                        "faster than its roofline (cache-resident data) takes nothing back from the slower ones")


_IDLE_NAMES = {"host_wait": "host wait: launched after the GPU went idle",
               "sync": "synchronisation: host blocked in a sync call",
               "queued": "submitted well before, not started (nothing ran on the GPU)",
               "other": "other: nothing recorded (launch latency, or no launch)"}


def idle(a: Analysis) -> Section:
    f = a.findings
    head = ["idle because", "gaps", "idle time", "of idle", f"of time {f.idle_window}"]
    rows = [[_IDLE_NAMES.get(r["category"], r["category"]), f"{r['gaps']:,}", duration(r["idle_ns"]), percent(r["share_of_idle"]),
             percent(r["share_of_window"])] for r in f.idle.to_dict(orient="records")] if len(f.idle) else []
    s = f.short_kernels
    note = ""
    if s.get("kernels"):
        note = (f"{s['count']:,} of {s['kernels']:,} kernels ran shorter than the host call that launched them "
                f"({duration(s['time_ns'])} of kernel time behind {duration(s['launch_ns'])} of launch calls)")
    return Section(f"Overhead no roofline shows: GPU idle time {f.idle_window}, by cause", head, rows, [0, 2, 0, 1, 0], flex=0, note=note)


def idle_host(a: Analysis) -> Section:
    f = a.findings
    head = ["host was in", "name", "gaps", "idle time covered", "of idle (per kind)"]
    h = getattr(f, "idle_host", None)
    rows = [[r["kind"], r["name"], f"{r['gaps']:,}", duration(r["idle_ns"]), percent(r["share_of_idle"])]
            for r in records(h)] if h is not None and len(h) else []
    return Section(f"Host code behind GPU idle {f.idle_window} (innermost frame / op / range open on the launching threads, "
                   "longest gaps)", head, rows, [1, 0, 2, 0, 1], flex=1, left=(0, 1),
                   note="each kind (frame, op, range) is charged on its own: a frame and the op it calls cover the same "
                        "idle time, so the shares add up to at most 100% within a kind, not across kinds")


def block_rows(a: Analysis) -> Section:
    head = ["phase", "block", "GPU time", "share", "kernels", "FLOP", "bytes", "TFLOP/s", "TB/s", "eff. peak / sust.", "bound", "coverage"]
    mark = flag_marks(a, "blocks")
    rows = [[r["phase"], r["block"], duration(r["gpu_time_ns"]), mark(i, "share", percent(r["share"])), f"{r['count']:,}", si(r["flops"]),
             si(r["bytes"], "B"), number(r["achieved_tflops"], "{:,.2f}"), mark(i, "achieved_tbps", number(r["achieved_tbps"], "{:,.3f}")),
             mark(i, "efficiency", f"{percent(r['efficiency'])} / {percent(r['efficiency_sustained'])}"), text(r["bound"]), percent(r["coverage"])]
            for i, r in enumerate(a.blocks.to_dict(orient="records"))]
    devices = a.kernels["device"].nunique() if len(a.kernels) else 0
    title = "Blocks (phase x block; share: of the GPU busy time, whole trace, overlap counted once)" + (f": GPU time summed over {devices} devices" if devices > 1 else "")
    basis = a.meta.get("blocks_basis")
    note = f"blocks: {basis}" if basis else ""
    priority = [0, 0, 0, 0, 2, 1, 1, 2, 2, 0, 3, 0]
    if len(a.blocks) and set(a.blocks["phase"].astype(str)) == {UNKNOWN_PHASE}:
        # nothing in the trace says a phase (a CUDA application): a column of "unknown" says nothing
        return Section(title.replace("phase x block", "block"), head[1:], [r[1:] for r in rows], priority[1:], flex=0, left=(0,),
                       note=note)
    return Section(title, head, rows, priority, flex=1, left=(0, 1), note=note)


def device_rows(a: Analysis) -> Section:
    head = ["device", "active window", "busy", "idle", "capture span", "idle in span", "kernel time", "copy time", "concurrent"]
    rows = [[str(r["device"]), duration(r["active_ns"]), duration(r["busy_ns"]), duration(r["idle_ns"]), duration(r["span_ns"]),
             duration(r["idle_span_ns"]), duration(r["kernel_time_ns"]), duration(r.get("copies_time_ns")), duration(r["overlap_ns"])]
            for r in a.devices.to_dict(orient="records")]
    return Section("Devices: busy and idle (idle within the GPU-active window, first to last activity; the capture span "
                   "also counts host time before the first kernel) (kernel time: kernels only; copy time: memcpy and memset; "
                   "concurrent: activity time that ran beside other activity)",
                   head, rows, [0, 1, 0, 0, 2, 2, 1, 1, 1])


def steps_section(a: Analysis) -> Section:
    head = ["step", "GPU window", "host range", "GPU behind host", "kernels", "copies", "busy in window", "its kernels' busy",
            "coverage", "bytes", "TB/s", "of peak BW", "of sustained BW", "TFLOP/s", "MFU", "HFU"]
    mark = flag_marks(a, "steps")
    rows = [[r["step"], duration(r["duration_ns"]), duration(r.get("host_duration_ns")), duration(r.get("gpu_lag_ns")),
             number(r["kernels"], "{:,}"), number(r.get("copies"), "{:,}"), mark(i, "busy_in_window_ns", duration(r.get("busy_in_window_ns"))),
             duration(r["busy_ns"]), percent(r["coverage"]), si(r["bytes"], "B"), number(r["achieved_tbps"], "{:.3f}"),
             mark(i, "bandwidth_share_peak", percent(r["bandwidth_share_peak"])), percent(r["bandwidth_share_sustained"]),
             number(r.get("achieved_tflops"), "{:,.1f}"), percent(r.get("mfu")), percent(r.get("hfu"))]
            for i, r in enumerate(a.steps.to_dict(orient="records"))]
    return Section("Steps (GPU window: where the step's kernels ran, or its GPU-side annotation; host range: the range that "
                   "launched them; GPU behind host: GPU window end - host range end; kernels / copies: launched in the "
                   "step's host range on any thread of its process; busy in window: any GPU activity inside the GPU window, "
                   "the complement of its idle time; TFLOP/s: the FLOPs its kernels' shapes give over the GPU window; MFU: "
                   "the same without recompute, of the dense matrix peak; HFU: with it)", head, rows,
                   [0, 0, 1, 1, 1, 2, 0, 3, 2, 2, 2, 1, 3, 1, 1, 2], flex=0,
                   note=f"steps from: {a.meta.get('step_source') or 'none found'}"
                        + (f" ({a.meta['step_evidence']})" if a.meta.get("step_evidence") else ""))


def kernel_rows(a: Analysis, top: int, label: Labels) -> Section:
    head = ["kernel", "class", "calls", "time", "share", "TFLOP/s", "TB/s", "FLOP/B", "eff. peak / sust.", "bound"]
    mark = flag_marks(a, "kernels")
    rows = [[label(r["name"]), r["kernel_class"], f"{r['count']:,}", duration(r["time_ns"]), percent(r["share"]),
             number(r["achieved_tflops"], "{:,.2f}"), mark(i, "achieved_tbps", number(r["achieved_tbps"], "{:,.3f}")),
             number(r["intensity"], "{:,.1f}"),
             mark(i, "efficiency", f"{percent(r['efficiency'])} / {percent(r['efficiency_sustained'])}"),
             text(r["bound"])] for i, r in enumerate(a.top_kernels(top).to_dict(orient="records"))]
    return Section("Top kernels by GPU time (kernels only; share of kernel time)", head, rows, [0, 2, 1, 0, 0, 2, 2, 3, 1, 3],
                   flex=0, left=(0, 1))


def copy_rows(a: Analysis, top: int) -> Section:
    head = ["copy", "calls", "time", "share", "bytes", "TB/s"]
    mark = flag_marks(a, "copies")
    rows = [[r["name"], f"{r['count']:,}", duration(r["time_ns"]), percent(r["share"]), si(r["bytes"], "B"),
             mark(i, ("achieved_tbps", "efficiency"), number(r["achieved_tbps"], "{:,.3f}"))]
            for i, r in enumerate(records(a.copy_summary.head(top)))] if len(a.copy_summary) else []
    return Section("Copies and memsets by GPU time (share of copy time)", head, rows, [0, 1, 0, 0, 2, 2], flex=0, terminal=False)


def op_rows(a: Analysis, top: int) -> Section:
    head = ["op", "input shapes", "calls", "time", "FLOP", "bytes", "efficiency", "bound"]
    mark = flag_marks(a, "ops")
    rows = [[r["op"], r["shapes"], f"{r['calls']:,}", duration(r["time_ns"]), si(r["flops"]), si(r["bytes"], "B"),
             mark(i, "efficiency", percent(r["efficiency"])), text(r["bound"])]
            for i, r in enumerate(a.ops.head(top).to_dict(orient="records"))]
    # a GPU trace ranks its ops by their kernels' GPU time, with or without a known device (analysis.ops)
    title = "Top ops by GPU time" if len(a.kernels) else "Top CPU ops by time (outermost op with a cost model)"
    return Section(title, head, rows, [0, 0, 0, 0, 2, 2, 1, 3], flex=1, left=(0, 1))


def collective_rows(a: Analysis, top: int) -> Section:
    head = ["collective", "group", "ranks", "message", "calls", "time", "algbw GB/s", "busbw GB/s", "link efficiency"]
    mark = flag_marks(a, "collectives")
    rows = [[text(r["collective"]), text(r["group"]), text(r["group_size"]), si(r["message_bytes"], "B"), f"{r['count']:,}", duration(r["time_ns"]),
             number(r["algbw_gbps"], "{:,.1f}"), number(r["busbw_gbps"], "{:,.1f}"), mark(i, "link_efficiency", percent(r["link_efficiency"]))]
            for i, r in enumerate(records(a.collective_summary.head(top)))]
    return Section("Collectives (nccl-tests bus bandwidth; link efficiency = busbw / interconnect)", head, rows,
                   [0, 1, 2, 0, 2, 0, 1, 0, 0], flex=1, left=(0, 1))


def overlap_rows(a: Analysis) -> Section:
    head = ["device", "communication", "hidden by compute", "exposed", "hidden share"]
    rows = [[str(r["device"]), duration(r["comm_ns"]), duration(r["overlapped_ns"]), duration(r["exposed_ns"]), percent(r["overlap_share"])]
            for r in a.overlap.to_dict(orient="records") if r["comm_ns"]]
    return Section("Compute / communication overlap", head, rows, [0, 0, 0, 0, 0], empty="(no communication kernels)")


def unmodeled_rows(a: Analysis, label: Labels) -> Section:
    head = ["kernel", "time", "share", "why it has no cost"]
    rows = [[label(r["name"]), duration(r["time_ns"]), percent(r["share"]), r["reason"]] for r in a.coverage["top_unmodeled"]]
    return Section("Kernels without a cost, and why", head, rows, [0, 0, 0, 0], flex=0, left=(0, 3), wrap=(3,))


def _coverage_note(a: Analysis) -> str:
    c = a.coverage
    return (f"counts the {percent(c['modeled_share'])} of GPU kernel time that has a cost; "
            f"time without one is listed under 'Kernels without a cost'")


def lead(a: Analysis) -> list[Section]:
    """What every report leads with, right under the headline: the ranked list of causes."""
    if not len(a.kernels) or a.findings is None:
        return []
    return [fix_first(a), *filter(None, [fixes(a)])]


def sections(a: Analysis, top: int) -> list[Section]:
    """Every section, in the order a reader needs them: what to fix, then the detail."""
    from tracekit.reports.prediction import sections as prediction_sections
    from tracekit.reports.throughput import sections as throughput_sections

    from tracekit.reports.health import health_section
    from tracekit.trace.health import kernel_times_unknown

    if kernel_times_unknown(a.meta):  # GPU times lost: the steps are the GPU annotations' windows
        return [health_section(a), steps_section(a), op_rows(a, top), *throughput_sections(a), *prediction_sections(a)]
    if a.kernels.empty:  # a CPU-only profile: its ops, costed against CPU time; steps and stages on the host
        return [health_section(a), op_rows(a, top), *throughput_sections(a)]
    # A GPU trace on an unknown GPU has every table; its roofline figures are "—".
    label = Labels(a)
    return [health_section(a), fix_ops(a, top), fix_kernels(a, top, label), fix_blocks(a, top), idle(a), idle_host(a),
            block_rows(a), kernel_rows(a, top, label), copy_rows(a, top), op_rows(a, top),
            collective_rows(a, top), overlap_rows(a), device_rows(a), steps_section(a), *throughput_sections(a), *prediction_sections(a), unmodeled_rows(a, label)]
