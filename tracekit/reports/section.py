"""A report section as rows of display strings: what every renderer lays out (terminal,
Markdown, HTML). Cells hold raw text (trace names included): each renderer passes every cell
through its medium's function in reports/text.py. Each column has a priority, so a narrow
terminal drops the least useful columns first; priority 0 declares the columns that carry
the table's answer (why, Δ, ratio, recoverable, coverage, the names): never dropped."""

from __future__ import annotations

from dataclasses import dataclass, field


class Named(str):
    """A kernel's short label that carries its full (demangled) name: the HTML title."""

    full: str

    def __new__(cls, label: str, full: str) -> "Named":
        obj = super().__new__(cls, label)
        obj.full = full
        return obj


@dataclass
class Section:
    title: str
    head: list[str]
    rows: list[list[str]]
    priority: list[int]  # per column: a higher number is dropped sooner in a narrow terminal; 0: an answer column, always kept
    flex: int = 0  # the column that is truncated (with …) to fit, after dropping columns
    flex_min: int = 0  # the flex column's narrowest width before other columns are dropped (0: MIN_FLEX)
    note: str = ""  # a line under the table (plain text, may hold trace strings)
    left: tuple[int, ...] = (0,)  # text columns (left-aligned); the rest are numbers
    wrap: tuple[int, ...] = ()  # prose columns (a reason, a why): they wrap in a narrow terminal instead of eliding
    whole: tuple[int, ...] = ()  # short text columns (a label, a phrase) shown whole like numbers: a narrow terminal drops them, never cuts them
    terminal: bool = True  # shown in the terminal too (else only in report.md / report.html)
    empty: str = "(none)"
    extra: dict = field(default_factory=dict)

    @property
    def answer(self) -> list[str]:
        """The columns that carry the table's answer (priority 0): every width keeps them."""
        return [h for h, p in zip(self.head, self.priority) if p == 0]


def section_markdown(s: Section) -> list[str]:
    """A section as Markdown lines: its heading, its table (or its empty text), its note."""
    from tracekit.reports.text import markdown as md, markdown_table

    lines = ["", f"## {md(s.title)}", ""]
    if not s.rows:
        return lines + [md(s.empty)]
    lines += markdown_table(s.head, s.rows, (*s.left, s.flex))
    return lines + (["", md(s.note)] if s.note else [])
