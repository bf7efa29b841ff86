"""The `--ncu` section: modeled bytes against the user's Nsight Compute counters, per kernel
family, with the agreement rule stated (the figures: tracekit/costs/ncu_compare.py)."""

from __future__ import annotations

from tracekit.common.format import duration, percent, si
from tracekit.reports.text import markdown_table, plain_terminal

FAMILY_WIDTH = 60


def _rule(r: dict) -> str:
    return (f"agrees: reads within ±{r['tolerance']:.0%} of DRAM's (writes fail only above modeled, L2 flushes "
            f"undercount them), or within {si(r['small_slack'], 'B')} where both are under {si(r['small_bytes'], 'B')} "
            "(a small kernel's DRAM count is set by what the L2 holds at its edges)")


def _headline(r: dict) -> list[str]:
    used = "measured (Nsight Compute) bytes" if r["bytes"] == "measured" else "modeled bytes"
    return [
        f"Nsight Compute: {r['paired']} of the trace's kernels paired with {r['ncu_kernels']} ncu rows ({r['costed']} costed); "
        f"the roofline uses {used}",
        f"kernel time that agrees: {percent(r['share'])}; strict (kernels above {si(r['min_bytes'], 'B')}, no small-kernel "
        f"rule): {percent(r['share_strict'])} of {r['compared_strict']} kernels",
        f"total bytes: modeled {si(r['modeled_bytes'], 'B')}, measured {si(r['measured_bytes'], 'B')}",
        _rule(r),
    ]


def _rows(r: dict) -> list[list[str]]:
    return [[str(f["family"])[:FAMILY_WIDTH], str(f["kernels"]), duration(f["time_ns"]), si(f["modeled_bytes"], "B"),
             si(f["measured_bytes"], "B"), percent(f["agree_share"])] for f in r["families"]]


HEAD = ["kernel family", "kernels", "time", "modeled", "measured", "agrees"]


def to_text(r: dict) -> str:
    rows = _rows(r)
    widths = [max(len(HEAD[i]), *(len(row[i]) for row in rows)) if rows else len(HEAD[i]) for i in range(len(HEAD))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    out = ["", *(plain_terminal(x) for x in _headline(r)), "", line(HEAD)]
    out += [plain_terminal(line(row)) for row in rows]
    return "\n".join(out) + "\n"


def to_markdown(r: dict) -> str:
    from tracekit.reports.text import markdown

    lines = ["", "## Against Nsight Compute", "", *(f"- {markdown(x)}" for x in _headline(r)), ""]
    return "\n".join(lines + markdown_table(HEAD, _rows(r), left=(0,))) + "\n"
