"""C++ names read as text, brackets counted: the `<...>` that closes a template argument list,
its top-level arguments, the `::` scopes of a qualified name and its last one. Shared by the
readable names (tracekit.trace.readable_names) and the kernel labels (kernel_names).

These run on every distinct kernel name of a trace (100k of them in a sweep's trace), so
each one jumps from bracket to bracket with a compiled pattern instead of looping over
characters in Python: the same result at a fraction of the cost (issue 39)."""

from __future__ import annotations

import re

_OPENING, _CLOSING = "<([{", ">)]}"
_ARG_TOKENS = re.compile(r"[<(\[{>)\]},]")  # what split_template_args counts, and the comma it splits at
_BRACKETS = re.compile(r"[<>()\[\]{}]")
_SCOPE_TOKENS = re.compile(r"::|[<(\[{>)\]}]")


def split_template_args(inside: str) -> list[str]:
    """Top-level comma split of a template argument list."""
    if _BRACKETS.search(inside) is None:  # (most lists: `float, 4`): every comma is at the top level
        *args, tail = inside.split(",")
        return [a.strip() for a in args] + ([tail.strip()] if tail.strip() else [])
    args, depth, start = [], 0, 0
    for m in _ARG_TOKENS.finditer(inside):
        ch = m.group()
        if ch in _OPENING:
            depth += 1
        elif ch in _CLOSING:
            depth -= 1
        elif depth == 0:  # a comma at the top level
            args.append(inside[start : m.start()].strip())
            start = m.end()
    tail = inside[start:].strip()
    if tail:
        args.append(tail)
    return args


def closing_bracket(text: str, start: int) -> int:
    """Index of the `>` closing the `<` at `start`; a `>` inside parentheses is an operator
    (`enable_if<((8)>(0))>`), not a bracket. -1 when unbalanced."""
    first = text.find(">", start + 1) if text.startswith("<", start) else -1
    if first > 0 and _BRACKETS.search(text, start + 1, first) is None:  # (most lists: `<float, 4>`): no bracket inside
        return first
    depth, paren = 0, 0
    for m in _BRACKETS.finditer(text, start):
        ch = m.group()
        if ch in "([{":
            paren += 1
        elif ch in ")]}":
            paren -= 1
        elif paren == 0 and ch == "<":
            depth += 1
        elif paren == 0 and ch == ">":
            depth -= 1
            if depth == 0:
                return m.start()
    return -1


def base_and_args(text: str) -> tuple[str, list[str]]:
    start = text.find("<")
    if start <= 0:
        return text, []
    close = closing_bracket(text, start)
    if close < 0:
        return text[:start], []
    return text[:start], split_template_args(text[start + 1 : close])


def last_name(qualified: str) -> str:
    if "::" not in qualified:  # one scope (most names): itself, as the general case below reads it
        if not qualified or qualified.startswith(("λ", "(")):
            return qualified
        return qualified.split("(")[0]
    parts = [p for p in split_scope(qualified) if p and not p.startswith("λ")]
    if not parts:
        return qualified
    last = parts[-1]
    return last.split("(")[0] if not last.startswith("(") else last


def split_scope(text: str) -> list[str]:
    """The `::` scopes of a name, split at the top level only (not inside `<...>`, `(...)`)."""
    if "::" not in text:
        return [text]
    parts, depth, start = [], 0, 0
    for m in _SCOPE_TOKENS.finditer(text):
        token = m.group()
        if token == "::":
            if depth == 0:
                parts.append(text[start : m.start()])
                start = m.end()
        elif token in _OPENING:
            depth += 1
        else:
            depth -= 1
    parts.append(text[start:])
    return parts


def drop_scope_params(text: str) -> str:
    """`update_halo_kernel(int, const std::array<int, 4> &)::λ7` -> `update_halo_kernel::λ7`:
    the parameters of a function that only scopes a lambda say nothing of the kernel."""
    if "(" not in text:  # (most template arguments): nothing to drop
        return text
    out, i = [], 0
    while i < len(text):
        if text[i] == "(":
            depth, j = 0, i
            while j < len(text):
                depth += text[j] == "("
                depth -= text[j] == ")"
                if depth == 0:
                    break
                j += 1
            if j < len(text) and text.startswith("::", j + 1):
                i = j + 1
                continue
        out.append(text[i])
        i += 1
    return "".join(out)


def outside_templates(text: str) -> str:
    """The text outside any template argument list."""
    if "<" not in text:
        return text
    out, depth = [], 0
    for ch in text:
        depth += ch == "<"
        if depth == 0:
            out.append(ch)
        depth -= ch == ">" and depth > 0
    return "".join(out)
