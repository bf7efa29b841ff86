"""The one place that makes a string from a trace safe for each medium.

Every name a trace carries (kernel, op, range, step, device, file) is hostile text: it can
hold ANSI / OSC escape sequences (window titles, clear screen, hyperlinks), rich markup
(`[link=...]`, `[/nope]`), Markdown and HTML (`<script>`, `![](http://...)`, `|` that splits
a table row, a newline that ends it). Each renderer passes every trace string through the
function of its medium, and through nothing else:

    terminal(s)  -> rich Text: control characters shown as \\xNN, never parsed as markup
    markdown(s)  -> str: HTML entities, backslash escapes, no line breaks, no autolinks
    html(s)      -> Markup: HTML-escaped, control characters shown (Jinja keeps it as is)
    csv_cell(s)  -> str: controls shown, a formula's first character neutralised (OWASP)
    xml_text(s)  -> str: controls shown, nothing XML 1.0 forbids (JUnit)
    plot_text(s) -> str: controls shown, no math text (matplotlib labels)
    mcp_text(s)  -> str: controls, invisibles and lone surrogates shown, length bounded
                         (a data field of an MCP tool's result, read by a model)

`visible(s)` is the shared first step: control characters become printable escapes.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tracekit.common.format import MAX_NAME_CHARS

if TYPE_CHECKING:  # imported where used: Markdown, JSON and CSV need neither rich nor markupsafe
    from markupsafe import Markup
    from rich.text import Text

# C0 (tabs and newlines too: they break table rows), DEL, C1 (0x80-0x9f: 8-bit CSI / OSC),
# Unicode's bidirectional overrides (they reorder what the reader sees), and the invisible
# and format characters that hide text or split a name a reader compares: zero-width space,
# joiners and word joiner (U+200B-U+200D, U+2060), the BOM (U+FEFF), line and paragraph
# separators (U+2028/2029: a line break to some viewers), tag characters (U+E0000-U+E007F).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060\u2066-\u2069\ufeff"
                      "\U000e0000-\U000e007f]")
# A name longer than this is cut before any further work: no report shows more of it.
MAX_CHARS = MAX_NAME_CHARS


def _escape_control(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(value: object) -> str:
    """str(value) with every control character replaced by its printable escape."""
    text = "" if value is None else str(value)
    if len(text) > MAX_CHARS:
        text = text[: MAX_CHARS - 1] + "…"
    return _CONTROL.sub(_escape_control, text)


def terminal(value: object, style: str | None = None) -> Text:
    """For the terminal: a rich Text, which rich prints as is (no markup, no emoji codes)."""
    from rich.text import Text

    return Text(visible(value), style=style or "")


def plain_terminal(value: object) -> str:
    """For a line written without rich (stderr warnings, the error line): controls escaped."""
    return visible(value)


# The ASCII punctuation Markdown (CommonMark + GitHub) gives a meaning inside a line:
# escapes, code, emphasis, links and images (`[`: without it `(` and `!` mean nothing),
# table cells, strikethrough, math, mentions. Line-start syntax (#, -, +, >) cannot occur:
# a trace string never starts a line of a report.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~$@])")
_MD_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}


def markdown(value: object) -> str:
    """For Markdown (a table cell or running text): no HTML, no links or images, no
    table breaks, no line breaks; the text reads the same once rendered."""
    text = visible(value)
    text = re.sub(r"[&<>\"]", lambda m: _MD_HTML[m.group()], text)
    text = _MD_SPECIAL.sub(r"\\\1", text)
    # autolinks: `https://x.org`, and `www.x.org` even without a scheme
    text = text.replace("://", "\\://")
    return re.sub(r"(?i)(www)\.", r"\1\\.", text)


def markdown_table(head: list[str], rows: list[list[object]], left: tuple[int, ...] | None = None) -> list[str]:
    """A GitHub Markdown table, every cell (head included) through `markdown`. `left`: the
    text columns; the rest are numbers, right-aligned. None: no alignment marks."""
    rule = "|" + "".join("---|" if left is None or i in left else "--:|" for i in range(len(head)))
    return ["| " + " | ".join(markdown(h) for h in head) + " |", rule] + ["| " + " | ".join(markdown(c) for c in row) + " |" for row in rows]


# A spreadsheet reads a cell that starts with one of these as a formula (OWASP's CSV
# injection rule: = + - @, and TAB / CR, which visible() has escaped already)
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> str:
    """For a CSV text cell: controls escaped, and a cell a spreadsheet would run as a formula
    prefixed with `'` (OWASP), so it reads as the text it is. Numbers are not text cells."""
    text = visible(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


# What XML 1.0 forbids beyond the controls visible() escapes: lone surrogates, U+FFFE, U+FFFF
_NOT_XML = re.compile("[\ud800-\udfff\ufffe\uffff]")


def xml_text(value: object) -> str:
    """For XML text and attributes (JUnit): controls and invisibles escaped, and nothing XML
    forbids; ElementTree escapes & < > and quotes itself."""
    return _no_surrogates(value)


def _no_surrogates(value: object) -> str:
    return _NOT_XML.sub(lambda m: f"\\u{ord(m.group()):04x}", visible(value))


def plot_text(value: object) -> str:
    """For a label matplotlib draws: controls and invisibles escaped (a glyph the font lacks
    is no warning quoting raw bytes), `$` escaped so no math text starts."""
    return visible(value).replace("$", r"\$")


def mcp_text(value: object) -> str:
    """For a string field of an MCP tool's result: the JSON carries it intact, but a model
    (and the terminal of whoever reads its transcript) sees every character, so controls and
    invisibles are escaped, a lone surrogate (which no UTF-8 encoder writes) is shown as its
    code, and the length is bounded like every other medium's."""
    return _no_surrogates(value)


def html(value: object) -> Markup:
    """For HTML text and attribute values (Jinja autoescaping leaves a Markup alone)."""
    from markupsafe import escape

    return escape(visible(value))
