"""`tracekit diff`: the comparison of two runs as a terminal table, Markdown or JSON.

Every section is turned into rows of plain display strings once (`sections`); each medium
only escapes and lays them out."""

from __future__ import annotations

from typing import Any, Callable

from tracekit.common.format import UNKNOWN, duration, percent, ratio, signed_duration, si
from tracekit.strict_json import dumps










def _side(row: dict, side: str, field: str, fmt: Callable[[Any], str]) -> str:
    values = row[side]
    if values is None:
        return "absent" if row["only"] else f"< {duration(row.get('below_ns'))}" if field == "time_ns" else UNKNOWN
    return fmt(values.get(field))


def _note(row: dict) -> str:
    if row["only"]:
        return f"only in {row['only']}"
    if row["unlisted"]:
        return f"not in {row['unlisted']}'s top list"
    return ""


def _efficiencies(row: dict) -> str:
    return f"{_side(row, 'base', 'efficiency', percent)} → {_side(row, 'new', 'efficiency', percent)}"


def _common(row: dict) -> list[str]:
    return [_side(row, "base", "time_ns", duration), _side(row, "new", "time_ns", duration), signed_duration(row["delta_ns"]), ratio(row["ratio"])]


def _interval(bounds: list[float] | None) -> str:
    return UNKNOWN if not bounds else f"{bounds[0]:.3f}–{bounds[1]:.3f}x"


def _verdict(row: dict) -> str:
    """The change's verdict, or why there is none."""
    if row.get("verdict"):
        return row["verdict"]
    if row["only"] or row["unlisted"]:
        return _note(row)
    samples = row.get("samples") or [0, 0]
    if min(samples) >= 1 and max(samples) < 2:
        return "1 call each"
    return "no durations" if row.get("ratio") is not None else UNKNOWN


TIME_HEAD = ["base", "new", "Δ time", "ratio"]
TEXT_COLUMNS = {"run", "compared as", "kind", "base step", "new step", "phase", "block", "op", "input shapes", "kernel", "collective",
                "verdict", "note"}
# columns of a per-call table, after its name columns
CALL_HEAD = ["calls", "base/call", "new/call", "Δ/call", "ratio", "95% interval", "verdict", "total base → new"]
# their priorities: the change per call, its ratio and its verdict are the answer
CALL_PRIORITY = [1, 2, 2, 0, 0, 1, 0, 3]


def _calls(row: dict) -> list[str]:
    def count(side):
        f = row[side]
        return f"{int(f['calls']):,}" if f is not None and f.get("calls") is not None else ("0" if row["only"] else UNKNOWN)

    return [f"{count('base')} → {count('new')}", _side(row, "base", "per_call_ns", duration), _side(row, "new", "per_call_ns", duration),
            signed_duration(row["delta_ns"]), ratio(row["ratio"]), _interval(row.get("interval")), _verdict(row),
            f"{_side(row, 'base', 'time_ns', duration)} → {_side(row, 'new', 'time_ns', duration)}"]


def _totals(d: dict, key: str = "totals") -> tuple[list[str], list[list[str]], list[int]]:
    def fmt(metric: str, v: Any, signed: bool = False) -> str:
        if v is None:
            return UNKNOWN
        if metric.endswith("_ns"):
            return signed_duration(v) if signed else duration(v)
        if metric == "throughput":
            return f"{v:+,.2f}/s" if signed else f"{v:,.2f}/s"
        if metric == "iterations":
            return f"{v:+,.0f}" if signed else f"{v:,.0f}"
        return (f"{100 * v:+.1f} pt" if signed else percent(v))

    def change(r: dict) -> list[str]:
        if not r.get("compared", True):
            return ["not compared", UNKNOWN]
        return [fmt(r["metric"], r["delta"], True), ratio(r["ratio"])]

    rows = [[r["metric"].removesuffix("_ns"), r.get("normalisation") or "", fmt(r["metric"], r["base"]), fmt(r["metric"], r["new"]), *change(r),
             _interval(r.get("interval")), r.get("verdict") or (UNKNOWN if r.get("compared", True) else "not compared")]
            for r in d[key]]
    return ["run", "compared as", "base", "new", "Δ", "ratio", "95% interval", "verdict"], rows, [0, 2, 1, 1, 0, 0, 1, 0]


def _steps(d: dict) -> tuple[list[str], list[list[str]], list[int]]:
    rows = [[str(r["key"].get("kind", "")), str(r["key"]["index"]), (r["base"] or {}).get("step") or UNKNOWN, (r["new"] or {}).get("step") or UNKNOWN,
             *_common(r), _note(r)] for r in d["steps"]]
    return ["kind", "#", "base step", "new step", *TIME_HEAD, "note"], rows, [0, 0, 2, 2, 1, 1, 0, 0, 0]


def _blocks(d: dict) -> tuple[list[str], list[list[str]], list[int]]:
    mode = (d.get("normalisation") or {}).get("blocks", "total")
    per_step = mode.startswith("per step")

    def time(r, side):
        return _side(r, side, "per_step_ns" if per_step else "time_ns", duration)

    rows = [[r["key"]["phase"], r["key"]["block"], time(r, "base"), time(r, "new"), signed_duration(r["delta_ns"]), ratio(r["ratio"]),
             f"{_side(r, 'base', 'share', percent)} → {_side(r, 'new', 'share', percent)}", _efficiencies(r),
             f"{_side(r, 'base', 'coverage', percent)} → {_side(r, 'new', 'coverage', percent)}", _note(r)]
            for r in d["blocks"]]
    unit = "/step" if per_step else ""
    share_answer = 0 if mode == "share of GPU time" else 2
    return (["phase", "block", f"base{unit}", f"new{unit}", f"Δ{unit}", "ratio", "share", "efficiency", "coverage", "note"], rows,
            [0, 0, 2, 2, 0, 0, share_answer, 1, 3, 0])


def _ops(d: dict, top: int) -> tuple[list[str], list[list[str]], list[int]]:
    rows = [[r["key"]["op"], str(r["key"]["shapes"]), *_calls(r)] for r in d["ops"][:top]]
    return ["op", "input shapes", *CALL_HEAD], rows, [0, 0, *CALL_PRIORITY]


def _kernels(d: dict, top: int) -> tuple[list[str], list[list[str]], list[int]]:
    rows = [[r["key"]["kernel"], *_calls(r)] for r in d["kernels"][:top]]
    return ["kernel", *CALL_HEAD], rows, [0, *CALL_PRIORITY]


def _collectives(d: dict) -> tuple[list[str], list[list[str]], list[int]]:
    rows = [[str(r["key"]["collective"]), si(r["key"]["message_bytes"], "B") if r["key"]["message_bytes"] is not None else UNKNOWN,
             *_calls(r), f"{_side(r, 'base', 'busbw_gbps', _gbps)} → {_side(r, 'new', 'busbw_gbps', _gbps)}"]
            for r in d["collectives"]]
    return ["collective", "size", *CALL_HEAD, "busbw"], rows, [0, 0, *CALL_PRIORITY, 2]


def _gbps(v: Any) -> str:
    return UNKNOWN if v is None else f"{v:.2f} GB/s"


def sections(d: dict, top: int) -> list[tuple[str, list[str], list[list[str]], list[int]]]:
    """(title, head, rows, priorities): the title says how the table is normalised."""
    norm = d.get("normalisation") or {}
    totals = norm.get("totals", "total")
    run_title = "Run" if totals == "total" else f"Run (totals {totals})"
    tables = [(run_title, *_totals(d)),
              ("Steps, per step (matched by kind and order)", *_steps(d)),
              (f"Phase x block ({norm.get('blocks', 'total')})", *_blocks(d)),
              (f"Ops by (name, input shapes), per call, top {top} by |Δ per call × calls| (an op call's time is the sum of "
               "every kernel it launched, so it is larger than any one of its kernels' per-call time)", *_ops(d, top)),
              (f"Kernels by label, per call, top {top} by |Δ per call × calls| (one launch of the kernel)", *_kernels(d, top)),
              ("Collectives by (type, size), per call", *_collectives(d))]
    return [(title, *_without_empty_notes(head, rows, priority)) for title, head, rows, priority in tables]


def _without_empty_notes(head: list[str], rows: list[list[str]], priority: list[int]):
    """The note column only where some row has a note: never an empty column."""
    if "note" not in head or any(row[head.index("note")] for row in rows):
        return head, rows, priority
    i = head.index("note")
    return head[:i] + head[i + 1:], [row[:i] + row[i + 1:] for row in rows], priority[:i] + priority[i + 1:]


def console_sections(d: dict, top: int = 15) -> list:
    """The diff's tables as Sections: names are text columns (the first of them gets the
    room first); priorities as `sections` declares them (0: the answer)."""
    from tracekit.reports.section import Section

    out = []
    for title, head, rows, priority in sections(d, top):
        text = tuple(i for i, h in enumerate(head) if h in TEXT_COLUMNS)
        names = [i for i in text if head[i] not in ("verdict", "note", "compared as")]
        out.append(Section(title, head, rows, priority, flex=names[-1] if names else 0, left=text))
    return out


def _title(d: dict) -> list[str]:
    def side(s: dict) -> str:
        rank = f" rank {s['rank']}" if s.get("rank") is not None else ""
        return f"{s.get('path')}{rank} ({s.get('format')}, {s.get('device') or 'no GPU'})"

    return [f"base: {side(d['base'])}", f"new:  {side(d['new'])}"]


IDLE_POINTS = 0.02  # GPU idle moving by 2 points of the step time is a change, not noise


def verdict_line(d: dict) -> str:
    """The diff in one line: the median step's verdict, then whatever else moved (GPU idle,
    throughput, iterations), so a run whose idle doubled never reads "within noise"."""
    totals = {r["metric"]: r for r in d.get("totals") or []}
    min_change = d.get("min_change", 0.02)
    step = totals.get("step_time_ns") or {}
    parts, worse, better = [], [], []
    if step.get("ratio") is not None:
        word = step.get("verdict") or "no interval"
        parts.append(f"median step {duration(step['base'])} → {duration(step['new'])} ({ratio(step['ratio'])}, {word})")
        (worse if word == "slower" else better if word == "faster" else []).append("step")
    idle = totals.get("gpu_idle_share") or {}
    if idle.get("delta") is not None:
        parts.append(f"GPU idle {percent(idle['base'])} → {percent(idle['new'])} of {idle['normalisation'].removeprefix('share of ')}")
        if abs(idle["delta"]) >= IDLE_POINTS:
            (worse if idle["delta"] > 0 else better).append("GPU idle")
    tput = totals.get("throughput") or {}
    if tput.get("ratio") is not None:
        parts.append(f"throughput {tput['base']:,.2f} → {tput['new']:,.2f}/s ({tput['ratio'] - 1:+.1%})")
        if abs(tput["ratio"] - 1) >= min_change:
            (worse if tput["ratio"] < 1 else better).append("throughput")
    its = totals.get("iterations") or {}
    if its.get("ratio") is not None and its["base"] != its["new"]:
        parts.append(f"{its['base']:,.0f} → {its['new']:,.0f} iterations in the capture")
    if not parts:
        return "verdict: nothing to compare (no steps, no idle figures in either run)"
    head = ("worse" if worse and not better else "better" if better and not worse else
            "mixed" if worse and better else "within noise")
    why = f" ({', '.join(worse)} worse{'; ' + ', '.join(better) + ' better' if better else ''})" if worse else (
        f" ({', '.join(better)} better)" if better else "")
    return f"verdict: {head}{why}: " + "; ".join(parts)


def to_json(d: dict) -> str:
    return dumps(d)


def to_markdown(d: dict, top: int = 15) -> str:
    from tracekit.reports.text import markdown as esc, markdown_table

    lines = ["# tracekit diff", "", f"**{esc(verdict_line(d))}**", ""] + [f"- {esc(t)}" for t in _title(d)]
    lines += [f"- warning: {esc(w)}" for w in d.get("warnings", [])]
    lines.append(f"- verdicts: 95% bootstrap interval of new / base (fixed seed); slower or faster only when the interval "
                 f"excludes 1 and the change is at least {100 * d.get('min_change', 0.02):g}%")
    for title, head, rows, _ in sections(d, top):
        lines += ["", f"## {esc(title)}", ""]
        if not rows:
            lines.append("(none)")
            continue
        lines += markdown_table(head, rows)
    return "\n".join(lines) + "\n"


def render_console(d: dict, console, top: int = 15) -> None:
    from rich.text import Text

    from tracekit.reports.terminal import print_section
    from tracekit.reports.text import terminal

    console.print(terminal(verdict_line(d), "bold"))
    for t in _title(d):
        console.print(terminal(t))
    for w in d.get("warnings", []):
        console.print(Text.assemble(("warning: ", "yellow"), terminal(w)))
    for section in console_sections(d, top):
        if section.rows:
            print_section(section, console)


FILES = ("diff.json", "diff.md")


def write(d: dict, out_dir: str, top: int = 15) -> list[str]:
    """diff.json (every matched item) and diff.md (the tables) into out_dir."""
    import os

    from tracekit.common.atomic import write_files

    # published together: a failure at diff.md (a full disk) leaves no diff.json behind
    from tracekit.common.ownership import MANIFEST, manifest_text

    return write_files({os.path.join(out_dir, "diff.json"): to_json(d) + "\n", os.path.join(out_dir, "diff.md"): to_markdown(d, top),
                        os.path.join(out_dir, MANIFEST): manifest_text(out_dir, FILES)})


def rank_sections(d: dict, top: int) -> list[tuple[str, list[str], list[list[str]], list[int]]]:
    """The cross-rank comparison and one line per rank: its step time and largest kernel change."""
    rows = []
    for r in d["ranks"]:
        if r["diff"] is None:
            rows.append([str(r["rank"]), UNKNOWN, UNKNOWN, UNKNOWN, UNKNOWN, f"only in {r['only']}", "", ""])
            continue
        step = r["diff"]["totals"][0]
        kernels = [k for k in r["diff"]["kernels"] if k["only"] is None and k["unlisted"] is None]
        k = kernels[0] if kernels else None
        rows.append([str(r["rank"]), duration(step["base"]), duration(step["new"]), ratio(step["ratio"]),
                     _interval(step.get("interval")), step.get("verdict") or UNKNOWN,
                     k["key"]["kernel"] if k else UNKNOWN, f"{ratio(k['ratio'])} {_verdict(k)}" if k else UNKNOWN])
    per_rank = (["rank", "base step", "new step", "ratio", "95% interval", "verdict", "largest kernel change", "per call"], rows,
                [0, 1, 1, 0, 2, 0, 0, 0])
    return [("Cross-rank (step_time: median GPU window over every rank's steps; median_rank_iteration: median over ranks of "
             "each rank's host step ranges, the loop's period with host work)", *_totals(d, "cross_rank")),
            ("Per rank: median step, and the kernel whose per-call change costs the most time", *per_rank)]


def ranks_markdown(d: dict, top: int = 15) -> str:
    from tracekit.reports.text import markdown as esc, markdown_table

    lines = ["# tracekit diff (ranks)", "", f"- base: {d['base']['ranks']} ranks, new: {d['new']['ranks']} ranks",
             f"- stragglers: base {esc(d['stragglers']['base'])}, new {esc(d['stragglers']['new'])}"]
    lines += [f"- warning: {esc(w)}" for w in d.get("warnings", [])]
    for title, head, rows, _ in rank_sections(d, top):
        lines += ["", f"## {esc(title)}", ""] + (markdown_table(head, rows) if rows else ["(none)"])
    for r in d["ranks"]:
        if r["diff"] is not None:
            body = to_markdown(r["diff"], top).split("\n", 1)[1]
            lines += ["", f"# rank {r['rank']}", body]
    return "\n".join(lines) + "\n"


def render_ranks(d: dict, console, top: int = 15) -> None:
    from tracekit.reports.section import Section
    from tracekit.reports.terminal import print_section
    from tracekit.reports.text import terminal

    console.print(terminal(f"base: {d['base']['ranks']} ranks; new: {d['new']['ranks']} ranks; stragglers "
                           f"{d['stragglers']['base']} -> {d['stragglers']['new']} (per-rank detail: --format json or --out)"))
    for title, head, rows, priority in rank_sections(d, top):
        text = tuple(i for i, h in enumerate(head) if h in ("run", "compared as", "verdict", "largest kernel change", "per call"))
        flex = head.index("largest kernel change") if "largest kernel change" in head else 0
        print_section(Section(title, head, rows, priority, flex=flex, left=text), console)


def write_ranks(d: dict, out_dir: str, top: int = 15) -> list[str]:
    import os

    from tracekit.common.atomic import write_files

    # published together: a failure at diff.md (a full disk) leaves no diff.json behind
    from tracekit.common.ownership import MANIFEST, manifest_text

    return write_files({os.path.join(out_dir, "diff.json"): to_json(d) + "\n", os.path.join(out_dir, "diff.md"): ranks_markdown(d, top),
                        os.path.join(out_dir, MANIFEST): manifest_text(out_dir, FILES)})
