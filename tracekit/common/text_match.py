"""One regex over many distinct texts (kernel, op and range names) in one vectorised pass.

A name search in Python costs ~10-60 µs per name and pattern (stdlib `re` tries every
alternative at every position; the re2 binding pays ~10 µs of call overhead): a trace with
100k distinct kernel names spent 40 s classifying them (issue 39 item 5). Arrow's
`match_substring_regex` runs RE2 over the whole array in C++ (~1 µs a name).

The answer is exactly `bool(pattern.search(text))` for every text:
- an RE2 pattern (the re2 binding, attribution/rules.py) is the same engine with the same
  default options;
- a stdlib `re` pattern means the same in RE2 on ASCII text without a newline, when RE2
  accepts it and its only flag is IGNORECASE (ASCII-only classes, `$` before a final
  newline and lookarounds are where the engines differ: such texts and patterns are
  searched one by one with the pattern itself).
"""

from __future__ import annotations

import re
import sys
from functools import lru_cache
from typing import Any, Sequence

import numpy as np

# Flags a compiled stdlib pattern always carries on str patterns (UNICODE), and the one RE2 takes as an option.
_SAME_IN_RE2 = re.UNICODE | re.IGNORECASE


def searches(texts: Sequence[str], pattern: Any, todo: np.ndarray | None = None) -> np.ndarray:
    """Per text: does `pattern` (a compiled stdlib or RE2 regex) match anywhere in it?
    `todo`: the indices to search (default: all); the others are False."""
    return shared_search(texts).searches(pattern, todo)


def first_matches(texts: Sequence[str], patterns: Sequence[Any]) -> np.ndarray:
    """Per text: the index of the first pattern that matches it (-1: none). Each pattern
    is searched only over the texts no earlier pattern matched."""
    search = shared_search(texts)
    first = np.full(len(texts), -1, dtype=np.int64)
    for index, pattern in enumerate(patterns):
        todo = np.flatnonzero(first < 0)
        if not len(todo):
            break
        first[todo[search.searches(pattern, todo)[todo]]] = index
    return first


# pyarrow imports pandas the first time it converts Python objects (its pandas shim checks
# for pandas types): ~0.3-0.5 s, more than `tracekit info` spends on a whole 10 MB trace.
# In a process without pandas (info on a Kineto trace), texts are searched and labelled one
# by one (~40 µs a text) below this many; analyze has pandas already.
ARROW_WITHOUT_PANDAS = 8000
MIN_ARROW_TEXTS = 64  # fewer: not worth the conversion


def arrow_pays(count: int) -> bool:
    """Whether `count` texts are worth one Arrow array rather than a Python call each."""
    return count >= MIN_ARROW_TEXTS and (count >= ARROW_WITHOUT_PANDAS or "pandas" in sys.modules)


def arrow_text(texts: Sequence[str]):
    """The texts as one Arrow large_string array (UnicodeEncodeError on a lone surrogate)."""
    import pyarrow as pa

    return pa.array(texts, type=pa.large_string())


def shared_search(texts: Sequence[str]) -> "TextSearch":
    """The one TextSearch of these texts in this process: a trace's kernel names are searched
    by the classifier, the attribution rules and the detectors, each with patterns of their
    own, and their Arrow array and ASCII mask are made once (29 times over 100k names was
    ~0.25 s). Keyed by the texts themselves, so equal lists share it wherever they come from."""
    return _shared(tuple(texts))


@lru_cache(maxsize=16)  # (a few lists per trace: kernel, op, range and frame names)
def _shared(texts: tuple[str, ...]) -> "TextSearch":
    return TextSearch(texts)


class TextSearch:
    """Distinct texts searched with many patterns: which texts RE2 may take, and their Arrow
    array, are worked out once for all the patterns."""

    def __init__(self, texts: Sequence[str]):
        self.texts = texts
        self._plain: np.ndarray | None = None  # per text: ASCII without a newline
        self._arrow = None  # all texts as one Arrow array

    def searches(self, pattern: Any, todo: np.ndarray | None = None) -> np.ndarray:
        """As searches(): per text, does `pattern` match (only the indices in `todo`)?"""
        out = np.zeros(len(self.texts), dtype=bool)
        rows = np.arange(len(self.texts)) if todo is None else np.asarray(todo, dtype=np.int64)
        if not len(rows):
            return out
        stdlib = isinstance(pattern, re.Pattern)
        if arrow_pays(len(self.texts)) and (not stdlib or not (pattern.flags & ~_SAME_IN_RE2)):
            by_re2 = rows[self.plain()[rows]] if stdlib else rows
            found = self._re2_searches(by_re2, pattern.pattern, ignore_case=stdlib and bool(pattern.flags & re.IGNORECASE))
            if found is not None:
                out[by_re2] = found
                rows = rows[~self.plain()[rows]] if stdlib else rows[:0]
        for i in rows.tolist():  # what RE2 could not take: one by one, with the pattern's own engine
            out[i] = pattern.search(self.texts[i]) is not None
        return out

    def plain(self) -> np.ndarray:
        if self._plain is None:
            import pyarrow.compute as pc

            # (in Arrow, over the array the searches take anyway: a Python test per text was ~0.1 s per 100k names)
            try:
                texts = self.arrow()
            except UnicodeEncodeError:  # a lone surrogate: not UTF-8, so no Arrow text (and not ASCII)
                self._plain = np.fromiter((t.isascii() and "\n" not in t for t in self.texts), dtype=bool, count=len(self.texts))
                return self._plain
            plain = pc.and_(pc.string_is_ascii(texts), pc.invert(pc.match_substring(texts, "\n")))
            self._plain = plain.to_numpy(zero_copy_only=False).astype(bool)
        return self._plain

    def arrow(self):
        if self._arrow is None:
            self._arrow = arrow_text(self.texts)
        return self._arrow

    def _re2_searches(self, rows: np.ndarray, pattern: str, ignore_case: bool) -> np.ndarray | None:
        """RE2 over the texts at `rows` at once; None where RE2 does not accept the pattern (a
        lookaround, a backreference): the caller then searches with the pattern's own engine."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if not len(rows):
            return np.zeros(0, dtype=bool)
        texts = self.arrow() if len(rows) == len(self.texts) else self.arrow().take(pa.array(rows))
        try:
            found = pc.match_substring_regex(texts, pattern, ignore_case=ignore_case)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        return found.to_numpy(zero_copy_only=False).astype(bool)
