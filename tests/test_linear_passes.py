"""Passes that must stay linear in distinct names (issue 39 item 5: 100k distinct kernel
names took 85 s when a pass compared every name with every other). These tests count the
work, they do not time it: a name type that counts its comparisons shows a pass that
compares all pairs."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analysis.rollup import duration_sketches


class CountingName(str):
    """A kernel name that counts how often it is compared for equality."""
    comparisons = 0

    def __eq__(self, other):
        CountingName.comparisons += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_duration_sketches_compare_each_name_a_bounded_number_of_times():
    n = 3000
    names = [f"void kernel_{i}<float>(float*)" for i in range(n)]
    # Two calls of each name, 1 and 3 ns: every sketch is [1.0, 3.0].
    k = pd.DataFrame({"name": pd.Series(names + names, dtype="category"),
                      "duration_ns": np.r_[np.ones(n), np.full(n, 3.0)]})
    wanted = [CountingName(x) for x in names[: n // 2]]
    CountingName.comparisons = 0
    sketches = duration_sketches(k, wanted)
    assert sorted(sketches) == sorted(names[: n // 2])
    assert all(v == [1.0, 3.0] for v in sketches.values())
    # A hash lookup compares a category with the wanted name of the same hash: about one
    # comparison per category. Comparing all pairs would be n * n / 2 = 4.5 million.
    assert CountingName.comparisons <= 2 * n
