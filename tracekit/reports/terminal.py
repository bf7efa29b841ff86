"""The terminal: a console as wide as the terminal (or `COLUMNS`), plain when piped, and
tables that fit it by dropping their least useful columns first, then truncating the name
column with an ellipsis, instead of wrapping every row.

Every cell goes through text.terminal: rich never parses a trace string as markup."""

from __future__ import annotations

import os
import sys

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

from tracekit.reports.section import Section
from tracekit.reports.text import terminal

PIPED_WIDTH = 120  # a pipe has no width: wide enough for the tables, narrow enough to read
MIN_FLEX = 12  # the truncated column keeps at least this many characters
FLEX_SHARE = 0.5  # before any column is dropped, the name column is cut to this share of the width


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


def fit(section: Section, width: int, plain: bool) -> Table:
    """A rich Table of the section no wider than `width`."""
    head = section.head
    cells = [[terminal(c) for c in row] for row in section.rows]
    natural = [max([cell_len(h)] + [c.cell_len for c in (row[i] for row in cells)]) for i, h in enumerate(head)]
    keep = list(range(len(head)))
    widths = dict(enumerate(natural))
    flex = section.flex if 0 <= section.flex < len(head) else None
    if flex is not None:  # the name column gives way first, down to a readable width
        widths[flex] = min(natural[flex], max(MIN_FLEX, int(width * FLEX_SHARE)))
    # then drop columns, least useful first (the highest priority number), never priority 0
    while _table_width([widths[i] for i in keep]) > width:
        droppable = [i for i in keep if section.priority[i] > 0]
        if not droppable:
            break
        keep.remove(max(droppable, key=lambda i: (section.priority[i], i)))
    widths = {i: widths[i] for i in keep}
    excess = _table_width(list(widths.values())) - width
    for i in ([flex] if flex in widths else []) + sorted(keep, key=lambda i: -widths[i]):  # still too wide
        if excess <= 0:
            break
        cut = min(excess, max(0, widths[i] - MIN_FLEX))
        widths[i] -= cut
        excess -= cut
    if excess < 0 and flex in widths:  # room to spare: give the name column back what it needs
        widths[flex] = min(natural[flex], widths[flex] - excess)
    table = Table(title=terminal(section.title), header_style="" if plain else "bold", box=box.ASCII if plain else box.HEAVY_HEAD,
                  title_justify="left")
    # A table that fits gets each column's width given: rich would measure every cell to find
    # the same widths (what it renders is the same; measuring is most of its time).
    fits = excess <= 0 and not any("\n" in c.plain for row in cells for c in row)
    for i in keep:
        table.add_column(head[i], justify="left" if i in section.left or i == section.flex else "right", no_wrap=True,
                         overflow="ellipsis", max_width=widths[i], width=widths[i] if fits else None)
    for row in cells:
        table.add_row(*[row[i] for i in keep])
    return table


def print_section(section: Section, con: Console) -> None:
    plain = not con.is_terminal
    if not section.rows:
        con.print(terminal(f"{section.title}: {section.empty}"))
        return
    con.print(fit(section, con.width, plain))
    if section.note:
        con.print(terminal(section.note))
