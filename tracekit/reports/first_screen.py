"""`tracekit analyze`'s first screen: the answer in at most FIRST_SCREEN_LINES lines.

The whole report (`--full`, report.md, report.html, --format json) holds every table; this
screen holds what a reader acts on: the headline in three lines (where the time went, how
far from the roofline, the number to watch), the top causes one line each with a short fix
and the number of its full sentence (the full report's "Fixes"), the top rows of phase x
block, the steps and the stage shares in a line each, and one line of notes (flags, trace
health, how to see the rest). Every figure is the full report's: the same Analysis, the same
format functions. A figure above its physical limit keeps its flag (" (!)") beside it; the
flags' paragraphs are in the full report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from tracekit.attribution.rules import phased
from tracekit.common.format import FLAG, MIN_COVERAGE, duration, middle, percent, rate, rounded_percent
from tracekit.reports.lines import device_label
from tracekit.reports.section import Section
from tracekit.reports.headline import efficiency_flagged
from tracekit.reports.tables import flag_marks
from tracekit.reports.terminal import print_section
from tracekit.reports.text import terminal

if TYPE_CHECKING:
    from tracekit.analysis import Analysis

FIRST_SCREEN_LINES = 40  # at 80, 100 and 120 columns (tests/test_first_screen.py)
TOP_CAUSES = 5
TOP_BLOCKS = 5
WHERE_MIN = 24  # the place of a cause (a kernel, an op, a range) keeps this much before the fix column goes

# Each cause of the ranked list (analysis.causes) by its code: a short title, and the fix as a
# phrase. The full sentences (cause.what, cause.fix) are the full report's.
SHORT_CAUSE = {
    "idle_host_wait": "idle: host late", "idle_sync": "idle: host sync", "idle_queued": "idle: queued",
    "idle_other": "idle: no cause seen", "idle_outside_host_wait": "idle outside: host",
    "idle_outside_sync": "idle outside: sync", "idle_outside_queued": "idle outside: queued",
    "idle_outside_other": "idle outside steps", "copies": "unhidden copies", "exposed_communication": "exposed comm",
    "recoverable": "above sust. roofline", "launch_overhead": "launches > kernels", "profiler_overhead": "slow launch calls",
    "waste_unfused_elementwise": "unfused elementwise", "waste_unfused_attention": "unfused attention",
    "waste_copies_layout": "layout copies", "waste_copies_cast": "repeated casts",
    "waste_copies_rewrite": "whole rewrites", "waste_strided_elementwise": "strided elementwise",
    "waste_weight_gathers": "weight gathers", "waste_recompute": "recompute",
}
SHORT_FIX = {
    "waste_unfused_elementwise": "torch.compile", "waste_unfused_attention": "use SDPA",
    "waste_copies_layout": "contiguous once", "waste_copies_cast": "cast once", "waste_copies_rewrite": "in place",
    "waste_strided_elementwise": "contiguous once", "waste_weight_gathers": "grouped GEMM",
    "waste_recompute": "checkpoint less",
}


def short_cause(c: dict[str, Any]) -> str:
    """The cause's title: its own short name, else its sentence up to the first detail."""
    if c["cause"] in SHORT_CAUSE:
        return SHORT_CAUSE[c["cause"]]
    return str(c["what"]).split(": ", 1)[0].split(" (", 1)[0]


def short_fix(number: int, c: dict[str, Any]) -> str:
    """The fix as a phrase and the number of its sentence in the full report's Fixes."""
    if not c.get("fix"):
        return ""
    return f"{SHORT_FIX.get(c['cause'], 'see fix')} [fix {number}]"


def headline_lines(a: Analysis) -> list[str]:
    """Three lines: where the time went, the roofline, the number to watch (the full headline's
    figures, fewer words). A trace without GPU times keeps the full headline's words."""
    from tracekit.reports.tables import headline as full_headline

    f = a.findings
    if f is None:
        return []
    h = f.headline
    if h.kind != "gpu":
        return full_headline(a)
    lines = []
    if h.blocks:
        parts = ", ".join(f"{phased(phase, block)} {percent(share)}" for phase, block, share in h.blocks)
        idle = (f"; GPU idle {rounded_percent(h.idle_share)} of the {h.denominator}" if h.idle_share is not None else "")
        lines.append(f"GPU time: {parts} of {duration(h.busy_ns)} busy{idle}.")
    lines.append(roofline_sentence(h, FLAG if efficiency_flagged(a) else ""))
    if f.denominator_ns:
        lines.append(f"Watch: the {f.denominator}, {duration(f.denominator_ns)} (the causes' shares are of it).")
    return lines


def roofline_sentence(h, mark: str = "") -> str:
    apart = " (communication apart)" if h.comm_apart else ""
    bound = ", ".join(f"{rounded_percent(v)} {b}-bound" for b, v in h.bounds)
    if h.efficiency is not None:
        sustained, peak = h.efficiency
        return (f"Roofline: {rounded_percent(sustained)}{mark} of sustained ({rounded_percent(peak)}{mark} of peak) over "
                f"{rounded_percent(h.work_covered)} of kernel time{apart}" + (f"; {bound}." if bound else "."))
    if h.costed_without_device is not None:
        return f"Roofline: unknown GPU; pass --device NAME (`tracekit devices`). {rounded_percent(h.costed_without_device)} has a cost."
    if h.costed_without_peak is not None:
        return f"Roofline: the device table has no peak for {', '.join(h.costed_without_peak[1]) or 'its dtype'}."
    return (f"Roofline: unknown, only {rounded_percent(h.coverage_short)} of kernel time{apart} has a cost "
            f"(needs {percent(MIN_COVERAGE)}; --full says how to cost the rest).")


def causes_section(a: Analysis) -> Section | None:
    f = a.findings
    if f is None or not f.causes or not len(a.kernels):
        return None
    mark = flag_marks(a, "what_to_fix_first.causes")
    rows = [[str(i + 1), short_cause(c), str(c["where"]), duration(c["time_ns"]), mark(i, "share", percent(c["share"])),
             short_fix(i + 1, c)] for i, c in enumerate(f.causes[:TOP_CAUSES])]
    more = len(f.causes) - TOP_CAUSES
    # host-time rows (launches, profiler) lie inside the idle rows: their shares do not add (cumulative_share None)
    overlap = "; host rows overlap idle" if any(c.get("cumulative_share") is None for c in f.causes[:TOP_CAUSES]) else ""
    title = f"What to fix first (share of {f.denominator}{overlap}{'; ' + str(more) + ' more in --full' if more > 0 else ''})"
    # the time is the whole cause's; the place is the one that holds the largest part of it
    head, priority = ["#", "cause", "mostly in", "time", "share", "fix"], [0, 0, 0, 0, 0, 1]
    if not any(r[-1] for r in rows):  # no fix among them: the column would be empty
        head, priority, rows = head[:-1], priority[:-1], [r[:-1] for r in rows]
    # the cause's title and the fix's phrase are short labels: whole, or the fix dropped; the place gives way
    return Section(title, head, rows, priority, flex=2, left=(1, 2, 5), whole=(1, 5), flex_min=WHERE_MIN)


def blocks_section(a: Analysis) -> Section | None:
    if not len(a.blocks):
        return None
    mark = flag_marks(a, "blocks")
    rows = [[phased(r["phase"], r["block"]), duration(r["gpu_time_ns"]), mark(i, "share", percent(r["share"])),
             mark(i, "efficiency", percent(r["efficiency_sustained"])), str(r["bound"] or "—")]
            for i, r in enumerate(a.blocks.head(TOP_BLOCKS).to_dict(orient="records"))]
    more = len(a.blocks) - TOP_BLOCKS
    return Section(f"Blocks (share of GPU busy time{'; ' + str(more) + ' more in --full' if more > 0 else ''})",
                   ["phase / block", "GPU time", "share", "of sustained roofline", "bound"], rows, [0, 0, 0, 1, 2], left=(0, 4))


def steps_line(a: Analysis) -> str | None:
    """The steps in one line: count, where they came from, and the rate."""
    if not len(a.steps):
        return None
    source = a.meta.get("step_source") or "none found"
    line = f"steps       {len(a.steps):,} (from {source})"
    total = (a.throughput.total if a.throughput is not None else None) or {}
    if total.get("throughput") is not None:
        line += f": {rate(total['throughput'], str(total['unit']) + '/s')} over {duration(total['wall_ns'])}"
    by_stage = total.get("by_main_stage") or {}
    if by_stage:
        line += "; " + ", ".join(f"{stage} {rate(g['throughput'], str(total['unit']) + '/s')}" for stage, g in by_stage.items())
    return line


def stages_line(a: Analysis) -> str | None:
    """The stage shares in one line (denoise / recompute / VAE decode, prefill / decode, ...)."""
    t = a.throughput
    if t is None or not len(t.stages):
        return None
    ranked = sorted(t.stages[["stage", "wall_share"]].itertuples(index=False), key=lambda r: -(r.wall_share or 0))
    of = "the steps' GPU windows" if t.total is not None else "the GPU-active window"
    return f"stages      {', '.join(f'{r.stage} {percent(r.wall_share)}' for r in ranked)} (share of {of})"


def notes_line(a: Analysis, health_rows: int) -> str:
    flags = len(getattr(a, "flags", None) or [])
    tables = sorted({f.table.split(".")[0] for f in getattr(a, "flags", None) or []})
    health = "trace health ok" if not health_rows else f"trace health: {health_rows} problem{'s' if health_rows > 1 else ''}"
    coverage = a.coverage.get("modeled_share")
    costed = f"{percent(coverage)} of kernel time costed; " if len(a.kernels) and coverage is not None else ""
    flagged = (f"{flags} figure{'s' if flags != 1 else ''} past a physical limit ({', '.join(tables)}), the worst "
               f"{worst_flag(a.flags)}; why in --full; " if flags else "")
    return f"notes       {costed}{flagged}{health}; `--full` for the whole report"


def worst_flag(flags) -> str:
    """The flagged figure furthest past its limit, named: where, which figure, its value."""
    named = [f for f in flags if f.table != "activities"] or list(flags)  # an activities flag names a count, not a row
    worst = max(named, key=lambda f: (f.value / f.limit) if f.limit else float("inf"))
    value = percent(worst.value) if worst.limit <= 2 else f"{worst.value:,.4g}"  # limits near 1 are ratios
    return f"{middle(worst.where, 60)} {worst.figure.replace('_', ' ')} {value}"


def render_first_screen(a: Analysis, console: Console) -> None:
    """The first screen, printed on `console` (its width)."""
    from tracekit.reports.health import health_section

    meta = a.meta
    console.print(Text.assemble(terminal(meta.get("path"), "bold"),
                                f"  ({terminal(meta.get('format'))}, {terminal(device_label(a))}, span {duration(meta.get('span_ns'))})"))
    for line in headline_lines(a):
        console.print(terminal(line, "bold"))
    for section in (causes_section(a), blocks_section(a)):
        if section is not None:
            print_section(section, console, boxed=False)
    model = None
    if getattr(a, "model", None) is not None:  # --model: its agreement with the trace, in one line
        from tracekit.reports.prediction import summary_line

        model = summary_line(a)
    for line in (steps_line(a), stages_line(a), model):
        if line is not None:
            console.print(terminal(line))
    console.print(terminal(notes_line(a, len(health_section(a).rows))))

