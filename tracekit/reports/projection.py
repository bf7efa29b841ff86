"""`tracekit project`: a projection (tracekit.projection) as Sections for the terminal and Markdown."""

from __future__ import annotations

from tracekit.common.format import UNKNOWN, duration, number, percent, span
from tracekit.common.format import rate as short_rate
from tracekit.reports.section import Section, section_markdown
from tracekit.reports.text import markdown as md


def _label(value) -> str:
    return UNKNOWN if value is None or value != value else str(value)


def _blocks(pairs: list) -> str:
    return ", ".join(f"{_label(phase)}/{_label(block)}" for phase, block in pairs) or UNKNOWN


def _rules_line(t: dict) -> str | None:
    """Which rule moved how much of the measured GPU time (tracekit.projection.bounds)."""
    rules, busy = t.get("rules"), t.get("busy_ns")
    if not rules or not busy:
        return None
    parts = [f"{name} {duration(v)} ({v / busy:.0%})" for name, v in sorted(rules.items(), key=lambda x: -x[1]) if v > 0]
    return "GPU time by rule: " + ", ".join(parts)


def _throughput_line(t: dict) -> str | None:
    rate = t.get("throughput")
    if not rate or rate.get("measured") is None:
        return None
    unit = rate["unit"]
    return (f"throughput: {number(rate['measured'], '{:,.2f}')} {unit}/s measured → {number(rate['projected'], '{:,.2f}')} "
            f"({span(rate['low'], rate['high'], number)}) {unit}/s")


def _range(lo, hi) -> str:
    return span(lo, hi)


def summary_lines(p) -> list[str]:
    t = p.totals
    lines = [f"{p.source.name} [{p.source.key}] → {p.target.name} [{p.target.key}]",
             f"GPU busy: {duration(t['busy_ns'])} measured → {duration(t['busy_projected_ns'])} projected "
             f"(range {_range(t['busy_low_ns'], t['busy_high_ns'])}, ×{number(t.get('busy_ratio'), '{:.3f}')}; "
             f"{percent(t['costed_share'])} of it costed)"]
    if t.get("steps"):
        lines.append(f"steps ({t['steps']}, GPU window): {duration(t['step_measured_ns'])} measured → {duration(t['step_projected_ns'])} "
                     f"projected (range {_range(t['step_low_ns'], t['step_high_ns'])}, ×{number(t.get('step_ratio'), '{:.3f}')})")
    else:
        lines.append(f"no step annotations: GPU-active window {duration(t['active_ns'])} → {duration(t['active_projected_ns'])}")
    lines += [x for x in (_rules_line(t), _throughput_line(t), t.get("throughput_why")) if x]
    return lines


def sections(p) -> list[Section]:
    head = ["step", "GPU window", "projected", "range", "×", "host range", "busy → projected", "host-bound", "throughput",
            "projected throughput"]
    rows = [[r["step"], duration(r["measured_ns"]), duration(r["projected_ns"]), _range(r["low_ns"], r["high_ns"]),
             number(r["ratio"], "{:.3f}"), duration(r["host_ns"]),
             f"{duration(r['busy_ns'])} → {duration(r['busy_projected_ns'])}",
             "yes" if r["host_bound"] else "no", short_rate(r["throughput"], f"{r['unit']}/s"),
             f"{short_rate(r['throughput_projected'], r['unit'] + '/s')} ({span(r['throughput_low'], r['throughput_high'], lambda v: short_rate(v, r['unit'] + '/s'))})"]
            for r in p.steps.to_dict(orient="records")]
    out = [Section("Steps projected (GPU window: the step's GPU-side annotation or its kernels' span, moved with its kernels "
                   "replayed per stream behind their measured launches: the host timeline apart)", head, rows,
                   [0, 0, 0, 1, 1, 1, 2, 2, 1, 0], flex=0, empty="(no step annotations)")]

    def group(title: str, frame, keys: list[str]) -> Section:
        head = [*keys, "kernels", "measured", "projected", "range", "×", "roof on target", "costed"]
        rows = [[*(_label(r[k]) for k in keys), f"{r['kernels']:,}", duration(r["measured_ns"]), duration(r["projected_ns"]),
                 _range(r["low_ns"], r["high_ns"]), number(r["ratio"], "{:.3f}"), r["roof"], percent(r["costed_share"])]
                for r in frame.to_dict(orient="records")]
        n = len(keys)
        return Section(title, head, rows, [0] * n + [2, 0, 0, 1, 0, 1, 2], flex=n - 1, left=(*range(n), n + 5))

    out.append(group("Stages projected (GPU busy time)", p.stages, ["stage"]))
    out.append(group("Blocks projected (GPU busy time)", p.blocks, ["phase", "block"]))
    return out


def _console(lines: list[str], secs: list[Section], assumptions: list[str], con) -> None:
    from tracekit.reports.terminal import print_section
    from tracekit.reports.text import terminal

    for line in lines:
        con.print(terminal(line))
    for s in secs:
        con.print()
        print_section(s, con)
    con.print()
    con.print(terminal("Assumptions:"))
    for a in assumptions:
        con.print(terminal(f"- {a}"))


def _markdown(title: str, lines: list[str], secs: list[Section], assumptions: list[str]) -> str:
    out = [f"# {title}", ""] + [f"- {md(s)}" for s in lines]
    for s in secs:
        out += section_markdown(s)
    out += ["", "## Assumptions", ""] + [f"- {md(a)}" for a in assumptions]
    return "\n".join(out) + "\n"


def render_console(p, con) -> None:
    _console(summary_lines(p), sections(p), p.assumptions, con)


def render_markdown(p) -> str:
    return _markdown(f"tracekit projection: {md(p.path)}", summary_lines(p), sections(p), p.assumptions)


# -- tracekit project --tp: the same run at another tensor-parallel degree (tracekit.projection.tp)

def tp_summary_lines(p) -> list[str]:
    t = p.totals
    dev = f" on {p.device.name} (link {p.device.interconnect_gbps:,.0f} GB/s)" if p.device is not None else ""
    to = f" on {p.target.name} [{p.target.key}]" if p.target is not None else ""
    lines = [f"TP {p.current_tp if p.current_tp is not None else '?'} ({p.tp_source}){dev} → TP {p.target_tp}{to}"]
    if t["sharded_found"]:
        lines.append(f"sharded blocks: {_blocks(t['sharded_blocks'])}")
    elif p.current_tp is None:
        lines.append("no TP sharding found (the TP degree is unknown): no kernel is known to shrink with TP, so the projection "
                     "changes nothing; pass --model config.json or --run-tp N")
    elif p.current_tp == 1:
        lines.append(f"no TP sharding found: the run has no TP (TP 1; {t['basis'] or 'no per-rank shapes'}): nothing is "
                     "projected to change with the TP degree")
    else:
        lines.append(f"no TP sharding found at TP {p.current_tp} ({t['basis']}): nothing is projected to change with the TP degree")
    lines.append(f"replicated blocks: {_blocks(t['replicated_blocks'])}")
    lines.append(f"GPU busy {duration(t['busy_ns'])}: sharded {duration(t['sharded_ns'])}, replicated {duration(t['replicated_ns'])} "
                 f"({percent(t['replicated_share_busy'])} of busy, {percent(t['replicated_share_step'])} of the step), "
                 f"TP collectives {duration(t['collective_ns'])}, other collectives {duration(t['other_collective_ns'])}, "
                 f"without shapes {duration(t['unknown_ns'])}")
    lines.append(f"GPU busy at TP {p.target_tp}: {duration(t['busy_projected_ns'])} (range {_range(t['busy_low_ns'], t['busy_high_ns'])}, "
                 f"×{number(t.get('busy_ratio'), '{:.3f}')})")
    if t.get("steps"):
        lines.append(f"steps ({t['steps']}): {duration(t['step_measured_ns'])} measured → {duration(t['step_projected_ns'])} at TP "
                     f"{p.target_tp} (range {_range(t['step_low_ns'], t['step_high_ns'])}, ×{number(t.get('step_ratio'), '{:.3f}')})")
    lines += [x for x in (_rules_line(t), _throughput_line(t)) if x]
    if t.get("job_step_measured_ns") is not None:
        lines.append(f"job step (slowest of {len(t['per_rank'])} ranks): {duration(t['job_step_measured_ns'])} → "
                     f"{duration(t['job_step_projected_ns'])}")
    return lines


def tp_sections(p) -> list[Section]:
    roles = ["sharded", "replicated", "collective", "other_collective", "unknown"]
    head = ["phase", "block", "role", "kernels", "measured", *roles, "at TP N", "×"]
    rows = [[_label(r["phase"]), _label(r["block"]), r["role"], f"{r['kernels']:,}", duration(r["measured_ns"]),
             *(duration(r[f"{x}_ns"]) for x in roles), duration(r["projected_ns"]), number(r["ratio"], "{:.3f}")]
            for r in p.blocks.to_dict(orient="records")]
    out = [Section(f"Blocks at TP {p.target_tp}{' on ' + p.target.key if p.target is not None else ''} (GPU busy time by role)", head, rows, [0, 0, 0, 2] + [0] * 7 + [1], flex=1,
                   left=(0, 1, 2))]
    head = ["collective", "kernels", "measured", "message", f"ring factor TP {p.current_tp if p.current_tp is not None else '?'}", f"TP {p.target_tp}",
            "ring time at link now", "at TP N", "projected"]
    rows = [[r["collective"], f"{r['kernels']:,}", duration(r["measured_ns"]), number(r["message_bytes"] / 1e6, "{:,.1f} MB"),
             number(r["factor_now"], "{:.3f}"), number(r["factor_target"], "{:.3f}"), duration(r["ring_now_ns"]),
             duration(r["ring_target_ns"]), duration(r["projected_ns"])] for r in p.collectives.to_dict(orient="records")]
    out.append(Section("TP collectives (ring formula)", head, rows, [0, 2, 0, 1, 1, 1, 1, 1, 0], flex=0, empty="(no TP collective)"))
    head = ["role", "op", "shapes", "why", "kernels", "measured"]
    rows = [[r["role"], str(r["op"]), str(r["shapes"]), str(r["reason"]), f"{r['kernels']:,}", duration(r["measured_ns"])]
            for r in p.signatures.head(15).to_dict(orient="records")]
    out.append(Section("What is sharded and what is replicated (top ops by time)", head, rows, [0, 1, 2, 2, 1, 0], flex=2, left=(0, 1, 2, 3)))
    if p.rank_blocks is not None and len(p.rank_blocks):
        head = ["phase", "block", "alike on every rank (per rank)", "differs across ranks", "verdict"]
        rows = [[_label(r["phase"]), _label(r["block"]), duration(r["alike_ns"]), duration(r["differs_ns"]), r["verdict"]]
                for r in p.rank_blocks.to_dict(orient="records")]
        out.append(Section("Across ranks: same op shapes on every rank?", head, rows, [0, 0, 0, 1, 2], flex=1, left=(0, 1, 4)))
    head = ["step", "GPU window", "at TP N", "range", "×", "host-bound"]
    rows = [[r["step"], duration(r["measured_ns"]), duration(r["projected_ns"]), _range(r["low_ns"], r["high_ns"]),
             number(r["ratio"], "{:.3f}"), "yes" if r["host_bound"] else "no"] for r in p.steps.to_dict(orient="records")]
    out.append(Section("Steps (GPU window, moved with its kernels replayed per stream; host timeline as measured)", head, rows, [0, 0, 0, 1, 1, 2], flex=0,
                       empty="(no step annotations)"))
    return out


def render_tp_console(p, con) -> None:
    _console(tp_summary_lines(p), tp_sections(p), p.assumptions, con)


def render_tp_markdown(p) -> str:
    return _markdown(f"tracekit TP projection: {md(p.path)}", tp_summary_lines(p), tp_sections(p), p.assumptions)
