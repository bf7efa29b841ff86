"""Every shared fixture's summary.json against its golden copy, through tracekit's own
pytest plugin (tracekit/integrations/pytest_plugin.py). After an intended change:
`python -m pytest tests/test_golden.py --tracekit-update-goldens` (or `python tests/golden.py`),
then review the diff."""

from __future__ import annotations

import pytest

from golden import DEVICES, GOLDEN, fixtures, golden_name, summary


@pytest.mark.parametrize("path", fixtures(), ids=golden_name)
def test_summary_matches_golden(path, tracekit_golden, shared_analysis):
    tracekit_golden(summary(path, shared_analysis(path, DEVICES.get(path.name))), GOLDEN / golden_name(path), rel=1e-6, abs=1e-12)


def test_every_fixture_has_a_golden():
    assert len(fixtures()) >= 20
    assert {golden_name(p) for p in fixtures()} == {p.name for p in GOLDEN.glob("*.summary.json")}


def test_a_cached_analysis_that_a_test_changes_is_caught():
    """The shared cache's seal (conftest.SealedAnalyses): a changed table or figure fails the
    check; an untouched one passes."""
    from conftest import PROJECT_FIXTURES, SealedAnalyses

    cache = SealedAnalyses()
    path = PROJECT_FIXTURES / "cpu_tiny_llama_decode.json.gz"
    a = cache(path)
    assert cache(path) is a and cache.check() == []
    del cache(path).blocks[cache(path).blocks.columns[-1]]  # a test's change in place
    assert cache.check() == [str(path)]
