"""Making trace strings safe for the terminal and Markdown in the diff and check reports.

TODO(lead): tracekit/reports/text.py (being built by another helper) is to be the one place
that escapes trace strings per medium. When it lands, replace these two functions with its
terminal and Markdown functions and delete this module."""

from __future__ import annotations

import re

# C0 controls (tab and newline included: a cell is one line), DEL, C1 controls, and the
# bidi overrides that can make a name read differently from what it is.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# Enough for a table cell: emphasis, code, links and images (need "["), HTML and
# entities, strikethrough, and the cell separator.
_MARKDOWN = re.compile(r"([\\`*_\[\]<>|~&])")


def terminal(text: object) -> str:
    """Plain text for a rich table cell: no control sequences, no rich markup."""
    from rich.markup import escape

    return escape(_CONTROL.sub(" ", str(text)))


def markdown(text: object) -> str:
    """Text for one Markdown table cell: no markup, links, HTML or cell breaks."""
    return _MARKDOWN.sub(r"\\\1", _CONTROL.sub(" ", str(text)))
