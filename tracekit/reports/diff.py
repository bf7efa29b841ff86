"""`tracekit diff`: the comparison of two runs as a terminal table, Markdown or JSON.

Every section is turned into rows of plain display strings once (`sections`); each medium
only escapes and lays them out."""

from __future__ import annotations

from typing import Any, Callable

from tracekit.reports.format import UNKNOWN, duration, percent, ratio, signed_duration, si
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


TIME_HEAD = ["base", "new", "Δ time", "ratio"]


def _totals(d: dict) -> tuple[list[str], list[list[str]]]:
    def fmt(metric: str, v: Any, signed: bool = False) -> str:
        if v is None:
            return UNKNOWN
        if metric.endswith("_ns"):
            return signed_duration(v) if signed else duration(v)
        return (f"{100 * v:+.1f} pt" if signed else percent(v))

    rows = [[r["metric"].removesuffix("_ns"), fmt(r["metric"], r["base"]), fmt(r["metric"], r["new"]), fmt(r["metric"], r["delta"], True), ratio(r["ratio"])]
            for r in d["totals"]]
    return ["run", *TIME_HEAD[:2], "Δ", "ratio"], rows


def _steps(d: dict) -> tuple[list[str], list[list[str]]]:
    rows = [[str(r["key"]["index"]), (r["base"] or {}).get("step") or UNKNOWN, (r["new"] or {}).get("step") or UNKNOWN, *_common(r), _note(r)]
            for r in d["steps"]]
    return ["#", "base step", "new step", *TIME_HEAD, ""], rows


def _blocks(d: dict) -> tuple[list[str], list[list[str]]]:
    rows = [[r["key"]["phase"], r["key"]["block"], *_common(r),
             f"{_side(r, 'base', 'share', percent)} → {_side(r, 'new', 'share', percent)}", _efficiencies(r),
             f"{_side(r, 'base', 'coverage', percent)} → {_side(r, 'new', 'coverage', percent)}", _note(r)]
            for r in d["blocks"]]
    return ["phase", "block", *TIME_HEAD, "share", "efficiency", "coverage", ""], rows


def _ops(d: dict, top: int) -> tuple[list[str], list[list[str]]]:
    rows = [[r["key"]["op"], str(r["key"]["shapes"])[:80], *_common(r), _efficiencies(r), _note(r)] for r in d["ops"][:top]]
    return ["op", "input shapes", *TIME_HEAD, "efficiency", ""], rows


def _kernels(d: dict, top: int) -> tuple[list[str], list[list[str]]]:
    rows = [[r["key"]["kernel"][:90], *_common(r), _efficiencies(r), _note(r)] for r in d["kernels"][:top]]
    return ["kernel", *TIME_HEAD, "efficiency", ""], rows


def _collectives(d: dict) -> tuple[list[str], list[list[str]]]:
    def count(r, side):
        return str((r[side] or {}).get("count", UNKNOWN)) if r[side] else "0"

    rows = [[str(r["key"]["collective"]), si(r["key"]["message_bytes"], "B") if r["key"]["message_bytes"] is not None else UNKNOWN,
             f"{count(r, 'base')} → {count(r, 'new')}", *_common(r),
             f"{_side(r, 'base', 'busbw_gbps', _gbps)} → {_side(r, 'new', 'busbw_gbps', _gbps)}", _note(r)]
            for r in d["collectives"]]
    return ["collective", "size", "count", *TIME_HEAD, "busbw", ""], rows


def _gbps(v: Any) -> str:
    return UNKNOWN if v is None else f"{v:.2f} GB/s"


def sections(d: dict, top: int) -> list[tuple[str, list[str], list[list[str]]]]:
    out = [("Run", *_totals(d)), ("Steps (by order)", *_steps(d)), ("Phase x block", *_blocks(d)),
           (f"Ops by (name, input shapes), top {top} by |Δ time|", *_ops(d, top)),
           (f"Kernels by label, top {top} by |Δ time|", *_kernels(d, top)), ("Collectives by (type, size)", *_collectives(d))]
    return out


def _title(d: dict) -> list[str]:
    def side(s: dict) -> str:
        rank = f" rank {s['rank']}" if s.get("rank") is not None else ""
        return f"{s.get('path')}{rank} ({s.get('format')}, {s.get('device') or 'no GPU'})"

    return [f"base: {side(d['base'])}", f"new:  {side(d['new'])}"]


def to_json(d: dict) -> str:
    return dumps(d)


def to_markdown(d: dict, top: int = 15) -> str:
    from tracekit.reports.text import markdown as esc, markdown_table

    lines = ["# tracekit diff", ""] + [f"- {esc(t)}" for t in _title(d)]
    lines += [f"- warning: {esc(w)}" for w in d.get("warnings", [])]
    for title, head, rows in sections(d, top):
        lines += ["", f"## {esc(title)}", ""]
        if not rows:
            lines.append("(none)")
            continue
        lines += markdown_table(head, rows)
    return "\n".join(lines) + "\n"


def render_console(d: dict, console, top: int = 15) -> None:
    from rich.text import Text

    from tracekit.reports.section import Section
    from tracekit.reports.terminal import print_section
    from tracekit.reports.text import terminal

    for t in _title(d):
        console.print(terminal(t))
    for w in d.get("warnings", []):
        console.print(Text.assemble(("warning: ", "yellow"), terminal(w)))
    for title, head, rows in sections(d, top):
        if not rows:
            continue
        text = tuple(i for i, h in enumerate(head) if i < 2 or h in ("", "op", "kernel"))
        # names and the side note are kept; the time columns before the detail ones
        priority = [0 if i in text else (1 if i < len(head) // 2 + 1 else 2) for i in range(len(head))]
        print_section(Section(title, head, rows, priority, flex=1 if len(head) > 1 else 0, left=text), console)


FILES = ("diff.json", "diff.md")


def write(d: dict, out_dir: str, top: int = 15) -> list[str]:
    """diff.json (every matched item) and diff.md (the tables) into out_dir."""
    import os

    from tracekit.reports.atomic import write_file

    return [write_file(os.path.join(out_dir, "diff.json"), to_json(d) + "\n"),
            write_file(os.path.join(out_dir, "diff.md"), to_markdown(d, top))]
