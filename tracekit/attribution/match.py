"""Which kernels a rule matches: regexes tested once per distinct name, then carried down
each tree (ranges, Python frames, ops) so a kernel knows whether anything enclosing it
matched, without walking every kernel's stack."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tracekit.intervals import NO_ROW

Pattern = Any  # a compiled RE2 regex (attribution/rules.py): .search(str), .pattern


def name_matches(names: pd.Series, pattern: Pattern) -> np.ndarray:
    cat = names.astype("category")
    hits = np.array([bool(pattern.search(str(c))) for c in cat.cat.categories] + [False])
    return hits[cat.cat.codes.to_numpy()]


def with_ancestors(own: np.ndarray, parent: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """own[row] or own[any ancestor of row], level by level from the roots down."""
    out = own.copy()
    if not len(out):
        return out
    order = np.argsort(depth, kind="stable")
    levels = depth[order]
    bounds = np.searchsorted(levels, np.arange(int(levels.max()) + 2))
    for d in range(1, int(levels.max()) + 1):
        rows = order[bounds[d] : bounds[d + 1]]
        p = parent[rows]
        has = p >= 0
        out[rows[has]] |= out[p[has]]
    return out


def at_kernels(flags: np.ndarray, pointer: np.ndarray) -> np.ndarray:
    """flags[pointer] for each kernel, False where the kernel has no such row."""
    out = np.zeros(len(pointer), dtype=bool)
    ok = pointer != NO_ROW
    if len(flags):
        out[ok] = flags[pointer[ok]]
    return out
