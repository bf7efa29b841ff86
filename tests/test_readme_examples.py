"""The README's examples run as written (issue 30, point 8): the Python API block (on a real
trace saved as trace.json.gz), the expectations TOML (its `kernel = "flash_fwd_kernel"`
finds the real flash kernel, `void pytorch_flash::flash_fwd_kernel<...>(...)`), and an
import from the checkout's parent directory with the install the README names."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import tracekit
from conftest import shared

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = {path.name: path.read_text() for path in sorted((ROOT / "docs").glob("*.md"))}
BERT = ("torch", "h100_bert_small_hf_inference.json.gz")


def _block(language: str, containing: str, page: str = "README.md") -> str:
    text = README if page == "README.md" else DOCS[page]
    blocks = re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)
    found = [b for b in blocks if containing in b]
    assert found, f"no ```{language} block with {containing!r} in {page}"
    return found[0]


def test_python_api_block_runs_as_written(tmp_path, monkeypatch):
    code = _block("python", "tracekit.load(", "python-api.md")
    shutil.copy(shared(*BERT), tmp_path / "trace.json.gz")
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)  # every line, as written
    stack = scope["trace"].range_stack(0)
    assert stack == ["ProfilerStep#6"]  # BERT's kernels run inside its one profiler step


def test_expectations_example_finds_the_real_flash_kernel(tmp_path):
    from tracekit.compare import as_summary
    from tracekit.compare.check import check, load_expectations

    toml = _block("toml", 'kernel = "flash_fwd_kernel"', "compare.md")
    (tmp_path / "expect.toml").write_text(toml)
    summary = as_summary(tracekit.analyze(shared(*BERT), workers=1), top=100)
    verdicts = check(summary, load_expectations(tmp_path / "expect.toml"), baseline=summary)
    flash = [v for v in verdicts if "flash_fwd_kernel" in v.expectation]
    # measured against itself: a change of 0, within the 5% limit
    assert flash and all(v.measured == 0 and v.ok for v in flash), [(v.expectation, v.measured, v.reason) for v in flash]


def test_import_from_the_checkouts_parent_directory(tmp_path):
    """A checkout folder named tracekit/, a script beside it: with the install the README
    names (compat mode puts the checkout on sys.path, as PYTHONPATH does here), the real
    package wins over the checkout folder seen as a namespace package."""
    assert "editable_mode=compat" in DOCS["python-api.md"]
    (tmp_path / "tracekit").symlink_to(ROOT, target_is_directory=True)
    (tmp_path / "script.py").write_text("import tracekit\nprint(tracekit.analyze.__module__, tracekit.__file__)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split()[1] == str(ROOT / "tracekit" / "__init__.py")


def test_the_first_command_shows_a_gpu_report_and_the_first_screen_is_what_it_prints():
    """Issues 40 and 51: a new user's first report is a GPU one (phases, blocks, roofline, a
    step), on a small trace the project recorded and bundles; the README's first screen is
    what `analyze` prints today at 100 columns, line for line."""
    from helpers import run_cli

    first = re.findall(r"```bash\n(.*?)```", README, flags=re.S)[0]
    trace = re.search(r"tracekit analyze (\S+)", first).group(1)
    path = ROOT / trace
    assert trace.startswith("fixtures/") and path.stat().st_size < 5_000_000
    a = tracekit.analyze(path)
    assert a.device is not None and len(a.kernels) > 0 and a.findings.headline.kind == "gpu"
    assert {"prefill", "decode"} <= set(a.blocks["phase"]) and a.coverage["efficiency_sustained"] is not None
    assert len(a.steps) >= 1
    shown = README[README.index("## The first screen"):]
    shown = shown[shown.index("```text\n") + len("```text\n"):shown.index("\n```", shown.index("```text\n"))]
    run = run_cli("analyze", trace, env={"COLUMNS": "100"}, cwd=ROOT)
    assert run.returncode == 0 and run.stderr == "", run.stderr
    assert shown.splitlines() == [line.rstrip() for line in run.stdout.splitlines()]
    assert len(README.splitlines()) <= 200


def test_ci_runs_the_readme_test_commands_verbatim_and_installs_at_the_lock():
    """Issue 47: `.ci/run` runs exactly the README's test lines (quick, slow, newest releases),
    and the first command installs at the lock, which names no editable install and no
    local version label."""
    ci = (ROOT / ".ci" / "run").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", README, flags=re.S)
    tests = [line for block in blocks for line in block.splitlines() if "pytest -q" in line]
    assert len(tests) == 3, tests
    assert any('-m "not slow"' in t and "ci-newest" not in t for t in tests) and any("-m slow" in t for t in tests)
    for line in tests:
        assert line in ci, line
    assert "-c constraints.txt" in blocks[0]
    lock = [line for line in (ROOT / "constraints.txt").read_text().splitlines() if line and not line.startswith("#")]
    assert all("==" in line and "+" not in line and not line.startswith("-e") for line in lock)
    names = {line.split("==")[0].lower() for line in lock}
    assert {"msgspec", "numpy", "pandas", "torch", "pytest-xdist", "mlflow", "mlflow-skinny"} <= names
