"""The hostile-user audit's classes, seeded (tests/fuzz_hostile.py): two cases of each kind here;
`python benchmarks/fuzz_hostile.py --cases 1000` runs the sweep (figures in issue 49's note)."""

from __future__ import annotations

import pytest

import fuzz_hostile


@pytest.mark.parametrize("seed", range(2 * len(fuzz_hostile.KINDS)))
def test_a_hostile_case_holds(seed, tmp_path):
    result = fuzz_hostile.case(seed, str(tmp_path))
    assert result["kind"] == fuzz_hostile.KINDS[seed % len(fuzz_hostile.KINDS)]
    assert result["problems"] == [], result
