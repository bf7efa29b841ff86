"""The cross-rank report: per-rank step time and blocks, stragglers, collective skew."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from tracekit.ranks import MultiRank
from tracekit.reports.format import duration, percent, si
from tracekit.strict_json import dumps


def _rows(m: MultiRank):
    head = ["rank", "steps", "step time", "vs median", "GPU busy", "compute", "comm", "exposed comm", "modeled", "efficiency"]
    rows = [[str(r["rank"]), str(r["steps"]), duration(r["step_time_ns"]), f"{r['vs_median']:+.1%}", duration(r["busy_ns"]),
             duration(r["compute_ns"]), duration(r["comm_ns"]), duration(r["exposed_comm_ns"]), percent(r["modeled_share"]),
             percent(r["efficiency"]) if r["efficiency"] == r["efficiency"] else "-"] for r in m.per_rank.to_dict(orient="records")]
    return head, rows


def _skew_rows(m: MultiRank, top: int):
    head = ["collective", "group", "instance", "ranks", "skew", "first rank", "last rank", "message"]
    rows = [[str(r["collective"]), str(r["group"]), str(r["instance"]), str(r["ranks"]), duration(r["skew_ns"]), str(r["first_rank"]),
             str(r["last_rank"]), si(r["message_bytes"], "B")] for r in m.skew.head(top).to_dict(orient="records")]
    return head, rows


def summary_lines(m: MultiRank) -> list[str]:
    s = m.summary
    return [
        f"ranks       {len(m.ranks)}; median step time {duration(s['median_step_time_ns'])}",
        f"stragglers  {s['stragglers'] or 'none'} (more than {s['straggler_threshold']:.0%} over the median step time)",
        f"imbalance   busiest rank's compute is {s['load_imbalance']:+.1%} over the mean" if s["load_imbalance"] == s["load_imbalance"] else "imbalance   -",
        f"skew        collective start spread: max {duration(s['max_collective_skew_ns'])}, median {duration(s['median_collective_skew_ns'])} ({s['clock']})",
    ]


def render_console(m: MultiRank, console: Console, top: int = 15) -> None:
    for line in summary_lines(m):
        console.print(line)
    for title, (head, rows) in (("Per rank", _rows(m)), ("Collective skew (largest first)", _skew_rows(m, top))):
        table = Table(title=title, header_style="bold")
        for col in head:
            table.add_column(col, justify="right")
        for row in rows:
            table.add_row(*row)
        console.print(table)


def to_markdown(m: MultiRank, top: int = 15) -> str:
    lines = ["# tracekit cross-rank report", ""] + [f"- {line}" for line in summary_lines(m)]
    for title, (head, rows) in (("Per rank", _rows(m)), ("Collective skew", _skew_rows(m, top))):
        lines += ["", f"## {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    lines += ["", "Per-rank reports: `rank<N>/report.md`."]
    return "\n".join(lines) + "\n"


def to_json(m: MultiRank) -> str:
    return dumps(m.to_dict())


def write_bundle(m: MultiRank, out_dir: str, top: int = 15) -> list[str]:
    import os

    from tracekit.reports.bundle import atomic_dir, write_files

    written = []
    with atomic_dir(out_dir) as tmp:  # all ranks' files appear together, or none do
        for r in m.ranks:
            written += [os.path.join(f"rank{r.rank}", name) for name in write_files(r.analysis, os.path.join(tmp, f"rank{r.rank}"), top)]
        m.per_rank.to_csv(os.path.join(tmp, "ranks.csv"), index=False)
        written.append("ranks.csv")
        for name, text in (("ranks.md", to_markdown(m, top)), ("ranks.json", to_json(m))):
            with open(os.path.join(tmp, name), "w", encoding="utf-8", errors="backslashreplace") as f:
                f.write(text)
            written.append(name)
    return [os.path.join(out_dir, name) for name in written]
