"""Every command x every fixture x the option sets users combine (issue 22), sampled with a
fixed seed to stay within CI's time; `python benchmarks/matrix.py` runs the whole product.
Each case: exit 0 or 2 (check: 3), never 1; strict JSON; no traceback."""

from __future__ import annotations

import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import matrix  # noqa: E402

MATRIX = 'a sample of 40 command x fixture x option cases (~20 s); benchmarks/matrix.py runs them all'

SAMPLE = 40  # ~1-2 min in one process on 2 cores
SHARED = matrix.SHARED  # the sample draws from the shared fixtures too (skipped without them)


@pytest.mark.slow(reason=MATRIX)
def test_matrix_sample():
    result = matrix.run_matrix(SAMPLE, seed=22, in_process=True)
    assert result["cases"] == SAMPLE
    assert result["failures"] == [], result["failures"]


def test_matrix_covers_every_command_and_fixture():
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        all_cases = matrix.cases(matrix.input_files(tmp))
    assert {c[0] for c in all_cases} == {"info", "analyze", "export", "diff", "check", "calibrate", "project"}
    assert {c[1] for c in all_cases} == set(matrix.fixtures())
    assert len(all_cases) == len(matrix.fixtures()) * sum(len(v) for v in matrix.all_option_sets({"rules": "", "device": "", "expect": ""}).values())


def test_matrix_covers_project_devices_the_rank_directory_and_the_real_models():
    """Issue 22, second pass: `project` (--to a device; --tp, with --model), `devices`, the
    multi-rank directory, and --model with the real config of each serving fixture's model."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        files = matrix.input_files(tmp)
        all_cases = matrix.cases(files) + matrix.other_cases(files)
    project = [c[2] for c in all_cases if c[0] == "project"]
    assert any("--to" in o for o in project) and any("--tp" in o and "--model" in o for o in project)
    assert [c for c in all_cases if c[0] == "devices" and c[1] is None]
    assert matrix.RANKS in matrix.fixtures()
    for fixture, config in matrix.SERVING_MODELS.items():
        trace = f"{matrix.SHARED}/torch/{fixture}"
        models = {o[o.index("--model") + 1] for c, t, o in all_cases if t == trace and "--model" in o}
        assert f"{matrix.MODELS}/{config}" in models, (fixture, models)
