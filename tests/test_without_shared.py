"""A fresh clone without ../shared/fixtures (issue 22): the tests that need them skip with
one clear reason (instead of `assert 0 >= 20`), and TRACEKIT_REQUIRE_SHARED=1 (CI) turns
that skip into a failure."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tarfile

REPO = pathlib.Path(__file__).resolve().parents[1]
CHECKS_SHARED = True


def _clone(tmp_path) -> pathlib.Path:
    """The repository's tracked files, in a directory with no `shared` beside it."""
    archive = tmp_path / "repo.tar"
    with tarfile.open(archive, "w") as tar:
        for name in ("tracekit", "tests/conftest.py", "tests/golden.py", "tests/test_golden.py", "tests/test_bad_input.py",
                     "tests/golden", "tests/synthetic.py", "tests/helpers.py", "tests/test_serving_steps.py", "setup.cfg", "pyproject.toml"):
            tar.add(REPO / name, arcname=name)
    clone = tmp_path / "clone" / "tracekit-repo"
    clone.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        tar.extractall(clone)
    assert not (clone.parent / "shared").exists()
    return clone


def _pytest(clone, require: bool):
    env = {k: v for k, v in os.environ.items() if k != "TRACEKIT_REQUIRE_SHARED"}
    env["PYTHONPATH"] = str(clone)
    if require:
        env["TRACEKIT_REQUIRE_SHARED"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/test_golden.py",
                           "tests/test_bad_input.py", "tests/test_serving_steps.py"], cwd=clone, env=env, capture_output=True, text=True, timeout=300)


def test_without_shared_fixtures_tests_skip_with_the_reason_or_fail_in_ci(tmp_path):
    clone = _clone(tmp_path)
    proc = _pytest(clone, require=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode in (0, 5), out  # 5: nothing ran, everything skipped
    assert "assert 0 >= 20" not in out and "failed" not in out and "error" not in out.lower(), out
    assert "needs the shared fixtures at" in out and "docs/install.md" in out, out
    # the tests that read ../shared/models (synthetic traces with a real config) skip for the models
    assert "needs the shared model configs at" in out and " passed" in out, out
    proc = _pytest(clone, require=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode not in (0, 5), out
    assert "TRACEKIT_REQUIRE_SHARED=1 requires them" in out, out
