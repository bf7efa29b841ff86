"""`tracekit project`: a projection (tracekit.projection) as Sections for the terminal and Markdown."""

from __future__ import annotations

from tracekit.reports.format import duration, number, percent
from tracekit.reports.section import Section
from tracekit.reports.text import markdown as md, markdown_table


def _range(lo, hi) -> str:
    return f"{duration(lo)}…{duration(hi)}"


def summary_lines(p) -> list[str]:
    t = p.totals
    lines = [f"{p.source.name} [{p.source.key}] → {p.target.name} [{p.target.key}]",
             f"GPU busy: {duration(t['busy_ns'])} measured → {duration(t['busy_projected_ns'])} projected "
             f"(range {_range(t['busy_low_ns'], t['busy_high_ns'])}, ×{number(t.get('busy_ratio'), '{:.3f}')}; "
             f"{percent(t['costed_share'])} of it costed)"]
    if t.get("steps"):
        lines.append(f"steps ({t['steps']}): {duration(t['step_measured_ns'])} measured → {duration(t['step_projected_ns'])} "
                     f"projected (range {_range(t['step_low_ns'], t['step_high_ns'])}, ×{number(t.get('step_ratio'), '{:.3f}')})")
    else:
        lines.append(f"no step annotations: GPU-active window {duration(t['active_ns'])} → {duration(t['active_projected_ns'])}")
    return lines


def sections(p) -> list[Section]:
    head = ["step", "measured", "projected", "range", "×", "busy → projected", "host-bound", "throughput", "projected throughput"]
    rows = [[r["step"], duration(r["measured_ns"]), duration(r["projected_ns"]), _range(r["low_ns"], r["high_ns"]),
             number(r["ratio"], "{:.3f}"), f"{duration(r['busy_ns'])} → {duration(r['busy_projected_ns'])}",
             "yes" if r["host_bound"] else "no", f"{number(r['throughput'], '{:,.2f}')} {r['unit']}/s",
             f"{number(r['throughput_projected'], '{:,.2f}')} ({number(r['throughput_low'], '{:,.2f}')}…"
             f"{number(r['throughput_high'], '{:,.2f}')}) {r['unit']}/s"]
            for r in p.steps.to_dict(orient="records")]
    out = [Section("Steps projected (host timeline as measured; kernels replayed per stream)", head, rows,
                   [0, 0, 0, 1, 1, 2, 2, 1, 0], flex=0, empty="(no step annotations)")]

    def group(title: str, frame, keys: list[str]) -> Section:
        head = [*keys, "kernels", "measured", "projected", "range", "×", "roof on target", "costed"]
        rows = [[*(str(r[k]) for k in keys), f"{r['kernels']:,}", duration(r["measured_ns"]), duration(r["projected_ns"]),
                 _range(r["low_ns"], r["high_ns"]), number(r["ratio"], "{:.3f}"), r["roof"], percent(r["costed_share"])]
                for r in frame.to_dict(orient="records")]
        n = len(keys)
        return Section(title, head, rows, [0] * n + [2, 0, 0, 1, 0, 1, 2], flex=n - 1, left=(*range(n), n + 5))

    out.append(group("Stages projected (GPU busy time)", p.stages, ["stage"]))
    out.append(group("Blocks projected (GPU busy time)", p.blocks, ["phase", "block"]))
    return out


def render_console(p, con) -> None:
    from tracekit.reports.terminal import print_section
    from tracekit.reports.text import terminal

    for line in summary_lines(p):
        con.print(terminal(line))
    for s in sections(p):
        con.print()
        print_section(s, con)
    con.print()
    con.print(terminal("Assumptions:"))
    for a in p.assumptions:
        con.print(terminal(f"- {a}"))


def render_markdown(p) -> str:
    lines = [f"# tracekit projection: {md(p.path)}", ""] + [f"- {md(s)}" for s in summary_lines(p)]
    for s in sections(p):
        lines += ["", f"## {md(s.title)}", ""]
        lines += markdown_table(s.head, s.rows, (*s.left, s.flex)) if s.rows else [md(s.empty)]
    lines += ["", "## Assumptions", ""] + [f"- {md(a)}" for a in p.assumptions]
    return "\n".join(lines) + "\n"
