"""The terminal: a console as wide as the terminal (or `COLUMNS`), plain when piped, and
tables that fit it: each Section's answer columns (priority 0) always stay, the least useful
other columns go first, numbers are never cut, and long text (names, shapes, reasons) is
cut at a boundary (a shape's element, a name's separator), or wraps where cutting would print
two different rows the same; a table too narrow for its answer columns prints one record per row.

Every cell goes through text.terminal: rich never parses a trace string as markup."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from tracekit.common.format import cut as cut_value, looks_like_number
from tracekit.reports.section import Section
from tracekit.reports.text import terminal

PIPED_WIDTH = 120  # a pipe has no width: wide enough for the tables, narrow enough to read
MIN_FLEX = 12  # the truncated column keeps at least this many characters
FLEX_SHARE = 0.5  # before any column is dropped, the text columns are cut to this share of the width


def console(stderr: bool = False) -> Console:
    """Markup, emoji codes and the highlighter are off: nothing we print is reinterpreted."""
    stream = sys.stderr if stderr else sys.stdout
    width = None
    columns = os.environ.get("COLUMNS", "")
    # ASCII digits only: str.isdigit() also takes "²" and other digits int() refuses
    if columns.isascii() and columns.isdigit() and int(columns) > 0:
        width = int(columns)
    elif not stream.isatty():
        width = PIPED_WIDTH
    # rich reads COLUMNS and LINES itself (with the same isdigit test): it gets them only as ASCII digits
    environ = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES") or (v.isascii() and v.isdigit())}
    return _Console(file=stream, width=width, markup=False, emoji=False, highlight=False, soft_wrap=False, _environ=environ)


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """rich exits with status 1 when the reader goes away (`| head`); tracekit's CLI
        ends quietly with 0 instead (cli.main handles the error)."""
        self.quiet = True
        raise BrokenPipeError


def _table_width(widths: list[int]) -> int:
    # rich's default: one space of padding each side, a border between and around columns
    return sum(widths) + 3 * len(widths) + 1


@dataclass
class Layout:
    """How a section fits a width: the columns kept (in order), each one's width, and the
    text columns that wrap (so that rows that differ never print the same)."""

    keep: list[int]
    widths: dict[int, int]
    wrap: set[int]
    cells: list[list[Text]]  # display cells of every column (text cells elided to their width)
    records: bool = False  # too narrow for the answer columns side by side: each row printed as a record


# a Python frame as Kineto names it: `path/to/file.py(218): forward` (group 1: file onwards)
_FRAME = re.compile(r"(?:^|/)([^/\s]+\.py\(\d+\): \S.*)$")


def elide_middle(text: Text, width: int, tail_first: bool = False) -> Text:
    """`text` cut to `width` cells at a boundary (common.format.cut): a shape list keeps whole
    elements and counts the rest (`[[8192, 2432], +1 more]`), a name loses its middle between
    separators, a Python frame its directories; a figure is never cut."""
    if text.cell_len <= width:
        return text
    if width <= 1:
        return Text("…")
    plain = text.plain
    frame = _FRAME.search(plain)
    if frame and frame.start(1) > 0:
        # a Python frame (`dir/.../file.py(218): forward`): its directories go first, the
        # file, line and function stay (`…/modeling_bert.py(218): forward`)
        start = frame.start(1)
        slash = plain.find("/")
        head = plain.rfind(" ", 0, slash) + 1 if 0 <= slash < start else 0  # `frame ` before the path stays
        if cell_len(plain[:head]) + cell_len(plain[start:]) + 1 <= width:
            for cut in (m.end() for m in re.finditer("/", plain[:start])):  # the most directories that fit
                if cut > head + 1 and cell_len(plain[:head]) + cell_len(plain[cut - 1:]) + 1 <= width:
                    return Text.assemble(text[:head], "…", text[cut - 1:])
    shown = cut_value(plain, width, tail_first)  # at a boundary: a shape's element, a name's separator; never inside a number
    return Text(shown, style=text.style)


def _min_width(head: str, natural: int, whole: int = 0) -> int:
    """A text column's narrowest readable width: its head's longest word, MIN_FLEX, and any
    figure it holds (`whole`: a figure is shown whole, never cut)."""
    word = max((cell_len(w) for w in head.split()), default=0)
    return min(natural, max(MIN_FLEX, word, whole))


def plan(section: Section, width: int) -> Layout:
    """Fit a section to `width`. Answer columns (priority 0) always stay; number columns keep
    their full width; text columns (names, shapes, reasons) share what is left. Columns
    are dropped, least useful first, only while the kept ones cannot fit with each text
    column at a readable width; then text cells are elided in the middle, and a column
    wraps instead where eliding would make two different rows print the same."""
    head = section.head
    cells = [[terminal(c) for c in row] for row in section.rows]
    natural = [max([cell_len(h)] + [row[i].cell_len for row in cells]) for i, h in enumerate(head)]
    flex = section.flex if 0 <= section.flex < len(head) else None
    text_cols = [i for i in range(len(head)) if (i in section.left or i == flex) and i not in section.whole]
    keep = list(range(len(head)))
    # a figure in a text column (a throughput, a count with its unit) is shown whole: its width is the column's least
    whole = [max([row[i].cell_len for row in cells if looks_like_number(row[i].plain)], default=0) for i in range(len(head))]

    def least(i: int) -> int:
        return _min_width(head[i], natural[i], whole[i])

    def floor(i: int) -> int:
        """The width a text column keeps before a column is dropped for it (the flex column: flex_min)."""
        return min(natural[i], max(least(i), section.flex_min)) if i == flex else least(i)

    def readable(i: int, keep: list[int]) -> int:
        """A text column's width before anything is dropped for it: its part of half the
        width, shared among the text columns (a short one takes only what it needs). The
        flex column (the long names) gives way first: it is served last."""
        cols = sorted((j for j in keep if j in text_cols), key=lambda j: (j == flex, natural[j]))
        # the whole text columns (short labels, never cut) take their width out of the same share
        budget = int(width * FLEX_SHARE) - sum(natural[j] for j in keep if j in section.whole)
        others = [j for j in cols if j != flex]
        for n, j in enumerate(cols):
            share = budget // (len(cols) - n)
            if j != flex and flex in cols:  # the other text columns share all but the flex column's minimum
                share = (budget - MIN_FLEX) // (len(others) - others.index(j))
            given = min(natural[j], max(floor(j), share))
            if j == i:
                return given
            budget -= given
        return natural[i]

    def needed(keep: list[int], squeeze: bool) -> int:
        return _table_width([(least(i) if squeeze else readable(i, keep)) if i in text_cols else natural[i]
                             for i in keep])

    while needed(keep, False) > width:
        droppable = [i for i in keep if section.priority[i] > 0]
        if not droppable:
            break
        keep.remove(max(droppable, key=lambda i: (section.priority[i], i)))
    squeeze = needed(keep, False) > width
    if squeeze and needed(keep, True) > width:  # the answer columns cannot fit whole: one record per row instead
        return Layout(keep, {}, set(), [], records=True)
    widths = {i: (least(i) if squeeze else readable(i, keep)) if i in text_cols else natural[i] for i in keep}
    spare = width - _table_width(list(widths.values()))
    for i in ([flex] if flex in widths else []) + [i for i in keep if i in text_cols and i != flex]:  # room left: names first
        if spare <= 0:
            break
        grow = min(spare, natural[i] - widths[i])
        widths[i] += grow
        spare -= grow
    shown = [[elide_middle(row[i], widths[i]) if i in text_cols and i in widths else row[i] for i in range(len(head))] for row in cells]
    for i in _wrap_where_equal(cells, shown, keep, text_cols):  # heads alike: try the cuts that keep more of the tail
        for r, row in enumerate(cells):
            shown[r][i] = elide_middle(row[i], widths[i], tail_first=True)
    wrap = _wrap_where_equal(cells, shown, keep, text_cols) | {i for i in section.wrap if i in widths}
    # no boundary fits the width (a long single word): the column wraps, rich never crops a value
    wrap |= {i for i in keep if i in text_cols and any(row[i].cell_len > widths[i] for row in shown)}
    for i in wrap:
        for r, row in enumerate(cells):
            shown[r][i] = row[i]
    return Layout(keep, widths, wrap, shown)


def _wrap_where_equal(cells: list[list[Text]], shown: list[list[Text]], keep: list[int], text_cols: list[int]) -> set[int]:
    """The text columns that must wrap: where two different values (two shapes, two names)
    print the same once elided."""
    wrap: set[int] = set()
    for i in keep:
        if i not in text_cols:
            continue
        seen: dict[str, str] = {}
        for full, short in zip(cells, shown):
            if seen.setdefault(short[i].plain, full[i].plain) != full[i].plain:
                wrap.add(i)
                break
    return wrap


def _header(head: str, width: int) -> Text:
    """A column head broken between its words to fit the column (rich would crop it)."""
    lines, line = [], ""
    for word in head.split(" "):
        if line and cell_len(line) + 1 + cell_len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return Text("\n").join(terminal(x) for x in lines + [line])


def fit(section: Section, width: int, plain: bool, layout: Layout | None = None, boxed: bool = True) -> Table:
    """A rich Table of the section no wider than `width` (see `plan`; `layout`: its plan, when made already).
    `boxed=False`: no borders, only the header and the rows (the first screen, where lines count)."""
    layout = layout or plan(section, width)
    head = section.head
    frame = (box.ASCII if plain else box.HEAVY_HEAD) if boxed else None
    table = Table(title=terminal(section.title), header_style="" if plain else "bold", box=frame, title_justify="left",
                  show_edge=boxed)
    # Each column's width is given: rich would measure every cell to find the same widths
    # (what it renders is the same; measuring is most of its time).
    for i in layout.keep:
        wraps = i in layout.wrap
        table.add_column(_header(head[i], layout.widths[i]), justify="left" if i in section.left or i == section.flex else "right",
                         no_wrap=not wraps, overflow="fold" if wraps else "ellipsis", min_width=layout.widths[i],
                         max_width=layout.widths[i], width=layout.widths[i])
    for row in layout.cells:
        table.add_row(*[row[i] for i in layout.keep])
    return table


def records(section: Section, width: int) -> list[Text]:
    """The section as one record per row, for a terminal too narrow for its answer columns side
    by side: the row's leading text columns, then "head value" for each other answer column,
    lines broken between fields (a field wider than a line, between its words): a value is
    never cut."""
    keep = [i for i in range(len(section.head)) if section.priority[i] == 0] or list(range(len(section.head)))
    label = [i for i in keep[: next((n for n, i in enumerate(keep) if i not in section.left), len(keep))]] or keep[:1]
    lines: list[Text] = []
    for row in section.rows:
        fields = [terminal(" / ".join(str(row[i]) for i in label)).plain + ":"]
        fields += [terminal(f"{section.head[i]} {row[i]}").plain + ";" for i in keep if i not in label]
        fields[-1] = fields[-1].rstrip(";")
        line = ""
        for field in fields:
            words = [field] if cell_len(field) <= width - 2 else field.split(" ")
            # a word wider than a line (a long path) is the one thing split: nothing else would show it
            words = [w[n: n + width - 2] for w in words for n in range(0, max(len(w), 1), width - 2)]
            for word in words:
                if line.strip() and cell_len(line) + 1 + cell_len(word) > width:
                    lines.append(Text(line))
                    line = "  " + word
                else:
                    line = f"{line} {word}" if line else word
        lines.append(Text(line))
    return lines


def print_section(section: Section, con: Console, boxed: bool = True) -> None:
    plain = not con.is_terminal
    if not section.rows:
        con.print(terminal(f"{section.title}: {section.empty}"))
        return
    layout = plan(section, con.width)  # once: it elides every cell
    if layout.records:
        con.print(terminal(section.title))
        for line in records(section, con.width):
            con.print(line, overflow="fold")  # a single word wider than the terminal folds (rich would crop it)
    else:
        con.print(fit(section, con.width, plain, layout, boxed))
    if section.note:
        con.print(terminal(section.note))
