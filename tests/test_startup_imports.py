"""What a command imports (issue 41: import only what the command uses, when it uses it).
Module lists, not timings: benchmarks/import_budget.py times them."""

from __future__ import annotations

import pathlib
import sqlite3
import subprocess
import sys

import pytest

from synthetic import KinetoBuilder

HEAVY = ("pandas", "pyarrow", "pyarrow.compute", "matplotlib", "jinja2")
# the model's costing modules: imported by tracekit.model.run_model, only with --model
MODEL = ("tracekit.model.architecture", "tracekit.model.blocks", "tracekit.model.fill", "tracekit.model.quant",
         "tracekit.model.config", "tracekit.model.agreement")
RUN = ("import sys\nfrom tracekit.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
       f"print(sorted(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)")


def heavy_modules_after(*argv: str, watched: tuple[str, ...] = HEAVY) -> tuple[str, list[str]]:
    run = RUN.replace(repr(HEAVY), repr(watched))
    result = subprocess.run([sys.executable, "-c", run, *argv], capture_output=True, text=True, timeout=300)
    return result.stdout, eval(result.stderr.strip().splitlines()[-1])


def test_info_of_a_trace_without_step_markers_imports_no_pandas(tmp_path):
    # Without ProfilerStep#N the health check asks step_ownership for the other step names:
    # that module (and column_text under it) must not pull in pandas.
    b = KinetoBuilder()
    b.op("aten::add", 0.0, 5.0, dims=[[1024], [1024], []], types=["float", "float", "Scalar"])
    b.kernel("void vectorized_elementwise_kernel<4, AddFunctor<float>>(int)", 1.0, 10.0, 2.0)
    out, heavy = heavy_modules_after("info", b.write(tmp_path / "no_steps.json"))
    assert "vectorized_elementwise_kernel" in out  # the command ran and listed the kernel
    assert heavy == []


NSYS = sorted((pathlib.Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "nsys").glob("*.sqlite"))


@pytest.mark.skipif(not NSYS, reason="needs the shared fixtures' Nsight Systems exports")
@pytest.mark.parametrize("path", NSYS, ids=lambda p: p.name)
def test_info_of_an_nsys_export_imports_no_pandas(path):
    # The Nsight Systems parser reads the SQLite rows straight into numpy columns, as the
    # Kineto parser does: `info` on an export never pays for pandas.
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        kernels = conn.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    finally:
        conn.close()
    out, heavy = heavy_modules_after("info", "--format", "json", str(path))
    import json

    assert json.loads(out)["counts"]["kernels"] == kernels > 0  # the command ran and counted the export's kernels
    assert "pandas" not in heavy and "pyarrow" not in heavy


def test_analyze_imports_no_plotting_or_templates(tmp_path):
    b = KinetoBuilder()
    b.op("aten::add", 0.0, 5.0, dims=[[1024], [1024], []], types=["float", "float", "Scalar"])
    b.kernel("void vectorized_elementwise_kernel<4, AddFunctor<float>>(int)", 1.0, 10.0, 2.0)
    out, heavy = heavy_modules_after("analyze", b.write(tmp_path / "one_kernel.json"))
    assert "aten::add [[1024], [1024]]" in out  # the first screen ran: its top cause names the op
    assert "matplotlib" not in heavy and "jinja2" not in heavy
    assert "pandas" in heavy  # the analysis's tables are DataFrames: the check above is not vacuous


def test_analyze_without_a_model_imports_none_of_the_model_costs(tmp_path):
    # tracekit.model's package holds ModelOptions (every analyze passes it on) and run_model;
    # the modules that cost a config's blocks are imported by run_model alone.
    b = KinetoBuilder()
    b.op("aten::add", 0.0, 5.0, dims=[[1024], [1024], []], types=["float", "float", "Scalar"])
    b.kernel("void vectorized_elementwise_kernel<4, AddFunctor<float>>(int)", 1.0, 10.0, 2.0)
    out, loaded = heavy_modules_after("analyze", b.write(tmp_path / "one_kernel.json"), watched=MODEL + ("tracekit.model",))
    assert "aten::add [[1024], [1024]]" in out
    assert loaded == ["tracekit.model"]  # the package itself is imported: the check above is not vacuous


def test_info_of_a_trace_with_hundreds_of_kernel_names_imports_no_pandas(tmp_path):
    # 300 distinct plain template names: the labels' Arrow path would convert them, and
    # pyarrow imports pandas on its first conversion of Python objects (~0.3-0.5 s, more than
    # info spends on a 10 MB trace: A100 DDP's info was 1.45 s, 0.6 s without it). Below
    # text_match.ARROW_WITHOUT_PANDAS names, info labels them one by one, with the same labels.
    b = KinetoBuilder()
    for i in range(300):
        b.op("aten::add", 10.0 * i, 5.0, dims=[[1024], [1024], []], types=["float", "float", "Scalar"])
        b.kernel(f"void elementwise_kernel_{i}<float, {i % 7}>(float*, int)", 10.0 * i + 1.0, 10.0 * i + 10.0, 2.0)
    out, heavy = heavy_modules_after("info", b.write(tmp_path / "names.json"), "--top", "300")
    assert "elementwise_kernel_299<float, 5>" in out  # every kernel listed under its label
    assert "pandas" not in heavy


def _stored_summary(tmp_path) -> str:
    """A summary.json written by `analyze --out` on a one-kernel trace (that run imports pandas;
    the commands below run in their own processes)."""
    from helpers import run_cli

    b = KinetoBuilder()
    b.op("aten::add", 0.0, 5.0, dims=[[1024], [1024], []], types=["float", "float", "Scalar"])
    b.kernel("void vectorized_elementwise_kernel<4, AddFunctor<float>>(int)", 1.0, 10.0, 2.0)
    code, _, err = run_cli("analyze", b.write(tmp_path / "one_kernel.json"), "--out", tmp_path / "bundle")
    assert code == 0, err
    return str(tmp_path / "bundle" / "summary.json")


def test_diff_and_check_of_stored_summaries_import_no_pandas(tmp_path):
    # Issue 48: a stored summary is a dict; reading, diffing and checking it needs neither the
    # analysis nor its tables (the schema version and the coverage floor live below them).
    summary = _stored_summary(tmp_path)
    out, heavy = heavy_modules_after("diff", summary, summary)
    assert out.startswith("verdict: within noise") and "coverage" in out, out  # a run compared with itself
    assert heavy == []
    out, heavy = heavy_modules_after("diff", summary, summary, "--out", str(tmp_path / "diff_out"))
    assert (tmp_path / "diff_out").is_dir()
    assert heavy == []
    expect = tmp_path / "expect.toml"
    expect.write_text("[[expect]]\nmin_coverage = 0.9\n")
    out, heavy = heavy_modules_after("check", summary, "--expect", str(expect))
    assert "run coverage" in out and "1 of 1 expectations hold" in out, out
    assert heavy == []


def test_devices_imports_no_pandas():
    out, heavy = heavy_modules_after("devices")
    assert "h200" in out.lower() and "4,800" in out  # the H200's row with its 4.8 TB/s
    assert heavy == []


TERMINAL_AND_TEMPLATES = ("rich", "markupsafe", "jinja2", "matplotlib")


@pytest.mark.parametrize("argv", [("analyze", "--format", "markdown"), ("analyze", "--format", "json"), ("info", "--format", "json")],
                         ids=" ".join)
def test_markdown_and_json_import_no_terminal_library(tmp_path, argv):
    # rich is the terminal's (issue 48, "imports by need"): the one-line facts every medium
    # prints are plain strings (reports/lines.py), the escaping functions import their library
    # where they run, and a module naming Console for its annotations imports it only for the checker.
    b = KinetoBuilder()
    b.op("aten::add", 0.0, 5.0, dims=[[1024], [1024], []], types=["float", "float", "Scalar"])
    b.kernel("void vectorized_elementwise_kernel<4, AddFunctor<float>>(int)", 1.0, 10.0, 2.0)
    out, loaded = heavy_modules_after(argv[0], b.write(tmp_path / "one_kernel.json"), *argv[1:], watched=TERMINAL_AND_TEMPLATES)
    assert "vectorized_elementwise_kernel" in out or "AddFunctor" in out  # the command ran and printed its kernel
    assert loaded == []
    _, terminal = heavy_modules_after(argv[0], tmp_path / "one_kernel.json", watched=TERMINAL_AND_TEMPLATES)
    assert "rich" in terminal  # the table format does import it: the check above is not vacuous
