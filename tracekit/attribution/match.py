"""Which kernels a rule matches: regexes tested once per distinct name, and each tree
(ranges, Python frames, ops) walked once, from the nodes kernels point at up to the root,
so a kernel knows whether anything enclosing it matched without walking its stack per rule."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tracekit.common.text_match import shared_search
from tracekit.trace.column_text import category_text
from tracekit.trace.intervals import NO_ROW, levels_down

Pattern = Any  # a compiled RE2 regex (attribution/rules.py): .search(str), .pattern


def with_ancestors(own: np.ndarray, parent: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """own[row] or own[any ancestor of row], level by level from the roots down."""
    out = own.copy()
    for rows, p in levels_down(parent, depth):
        has = p >= 0
        out[rows[has]] |= out[p[has]]
    return out


class NameSearch:
    """Regex results over a table's distinct names (its categories), each name searched at
    most once per pattern, and only the names asked for."""

    def __init__(self, names: pd.Series):
        cat = names if isinstance(names.dtype, pd.CategoricalDtype) else names.astype("category")
        self.codes = cat.cat.codes.to_numpy().astype(np.int64)
        self.text = category_text(cat.cat.categories)
        self._search = shared_search(self.text)
        self._done: dict[str, np.ndarray] = {}  # pattern -> per code: 1 match, 0 no match, -1 not searched

    def hits(self, pattern: Pattern, codes: np.ndarray | None = None) -> np.ndarray:
        """Per code (and one more, False, for a missing name at index -1): does it match?"""
        state = self._done.setdefault(pattern.pattern, np.full(len(self.text) + 1, -1, dtype=np.int8))
        state[-1] = 0
        todo = np.flatnonzero(state < 0) if codes is None else codes[state[codes] < 0]
        state[todo] = self._search.searches(pattern, todo)[todo]  # one RE2 pass over the names (common/text_match)
        return state > 0


class Enclosing:
    """Which names enclose each kernel in one tree (ranges, Python frames, ops): the nodes the
    kernels point at, each paired with the name codes of itself and its ancestors. Built once
    per tree; a pattern then costs one regex search per distinct name that encloses some
    kernel, and one lookup per pair, instead of a pass over the whole tree."""

    def __init__(self, table: pd.DataFrame, search: NameSearch, pointers: list[np.ndarray], counted: np.ndarray | None):
        """`pointers`: per kernel, a row of `table` (NO_ROW for none); `counted`: the rows
        whose names count (None: all); uncounted rows still pass on their ancestors' names."""
        self.search = search
        pointed = np.unique(np.concatenate([p[p != NO_ROW] for p in pointers])) if pointers else np.zeros(0, dtype=np.int64)
        self.node_of = [np.where(p != NO_ROW, np.searchsorted(pointed, p), -1) for p in pointers]
        parent = table["parent"].to_numpy()
        levels = int(table["depth"].max()) + 1 if len(table) else 0
        node, row = np.arange(len(pointed)), pointed.astype(np.int64)
        nodes, rows = [], []
        for _ in range(levels):  # a node and its ancestors, one level up per pass
            nodes.append(node)
            rows.append(row)
            up = parent[row]
            node, row = node[up >= 0], up[up >= 0]
            if not len(row):
                break
        node = np.concatenate(nodes) if nodes else np.zeros(0, dtype=np.int64)
        row = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
        if counted is not None:
            node, row = node[counted[row]], row[counted[row]]
        self.pair_node, self.pair_code = node, search.codes[row]
        # the distinct names that enclose some kernel (code -1, a missing name, included)
        self.names = np.flatnonzero(np.bincount(self.pair_code + 1, minlength=len(search.text) + 1)) - 1
        self.n_nodes = len(pointed)

    def hits(self, pattern: Pattern) -> list[np.ndarray]:
        """Per pointer given: per kernel, does its node or an ancestor (counted) match?"""
        matched = self.search.hits(pattern, self.names)[self.pair_code]
        node_hit = np.zeros(self.n_nodes + 1, dtype=bool)  # the extra last entry: no node
        node_hit[self.pair_node[matched]] = True
        return [node_hit[n] for n in self.node_of]
