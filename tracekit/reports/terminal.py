"""The terminal: a console as wide as the terminal (or `COLUMNS`), plain when piped, and
tables that fit it: each Section's answer columns (priority 0) always stay, the least useful
other columns go first, numbers are never cut, and long text (names, shapes, reasons) is
elided in the middle, or wraps where eliding would print two different rows the same.

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
    if columns.isdigit() and int(columns) > 0:
        width = int(columns)
    elif not stream.isatty():
        width = PIPED_WIDTH
    return _Console(file=stream, width=width, markup=False, emoji=False, highlight=False, soft_wrap=False)


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


# a Python frame as Kineto names it: `path/to/file.py(218): forward` (group 1: file onwards)
_FRAME = re.compile(r"(?:^|/)([^/\s]+\.py\(\d+\): \S.*)$")


def elide_middle(text: Text, width: int) -> Text:
    """`text` cut to `width` cells by taking out its middle: both ends of a name or a shape
    list carry what tells it apart (`[[8192, 2432], …, [2432]]`)."""
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
    head = (width - 1 + 1) // 2
    tail = width - 1 - head
    # characters, not cells: a wide character can leave the cut a cell wider; rich then
    # crops that column's cell (the wrap check below still sees the full texts)
    return Text.assemble(text[:head], "…", text[len(plain) - tail:] if tail else "")


def _min_width(head: str, natural: int) -> int:
    word = max((cell_len(w) for w in head.split()), default=0)
    return min(natural, max(MIN_FLEX, word))


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
    text_cols = [i for i in range(len(head)) if i in section.left or i == flex]
    keep = list(range(len(head)))

    def readable(i: int, keep: list[int]) -> int:
        """A text column's width before anything is dropped for it: its part of half the
        width, shared among the text columns (a short one takes only what it needs). The
        flex column (the long names) gives way first: it is served last."""
        cols = sorted((j for j in keep if j in text_cols), key=lambda j: (j == flex, natural[j]))
        budget = int(width * FLEX_SHARE)
        others = [j for j in cols if j != flex]
        for n, j in enumerate(cols):
            share = budget // (len(cols) - n)
            if j != flex and flex in cols:  # the other text columns share all but the flex column's minimum
                share = (budget - MIN_FLEX) // (len(others) - others.index(j))
            given = min(natural[j], max(_min_width(head[j], natural[j]), share))
            if j == i:
                return given
            budget -= given
        return natural[i]

    def needed(keep: list[int], squeeze: bool) -> int:
        return _table_width([(_min_width(head[i], natural[i]) if squeeze else readable(i, keep)) if i in text_cols else natural[i]
                             for i in keep])

    while needed(keep, False) > width:
        droppable = [i for i in keep if section.priority[i] > 0]
        if not droppable:
            break
        keep.remove(max(droppable, key=lambda i: (section.priority[i], i)))
    squeeze = needed(keep, False) > width
    widths = {i: (_min_width(head[i], natural[i]) if squeeze else readable(i, keep)) if i in text_cols else natural[i] for i in keep}
    spare = width - _table_width(list(widths.values()))
    for i in ([flex] if flex in widths else []) + [i for i in keep if i in text_cols and i != flex]:  # room left: names first
        if spare <= 0:
            break
        grow = min(spare, natural[i] - widths[i])
        widths[i] += grow
        spare -= grow
    shown = [[elide_middle(row[i], widths[i]) if i in text_cols and i in widths else row[i] for i in range(len(head))] for row in cells]
    wrap = _wrap_where_equal(cells, shown, keep, text_cols) | {i for i in section.wrap if i in widths}
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


def fit(section: Section, width: int, plain: bool) -> Table:
    """A rich Table of the section no wider than `width` (see `plan`)."""
    layout = plan(section, width)
    head = section.head
    table = Table(title=terminal(section.title), header_style="" if plain else "bold", box=box.ASCII if plain else box.HEAVY_HEAD,
                  title_justify="left")
    # Each column's width is given: rich would measure every cell to find the same widths
    # (what it renders is the same; measuring is most of its time).
    for i in layout.keep:
        wraps = i in layout.wrap
        table.add_column(terminal(head[i]), justify="left" if i in section.left or i == section.flex else "right",
                         no_wrap=not wraps, overflow="fold" if wraps else "ellipsis", min_width=layout.widths[i],
                         max_width=layout.widths[i], width=layout.widths[i])
    for row in layout.cells:
        table.add_row(*[row[i] for i in layout.keep])
    return table


def print_section(section: Section, con: Console) -> None:
    plain = not con.is_terminal
    if not section.rows:
        con.print(terminal(f"{section.title}: {section.empty}"))
        return
    con.print(fit(section, con.width, plain))
    if section.note:
        con.print(terminal(section.note))
