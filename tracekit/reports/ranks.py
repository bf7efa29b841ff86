"""The cross-rank report: per-rank step time and compute work, the straggler verdict,
collective skew and bus bandwidth over ranks."""

from __future__ import annotations

from rich.console import Console

from tracekit.ranks.executor import MultiRank
from tracekit.common.format import UNKNOWN, duration, is_unknown, number, percent, si, signed_percent
from tracekit.strict_json import dumps


def _rows(m: MultiRank):
    # the answer first: each rank's step, what it lost to communication and waiting, what it
    # made the others wait; then its work, then the detail
    head = ["rank", "step time", "vs median", "exposed comm", "waited", "made others wait", "GPU busy", "compute work",
            "vs mean", "late vs median", "last at", "steps", "modeled", "efficiency"]
    rows = [[str(r["rank"]), duration(r["step_time_ns"]), signed_percent(r["vs_median"]), duration(r["exposed_comm_ns"]),
             duration(r.get("wait_ns")), duration(r.get("caused_wait_ns")), duration(r["busy_ns"]), duration(r["compute_ns"]),
             signed_percent(r["compute_vs_mean"]), duration(r.get("late_ns")), _count(r.get("last_count"), r.get("instances")),
             str(r["steps"]), percent(r["modeled_share"]), percent(r["efficiency"])] for r in m.per_rank.to_dict(orient="records")]
    return head, rows


def _skew_rows(m: MultiRank, top: int):
    head = ["collective", "group", "instance", "ranks", "skew", "first rank", "last rank", "message"]
    rows = [[str(r["collective"]), str(r["group"]), str(r["instance"]), str(r["ranks"]), duration(r["skew_ns"]), str(r["first_rank"]),
             str(r["last_rank"]), si(r["message_bytes"], "B")] for r in m.skew.head(top).to_dict(orient="records")]
    return head, rows


def _busbw_rows(m: MultiRank):
    head = ["collective", "group", "message", "instances per rank", "ranks", "busbw min GB/s", "at rank", "median", "max", "at rank"]
    rows = [[str(r["collective"]), str(r["group"]), si(r["message_bytes"], "B"), str(r["instances"]), str(r["ranks"]),
             number(r["busbw_min_gbps"], "{:,.4g}"), str(r["min_rank"]), number(r["busbw_median_gbps"], "{:,.4g}"), number(r["busbw_max_gbps"], "{:,.4g}"),
             str(r["max_rank"])] for r in m.busbw.to_dict(orient="records")]
    return head, rows


def _tables(m: MultiRank, top: int):
    return (("Per rank", _rows(m)), ("Collective skew (largest first)", _skew_rows(m, top)),
            ("Collective bus bandwidth over ranks (an early rank waits inside the kernel: its busbw reads low)", _busbw_rows(m)))














def _count(n, of) -> str:
    return f"{int(n)} of {int(of)}" if not is_unknown(n) and not is_unknown(of) else UNKNOWN


def straggler_line(m: MultiRank) -> str:
    s = m.summary
    v = s.get("straggler")
    if v is None:
        if not s.get("collective_instances"):
            return "straggler   unknown: no collective was matched across ranks (needs collectives and each rank's absolute clock)"
        return (f"straggler   none: no rank keeps the others waiting more than {s['straggler_threshold']:.0%} "
                "of the median step time at the collectives")
    others = [r for r in s["stragglers"] if r != v["rank"]]
    cause = ("it also has the most compute work" if v["computes_most"] else
             f"its compute work is {v['compute_vs_mean']:+.1%} vs the mean, so the delay is not its GPU work "
             "(look at its host side: data loading, launch, synchronisation)")
    return (f"straggler   rank {v['rank']}: last to reach {v['last_count']} of {v['instances']} collectives, "
            f"{duration(v['late_ns'])} after the median rank in all; the others waited {duration(v['caused_wait_ns'])} for it "
            f"({v['others_wait_share']:.0%} of the median step per rank), their exposed communication is its effect; {cause}"
            + (f"; also late: ranks {others}" if others else ""))


def summary_lines(m: MultiRank) -> list[str]:
    s = m.summary
    imbalance = (f"imbalance   compute work (union of compute kernels): rank {s['most_compute_rank']} has the most, "
                 f"{s['load_imbalance']:+.1%} over the mean" if not is_unknown(s["load_imbalance"]) else f"imbalance   {UNKNOWN}")
    return [
        f"ranks       {len(m.ranks)}; median step time {duration(s['median_step_time_ns'])}"
        + (f"; steps longer than {s['straggler_threshold']:.0%} over it on ranks {s['long_step_ranks']}" if s["long_step_ranks"] else ""),
        straggler_line(m),
        imbalance,
        f"skew        collective start spread: max {duration(s['max_collective_skew_ns'])}, median {duration(s['median_collective_skew_ns'])} ({s['clock']})",
    ] + ([f"matching    collectives are matched across ranks by their order; the ranks hold different numbers of "
          f"{'; '.join(s['unequal_collective_counts'])}, so later instances may pair different calls"]
         if s.get("unequal_collective_counts") else [])


def render_console(m: MultiRank, console: Console, top: int = 15) -> None:
    from tracekit.reports.section import Section
    from tracekit.reports.terminal import print_section
    from tracekit.reports.text import terminal

    for line in summary_lines(m):
        console.print(terminal(line))
    (_, per_rank), (_, skew), (busbw_title, busbw) = _tables(m, top)
    # rank, steps, step time, vs median, busy, compute work, vs mean, last at, late, waited, others waited, exposed, modeled, eff.
    print_section(Section("Per rank", *per_rank, priority=[0, 0, 0, 0, 0, 0, 1, 1, 2, 1, 2, 3, 3, 2]), console)
    print_section(Section("Collective skew (largest first)", *skew, priority=[0, 2, 1, 2, 0, 1, 1, 2], flex=0), console)
    print_section(Section(busbw_title, *busbw, priority=[0, 2, 0, 2, 2, 0, 1, 0, 0, 1], flex=0), console)


FIRST_SCREEN_RANKS = 8  # the slowest ranks the first screen lists (a 64-rank job fits one screen)
FIRST_SCREEN_SKEW = 5


def render_first_screen(m: MultiRank, console: Console) -> None:
    """The job's first screen (as `tracekit analyze`'s for one trace): the verdict lines, the
    slowest ranks and the largest skews, unboxed; every table whole in --full."""
    from tracekit.reports.section import Section
    from tracekit.reports.terminal import print_section
    from tracekit.reports.text import terminal

    for line in summary_lines(m):
        console.print(terminal(line))
    head, rows = _rows(m)
    order = sorted(range(len(rows)), key=lambda i: -_finite_or(m.per_rank["step_time_ns"].iloc[i]))
    shown = [rows[i] for i in order[:FIRST_SCREEN_RANKS]]
    more = f"; {len(rows) - len(shown)} more in --full" if len(rows) > len(shown) else ""
    print_section(Section(f"Slowest ranks{more}", head, shown, priority=[0, 0, 0, 0, 0, 0, 1, 1, 2, 1, 2, 3, 3, 2]),
                  console, boxed=False)
    skew_head, skew = _skew_rows(m, FIRST_SCREEN_SKEW)
    if skew:
        more = f"; {len(m.skew) - len(skew)} more in --full" if len(m.skew) > len(skew) else ""
        print_section(Section(f"Collective skew (largest first{more})", skew_head, skew, priority=[0, 2, 1, 2, 0, 1, 1, 2], flex=0),
                      console, boxed=False)
    console.print(terminal("notes       each rank's own report: --out DIR; bus bandwidth over ranks: `--full` for the whole report"))


def _finite_or(value, default: float = -1.0) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return default
    return value if value == value else default


def to_markdown(m: MultiRank, top: int = 15) -> str:
    from tracekit.reports.text import markdown as md, markdown_table

    lines = ["# tracekit cross-rank report", ""] + [f"- {md(line)}" for line in summary_lines(m)]
    for title, (head, rows) in _tables(m, top):
        lines += ["", f"## {title}", "", *markdown_table(head, rows)]
    lines += ["", "Per-rank reports: `rank<N>/report.md`."]
    return "\n".join(lines) + "\n"


def to_json(m: MultiRank) -> str:
    return dumps(m.to_dict())


def write_bundle(m: MultiRank, out_dir: str, top: int = 15) -> list[str]:
    import os

    from tracekit.reports.bundle import atomic_dir, write_files
    from tracekit.reports.csv_table import write_csv

    written = []
    with atomic_dir(out_dir) as tmp:  # all ranks' files appear together, or none do
        for r in m.ranks:
            written += [os.path.join(f"rank{r.rank}", name) for name in write_files(r.analysis, os.path.join(tmp, f"rank{r.rank}"), top)]
        write_csv(m.per_rank, os.path.join(tmp, "ranks.csv"))
        written.append("ranks.csv")
        for name, text in (("ranks.md", to_markdown(m, top)), ("ranks.json", to_json(m))):
            with open(os.path.join(tmp, name), "w", encoding="utf-8", errors="backslashreplace") as f:
                f.write(text)
            written.append(name)
    return [os.path.join(out_dir, name) for name in written]
