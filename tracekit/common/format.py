"""The one place that prints numbers and unknowns, and cuts a value to a width. Unknown (None
or NaN) prints as "—" everywhere: in the terminal, Markdown, HTML, the headline and the
cross-rank report. A range is written with an en dash (`span`: 18.863–18.868 ms); an ellipsis
only ever marks a cut, and `cut` never cuts inside a figure, a number or a word."""

from __future__ import annotations

import re
from typing import Any

UNKNOWN = "—"
# The longest name any report shows, so the longest any parser keeps (issue 49: a 50 MB name
# is cut as it is read) and any classifier reads
MAX_NAME_CHARS = 4096
# A figure built from kernels whose costs cover less than this share of its time is unknown,
# not a measurement (costs/unknown.py applies it to tables; compare/ and the integrations to
# stored summaries, without importing the analysis).
MIN_COVERAGE = 0.5
FLAG = " (!)"  # beside a figure past its physical limit: the flags say why (analysis.plausibility)


def is_unknown(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value) or (not isinstance(value, str) and value != value)


def text(value: Any) -> str:
    return UNKNOWN if is_unknown(value) else str(value)


def number(value: Any, fmt: str = "{:,.2f}") -> str:
    return UNKNOWN if is_unknown(value) else fmt.format(value)


def duration(ns: float | int | None) -> str:
    if is_unknown(ns):
        return UNKNOWN
    ns = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:,.3f} {unit}"
    return f"{ns:,.0f} ns"


def signed_duration(ns: float | int | None) -> str:
    return UNKNOWN if is_unknown(ns) else ("+" if ns > 0 else "") + duration(ns)


def percent(share: float | None) -> str:
    return UNKNOWN if is_unknown(share) else f"{100.0 * share:.1f}%"


def signed_percent(share: float | None) -> str:
    return UNKNOWN if is_unknown(share) else f"{share:+.1%}"


def rounded_percent(share: float | None) -> str:
    """Whole percents, one decimal below 9.5% and between 99.5% and 100% (never "100%" for
    less): for sentences such as the headline."""
    if is_unknown(share):
        return UNKNOWN
    return f"{100 * share:.0f}%" if 0.095 <= abs(share) < 0.995 or share == 1 else f"{100 * share:.1f}%"


def ratio(value: float | None) -> str:
    return UNKNOWN if is_unknown(value) else f"{value:.2f}x"


def si(value: float | None, unit: str = "") -> str:
    """1.23e9 -> '1.23 G'; None / NaN -> '—' (unknown, not zero)."""
    if is_unknown(value):
        return UNKNOWN
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:,.2f} {prefix}{unit}"
    return f"{value:,.0f} {unit}".rstrip()


def middle(name: str, width: int = 60) -> str:
    """`name` in at most `width` characters, cut in the middle at separators (see `cut`): the
    head names the op or kernel, the tail holds what tells two of them apart (the last shapes,
    template arguments)."""
    return cut(str(name), width)


def percent_against(share: float | None, limit: float) -> str:
    """`share` as a percent with as many decimals as it takes to differ from `limit` printed
    the same way: never "50.0% ... below the 50.0% needed" (49.96% is printed 49.96%)."""
    if is_unknown(share):
        return UNKNOWN
    for digits in (1, 2, 3, 4):
        if f"{100 * share:.{digits}f}" != f"{100 * limit:.{digits}f}" or share == limit:
            return f"{100 * share:.{digits}f}%"
    return f"{100 * share:.4f}%"


def span(low: float | None, high: float | None, unit_format=duration) -> str:
    """A range as "18.863–18.868 ms" (an en dash, the unit once where both ends share it): the
    ellipsis means a cut, never a range. One end unknown: the whole range is unknown."""
    if is_unknown(low) or is_unknown(high):
        return UNKNOWN
    lo, hi = unit_format(low), unit_format(high)
    lo_value, _, lo_unit = lo.rpartition(" ")
    hi_value, _, hi_unit = hi.rpartition(" ")
    if lo_value and hi_value and lo_unit == hi_unit and not lo_unit[:1].isdigit():
        return f"{lo_value}–{hi_value} {hi_unit}"
    return f"{lo}–{hi}"


def rate(value: float | None, unit: str) -> str:
    """A rate short enough for a table cell: 10,510.47 tokens/s -> "10.51 k tokens/s" (the
    unit abbreviated, the number whole: a cell never cuts a number)."""
    if is_unknown(value):
        return UNKNOWN
    if abs(value) < 1e3:
        return f"{value:,.2f} {unit}"
    return si(value, " " + unit).replace("  ", " ")


# What a cell formatter may cut at: shapes at an element boundary, names at a separator.
_ATOM_END = "[],"
_NUMBER_CELL = re.compile(r"^[-+−]?[\d,.]+(?:e[-+]?\d+)?\s*[%x]?(?:\s*\S{0,12})?(?:\s*(?:/|–)\s*[-+−]?[\d,.]+\s*\S{0,12})?(?: \(!\))?$|^—$")
_SEPARATOR = re.compile(r"[_:<>,/\s()\[\]{}.-]")


def looks_like_number(cell: str) -> bool:
    """A cell that holds a figure (12.048 ms, 24.4%, 37.9% / 44.8%, 8,944 tokens, —): such a
    cell is shown whole or not at all."""
    return bool(_NUMBER_CELL.match(cell.strip()))


def _parse_list(text: str):
    """`[[16, 559], [], 3]` as nested Python lists of atom strings; None if `text` is not one
    balanced bracketed list (then it is cut as a name)."""
    stack: list[list] = []
    root = None
    atom = ""
    for ch in text:
        if ch == "[":
            if atom.strip():
                return None
            node: list = []
            if stack:
                stack[-1].append(node)
            elif root is not None:
                return None
            else:
                root = node
            stack.append(node)
            atom = ""
        elif ch in "],":
            if not stack:
                return None
            if atom.strip():
                stack[-1].append(atom.strip())
            atom = ""
            if ch == "]":
                stack.pop()
        else:
            if not stack:
                return None
            atom += ch
    return root if root is not None and not stack else None


def _show_list(node) -> str:
    return "[" + ", ".join(_show_list(c) if isinstance(c, list) else c for c in node) + "]" if isinstance(node, list) else node


def _cut_list(node: list, width: int) -> str:
    """The list in at most `width` characters where it can be: whole elements first, then
    "+N more" for the N elements left out; an element that does not fit whole is cut the
    same way inside (`[[16, 559, +2 more], +2 more]`). Never cuts inside a number."""
    full = _show_list(node)
    if len(full) <= width:
        return full
    for keep in range(len(node) - 1, 0, -1):
        shown = "[" + ", ".join(_show_list(c) for c in node[:keep]) + f", +{len(node) - keep} more]"
        if len(shown) <= width:
            return shown
    first = node[0] if node else None
    rest = f", +{len(node) - 1} more]" if len(node) > 1 else "]"
    if isinstance(first, list) and first:
        inner = _cut_list(first, width - 1 - len(rest))
        return "[" + inner + rest
    # the first value stays even past the width (the column then wraps): a count alone says nothing
    return f"[{first}{rest}" if first is not None else "[]"


def cut(text: str, width: int, tail_first: bool = False) -> str:
    """`text` in at most `width` characters without cutting inside a value: a figure is never
    cut (returned whole: the caller gives it room); a shape list is cut at an element boundary
    with "+N more"; a name loses its middle at separators (`_`, `<`, `,`, `::`, spaces), so its
    head (what it is) and its tail (what tells two apart) stay and no word or number is split.
    The result can be longer than `width` only where no such boundary fits. `tail_first`: of
    the cuts that keep as much, the one with the longer tail (where heads alone collide)."""
    text = str(text)
    if len(text) <= width or looks_like_number(text):
        return text
    parsed = _parse_list(text) if text.lstrip().startswith("[") else None
    if parsed is not None:
        return _cut_list(parsed, width)
    return _cut_name(text, width, tail_first)


def _words(part: str) -> bool:
    """A part that names something (a bracket or a comma alone tells nothing apart)."""
    return sum(ch.isalnum() for ch in part) >= 3


def _best_cut(text: str, heads: list[int], tails: list[int], room: int, tail_first: bool) -> tuple[int, int] | None:
    """The head end and tail start that keep the most of `text` in `room` characters, both
    ends preferred (the head says what it is, the tail tells two apart); None: none fits."""
    best = None
    for h in [0] + heads:
        if h > room:
            break
        fitting = [t for t in tails if t >= h and len(text) - t <= room - h]
        tail = min(fitting) if fitting else len(text)
        score = h + (len(text) - tail) + (room // 3 if _words(text[:h]) and _words(text[tail:]) else 0)
        better = score > best[0] if best and tail_first else score >= (best[0] if best else -1)  # a tie: the longer head
        if better and (h or tail < len(text)):
            best = (score, h, tail)
    return None if best is None else best[1:]


# a word boundary inside an identifier: a lower-case letter, then a capital (`Paged|Kv`)
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")


def _cut_name(text: str, width: int, tail_first: bool = False) -> str:
    if width <= 1:
        return "…"
    room = width - 1
    # cut points: just after a separator (head) / just before one (tail); failing those (one
    # long identifier), between the words of a CamelCase name; last, between characters
    # a comma or point beside a digit may sit inside a number (10,510.86): never cut there
    separators = [m for m in _SEPARATOR.finditer(text)
                  if not (m.group() in ",." and ((m.start() > 0 and text[m.start() - 1].isdigit())
                                                 or text[m.end():m.end() + 1].isdigit()))]
    camel = [m.start() for m in _CAMEL.finditer(text)]
    for heads, tails in (([m.end() for m in separators], [m.start() for m in separators]),
                         (sorted({m.end() for m in separators} | set(camel)), sorted({m.start() for m in separators} | set(camel)))):
        # the ellipsis never stands beside a digit or just inside a bracket (`step#0 …`,
        # `[[512], [… 512]]` read as a cut figure or shape)
        heads = [h for h in heads if _clean_head(text[:h])]
        tails = [t for t in tails if _clean_tail(text[t:])]
        found = _best_cut(text, heads, tails, room, tail_first)
        if found is not None and found[0] + len(text) - found[1] >= room // 2:  # keeps at least half of the room
            h, t = found
            return text[:h] + "…" + text[t:]
    head = room * 2 // 3
    while 0 < head < len(text) and not _clean_head(text[:head]):
        head -= 1
    tail = len(text) - (room - head)
    while 0 < tail < len(text) and not _clean_tail(text[tail:]):
        tail += 1
    return text[:head] + "…" + text[tail:]


def _clean_head(head: str) -> bool:
    head = head.rstrip()
    return not head.endswith(("[", "(")) and not head[-1:].isdigit()


def _clean_tail(tail: str) -> bool:
    return not tail.lstrip()[:1].isdigit()
