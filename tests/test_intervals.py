"""Nesting and enclosing-interval queries, against a brute-force definition."""

from __future__ import annotations

import numpy as np
import pytest

from tracekit.trace.intervals import _nest_by_stack, innermost_enclosing, nest


def random_forest(rng, n_groups=3, per_group=300):
    """Properly nested intervals (call-tree-like) on a few threads, with ties, touching
    siblings, and empty intervals placed on boundaries (the ambiguous cases)."""
    group, start, end = [], [], []

    def build(g, lo, hi, depth, budget):
        t = lo
        while t < hi and budget[0] > 0:
            a = t + int(rng.integers(0, 3))
            b = min(hi, a + int(rng.integers(1, 60)))
            if a >= hi:
                break
            budget[0] -= 1
            group.append(g), start.append(a), end.append(b)
            if depth < 6:
                build(g, a, b, depth + 1, budget)
            t = b

    for g in range(n_groups):
        build(g, 0, 100_000, 0, [per_group])
    # Empty intervals on the start or end of a tenth of the intervals.
    for i in rng.choice(len(start), size=len(start) // 10, replace=False):
        at = start[i] if rng.random() < 0.5 else end[i]
        group.append(group[i]), start.append(at), end.append(at)
    perm = rng.permutation(len(start))
    return np.array(group)[perm], np.array(start)[perm], np.array(end)[perm]


@pytest.mark.parametrize("seed", range(4))
def test_vectorised_nesting_matches_the_stack_sweep(seed):
    rng = np.random.default_rng(seed)
    group, start, end = random_forest(rng)
    parent, depth = nest(group, start, end)
    full = end > start
    ref_parent, ref_depth = _nest_by_stack(group[full], start[full], end[full])
    rows = np.flatnonzero(full)
    assert np.array_equal(depth[full], ref_depth)
    assert np.array_equal(parent[full], np.where(ref_parent >= 0, rows[np.maximum(ref_parent, 0)], -1))
    # An empty interval hangs under the innermost non-empty interval holding its instant.
    for i in np.flatnonzero(~full):
        holding = np.flatnonzero(full & (group == group[i]) & (start <= start[i]) & (end >= start[i]))
        if len(holding):
            assert parent[i] in holding and depth[i] == depth[parent[i]] + 1
        else:
            assert parent[i] == -1 and depth[i] == 0
    assert (~full).sum() >= 50  # the generator does make empty intervals
    has = parent >= 0
    assert (start[parent[has]] <= start[has]).all() and (end[parent[has]] >= end[has]).all()


def test_partial_overlap_falls_back_to_siblings():
    # A [0,10], B [5,15] overlap partly; C [12,14] sits in B only.
    group = np.zeros(3, dtype=np.int64)
    start, end = np.array([0, 5, 12]), np.array([10, 15, 14])
    parent, depth = nest(group, start, end)
    assert parent.tolist() == [-1, -1, 1]
    assert depth.tolist() == [0, 0, 1]


def test_innermost_enclosing_matches_brute_force():
    rng = np.random.default_rng(7)
    group, start, end = random_forest(rng)
    parent, _ = nest(group, start, end)
    qg = rng.integers(0, 4, 500)  # group 3 has no intervals
    qt = rng.integers(0, 2_000, 500)
    found = innermost_enclosing(group, start, end, parent, qg, qt)
    for g, t, f in zip(qg, qt, found):
        holding = np.flatnonzero((group == g) & (start <= t) & (end >= t))
        if len(holding) == 0:
            assert f == -1
        else:
            assert f in holding
            # innermost: no holding interval lies strictly inside it
            assert end[f] - start[f] == min(end[holding] - start[holding])


def test_a_call_that_outlives_its_caller_closes_with_it():
    """Python frames (xDiT FLUX.1 trace: a built-in `next` inside contextlib's __enter__ that
    torch.profiler closed only at the end of the capture): A [0, 100] calls B [10, 20], which
    calls C [15, 1000] (never closed); A then calls D [30, 40]. In a call stack C closes with B,
    so D is A's callee. As plain intervals C overlaps A partly and is a root that holds D."""
    g = np.zeros(4, dtype=np.int64)
    s, e = np.array([0, 10, 15, 30]), np.array([100, 20, 1000, 40])
    parent, depth = nest(g, s, e, calls=np.ones(4, dtype=bool))
    assert parent.tolist() == [-1, 0, 1, 0] and depth.tolist() == [0, 1, 2, 1]
    parent, _ = nest(g, s, e)
    assert parent.tolist() == [-1, 0, -1, 2]
