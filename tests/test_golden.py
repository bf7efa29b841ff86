"""Every shared fixture's summary.json against its golden copy, through tracekit's own
pytest plugin (tracekit/integrations/pytest_plugin.py). After an intended change:
`python -m pytest tests/test_golden.py --tracekit-update-goldens` (or `python tests/golden.py`),
then review the diff."""

from __future__ import annotations

import pytest

from golden import GOLDEN, fixtures, golden_name, summary


@pytest.mark.parametrize("path", fixtures(), ids=golden_name)
def test_summary_matches_golden(path, tracekit_golden):
    tracekit_golden(summary(path), GOLDEN / golden_name(path), rel=1e-6, abs=1e-12)


def test_every_fixture_has_a_golden():
    assert len(fixtures()) >= 20
    assert {golden_name(p) for p in fixtures()} == {p.name for p in GOLDEN.glob("*.summary.json")}
