"""pytest plugin (registered through the `pytest11` entry point, so it is active wherever
tracekit is installed): replay stored traces in tests.

    def test_decode_attention(tracekit_summary, tracekit_expect, tracekit_golden):
        summary = tracekit_summary("traces/decode.json.gz")          # analysed once per session
        tracekit_expect(summary, [{"block": "decode/attention", "min_efficiency": 0.5}])
        tracekit_golden(summary, "golden/decode.summary.json", rel=1e-6)  # beside this test file

    def test_no_regression(tracekit_summary, tracekit_baseline, tracekit_expect):
        summary = tracekit_summary("traces/train.json.gz")
        baseline = tracekit_baseline(summary, "baseline/train.summary.json")  # beside this test file
        tracekit_expect(summary, [{"max_regression": 0.05}, {"kernel": "flash_fwd_kernel", "max_regression": 0.05}], baseline)

`pytest --tracekit-update-goldens` rewrites the golden files (and records the baselines)
instead of comparing. A relative golden or baseline path is taken from the test file's
directory; the trace's path is stored relative to
the golden file, so goldens pass wherever the repository is checked out.
Importing this module costs only pytest: tracekit itself loads when a fixture is used."""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

import pytest

_UPDATED = pytest.StashKey[list]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tracekit")
    group.addoption("--tracekit-update-goldens", action="store_true", default=False,
                    help="tracekit: rewrite golden summaries with the values measured now, instead of comparing.")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_UPDATED] = []


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    updated = config.stash.get(_UPDATED, [])
    if updated:
        terminalreporter.write_line(f"tracekit: rewrote {len(updated)} golden summaries (review the diff before committing)")


@pytest.fixture(scope="session")
def tracekit_summary():
    """`load(path, device=None, rules=None, top=None)` -> the summary dict of a trace or a
    stored summary.json; each (path, options) is analysed once per test session."""
    from tracekit.compare.summary import as_summary

    cache: dict[tuple, dict[str, Any]] = {}

    def load(path: str | os.PathLike, device: str | None = None, rules: str | None = None, top: int | None = None) -> dict[str, Any]:
        key = (os.fspath(path), device, rules, top)
        if key not in cache:
            cache[key] = as_summary(path, device=device, rules=rules, top=top)
        return cache[key]

    return load


@pytest.fixture
def tracekit_expect():
    """`expect(summary, expectations, baseline=None)`: fail the test unless every expectation
    holds. `expectations` is a list of [[expect]] tables as dicts, or a TOML file path."""
    from tracekit.compare.check import check, load_expectations
    from tracekit.reports.check import rows

    def expect(summary: dict[str, Any], expectations, baseline: dict[str, Any] | None = None) -> list:
        items = expectations if isinstance(expectations, list) else load_expectations(expectations)
        verdicts = check(summary, items, baseline, source="<expectations>" if isinstance(expectations, list) else expectations)
        failed = [v for v in verdicts if not v.ok]
        if failed:
            head, body = rows(failed)
            lines = [" | ".join(head)] + [" | ".join(row) for row in body]
            pytest.fail(f"{len(failed)} of {len(verdicts)} tracekit expectations failed:\n" + "\n".join(lines), pytrace=False)
        return verdicts

    return expect


@pytest.fixture
def tracekit_golden(request: pytest.FixtureRequest):
    """`golden(summary, path, rel=1e-6, abs=1e-12)`: fail on the first difference from the
    golden file at `path` (floats within `rel`, everything else exact); with
    --tracekit-update-goldens, write `summary` there instead."""
    from tracekit.compare.golden import first_difference, portable, write_golden

    update = request.config.getoption("tracekit_update_goldens")

    def golden(summary: dict[str, Any], path: str | os.PathLike, rel: float = 1e-6, abs: float = 1e-12) -> None:  # noqa: A002
        path = pathlib.Path(path)
        if not path.is_absolute():
            path = pathlib.Path(request.path).parent / path
        summary = portable(summary, path.parent)
        if update:
            write_golden(path, summary)
            request.config.stash[_UPDATED].append(str(path))
            return
        if not path.exists():
            pytest.fail(f"no golden summary at {path}: run pytest with --tracekit-update-goldens", pytrace=False)
        difference = first_difference(json.loads(path.read_text()), summary, rel, abs)
        if difference:
            pytest.fail(f"{path.name}: {difference} (after an intended change: pytest --tracekit-update-goldens, then review the diff)",
                        pytrace=False)

    return golden


@pytest.fixture
def tracekit_baseline(request: pytest.FixtureRequest):
    """`baseline(summary, path)` -> the baseline summary stored at `path`, to give
    tracekit_expect for `max_regression`; with --tracekit-update-goldens, `summary` is
    recorded there first (the run you accept as the new baseline)."""
    from tracekit.compare.golden import write_golden
    from tracekit.compare.summary import as_summary

    update = request.config.getoption("tracekit_update_goldens")

    def baseline(summary: dict[str, Any], path: str | os.PathLike) -> dict[str, Any]:
        path = pathlib.Path(path)
        if not path.is_absolute():  # like a golden: beside the test file, wherever pytest runs
            path = pathlib.Path(request.path).parent / path
        if update:
            write_golden(path, summary)
            request.config.stash[_UPDATED].append(str(path))
        if not path.exists():
            pytest.fail(f"no baseline summary at {path}: record one with pytest --tracekit-update-goldens", pytrace=False)
        return as_summary(str(path))

    return baseline
