"""Every command in a shell block of the README and of docs/ runs as written (issue 51).

Each ```bash block is read line by line (a trailing backslash joins lines); each `tracekit`
command in it (a line may chain several with &&) runs from a copy of the checkout's layout,
where `fixtures/` and `docs/` are the repository's and `../shared` the shared fixtures, so the
paths in the text resolve as they do for a reader in the repository root, and whatever a
command writes stays in the test's directory. It must exit 0. The other programs of those
blocks (pip, python -m pytest, a venv) are what `.ci/run` itself runs; a block that needs a
service this machine cannot give is marked `<!-- needs: ... -->` above it and names the test
that runs it, which must exist. Blocks of other languages are tested where they are named
(tests/test_readme_examples.py, tests/test_diff_noise.py)."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

from conftest import SHARED
from helpers import run_cli

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
CI_RUNS = ("pip", "python", "python3", ".", "export")  # run by .ci/run itself, not here
BLOCK = re.compile(r"(<!-- needs: (?P<needs>.*?) -->\n)?```bash\n(?P<body>.*?)```", re.S)


def _commands():
    found = []
    for page in PAGES:
        for block in BLOCK.finditer(page.read_text()):
            if block.group("needs"):
                continue
            for line in block.group("body").replace("\\\n", " ").splitlines():
                for part in line.split("&&"):
                    words = shlex.split(part, comments=True)
                    if words and words[0] == "tracekit":
                        found.append(pytest.param(words[1:], id=f"{page.name}: {' '.join(words)[:90]}"))
                    elif words:
                        assert words[0] in CI_RUNS or words[0].startswith(".ci-newest/"), (page.name, part)
    return found


def test_the_pages_have_commands_to_run():
    assert len(_commands()) >= 6  # the collection below is not vacuous
    readme = ROOT / "README.md"
    assert any("tracekit analyze fixtures/" in b.group("body") for b in BLOCK.finditer(readme.read_text()))


def test_marked_blocks_name_a_test_that_exists():
    for page in PAGES:
        for block in BLOCK.finditer(page.read_text()):
            if block.group("needs"):
                named = re.findall(r"tests/(test_\w+\.py)", block.group("needs"))
                assert named and all((ROOT / "tests" / n).exists() for n in named), (page.name, block.group("needs"))


@pytest.fixture
def reader_dir(tmp_path):
    """The repository root as a reader's shell sees it: fixtures/ and docs/, ../shared beside it."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("fixtures", "docs"):
        (repo / name).symlink_to(ROOT / name, target_is_directory=True)
    (tmp_path / "shared").symlink_to(SHARED.parent, target_is_directory=True)
    return repo


@pytest.mark.parametrize("argv", _commands())
def test_every_shell_command_of_the_docs_runs_as_written(argv, reader_dir):
    run = run_cli(*argv, cwd=reader_dir, env={"COLUMNS": "100"})
    assert run.returncode == 0, (argv, run.stderr[-2000:])
    assert run.stdout.strip() or os.listdir(reader_dir) != ["fixtures", "docs"], argv  # it printed or wrote something


def test_the_example_files_are_the_blocks_their_pages_print():
    """docs/examples/rules.toml is attribution.md's rules block; expect.toml passes on the
    trace compare.md checks it on (its command above exits 0) and names a kernel, a block and the run."""
    page = (ROOT / "docs" / "attribution.md").read_text()
    assert re.search(r"```toml\n(.*?)```", page, re.S).group(1) == (ROOT / "docs" / "examples" / "rules.toml").read_text()
    expect = (ROOT / "docs" / "examples" / "expect.toml").read_text()
    assert 'kernel = "flash_fwd_kernel"' in expect and 'block = "attention"' in expect and "max_step_time_ms" in expect
