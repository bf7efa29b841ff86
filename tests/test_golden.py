"""Every shared fixture's summary.json against its golden copy (see tests/golden.py)."""

from __future__ import annotations

import json

import pytest

from golden import GOLDEN, fixtures, golden_name, summary


def _diff(expected, actual, path="$"):
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in sorted(set(expected) | set(actual)):
            if key not in expected or key not in actual:
                return f"{path}.{key}: only in {'golden' if key in expected else 'new'}"
            found = _diff(expected[key], actual[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return f"{path}: {len(expected)} items in golden, {len(actual)} now"
        for i, (e, a) in enumerate(zip(expected, actual)):
            found = _diff(e, a, f"{path}[{i}]")
            if found:
                return found
        return None
    if isinstance(expected, float) and isinstance(actual, (int, float)):
        return None if actual == pytest.approx(expected, rel=1e-6, abs=1e-12) else f"{path}: golden {expected}, now {actual}"
    return None if expected == actual else f"{path}: golden {expected!r}, now {actual!r}"


@pytest.mark.parametrize("path", fixtures(), ids=golden_name)
def test_summary_matches_golden(path):
    golden = GOLDEN / golden_name(path)
    assert golden.exists(), f"no golden for {path.name}: run `python tests/golden.py`"
    difference = _diff(json.loads(golden.read_text()), summary(path))
    assert difference is None, f"{difference} (after an intended change: python tests/golden.py, then review the diff)"


def test_every_fixture_has_a_golden():
    assert len(fixtures()) >= 20
    assert {golden_name(p) for p in fixtures()} == {p.name for p in GOLDEN.glob("*.summary.json")}
