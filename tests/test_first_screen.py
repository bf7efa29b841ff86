"""`tracekit analyze`'s first screen: the answer in at most 40 lines, every figure the full
report's (checked against `--format json` by parsing the printed values back), flags kept
beside their figures, the warnings' paragraphs moved off stderr into the notes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import SHARED, sweep
from helpers import run_cli

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "fixtures" / "gpu" / "h100" / "h10080gbhbm3_llama3-8b_4layers_prefill1x512_decode_bs16_ncu_twin.json.gz"
LIMIT = 40
UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def _screen(path, columns, *extra):
    run = run_cli("analyze", path, *extra, env={"COLUMNS": str(columns)})
    assert run.returncode == 0, run.stderr
    return run


def _ns(text: str) -> float:
    value, unit = text.split()
    return float(value) * UNIT_NS[unit]


def _rows(lines: list[str], title: str) -> list[list[str]]:
    """The rows under a first-screen table's title, split on runs of two spaces or more."""
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    rows = []
    for line in lines[start + 2:]:  # title, column heads
        cells = re.split(r"\s{2,}", line.strip())
        if not line.startswith(" ") or len(cells) < 3:
            break
        rows.append(cells)
    return rows


@pytest.fixture(scope="module")
def bundled_json():
    run = run_cli("analyze", BUNDLED, "--format", "json")
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@pytest.mark.parametrize("columns", [80, 100, 120])
def test_bundled_first_screen_fits_and_says_nothing_before_the_headline(columns):
    run = _screen(BUNDLED, columns)
    lines = run.stdout.splitlines()
    assert len(lines) <= LIMIT, len(lines)
    assert max(map(len, lines)) <= columns
    assert run.stderr == ""  # the two efficiency flags' paragraphs are not printed before the answer
    assert lines[0].startswith(str(BUNDLED)[len(str(ROOT)) + 1:]) or lines[0].startswith(str(BUNDLED)[:columns])
    text = " ".join(lines)
    assert text.index("GPU time:") < text.index("Roofline:") < text.index("Watch:") < text.index("What to fix first")
    assert "…" not in "".join(l for l in lines if not l.startswith(" "))  # only table cells are shortened


def test_bundled_first_screen_figures_are_the_full_reports(bundled_json):
    lines = _screen(BUNDLED, 160).stdout.splitlines()
    causes = bundled_json["what_to_fix_first"]["causes"]
    rows = _rows(lines, "What to fix first")
    assert len(rows) == 5 and len(causes) == 11
    for row, cause in zip(rows, causes):
        number, time, share = int(row[0]), _ns(row[-2]), float(row[-1].rstrip("%"))
        assert time == pytest.approx(cause["time_ns"], abs=0.5e3 if row[-2].endswith("ms") else 0.5)
        assert share == pytest.approx(100 * cause["share"], abs=0.05)
    assert f"6 more in --full" in lines[next(i for i, l in enumerate(lines) if l.startswith("What to fix first"))]
    blocks = _rows(lines, "Blocks")
    assert [r[0] for r in blocks] == [f"{b['phase']} / {b['block']}" for b in bundled_json["blocks"][:5]]
    for row, block in zip(blocks, bundled_json["blocks"]):
        assert _ns(row[1]) == pytest.approx(block["gpu_time_ns"], rel=5e-4)
        assert float(row[2].rstrip("%")) == pytest.approx(100 * block["share"], abs=0.05)
        assert float(row[3].rstrip("%")) == pytest.approx(100 * block["efficiency_sustained"], abs=0.05)
        assert row[4] == block["bound"]
    busy = re.search(r"of ([\d.]+ \w+) busy", " ".join(lines)).group(1)
    assert _ns(busy) == pytest.approx(bundled_json["devices"][0]["busy_ns"], rel=5e-4)
    watch = re.search(r"Watch: the step time, ([\d.]+ \w+)", " ".join(lines)).group(1)
    assert _ns(watch) == pytest.approx(bundled_json["what_to_fix_first"]["denominator_ns"], rel=5e-4)
    steps = next(l for l in lines if l.startswith("steps"))
    assert steps.startswith(f"steps       {len(bundled_json['steps'])} (from annotation)")
    total = bundled_json["throughput"]["total"]
    assert f"{total['throughput'] / 1e3:.2f} k tokens/s" in steps
    # the two flagged figures (ops, activities) are not on this screen: the notes count them
    notes = " ".join(lines[next(i for i, l in enumerate(lines) if l.startswith("notes")):])
    assert f"{len(bundled_json['flags'])} figures past a physical limit (activities, ops)" in notes
    worst = max((f for f in bundled_json["flags"] if f["table"] != "activities"), key=lambda f: f["value"] / f["limit"])
    assert f"the worst {worst['where']} efficiency {100 * worst['value']:.1f}%; why in --full" in notes


def test_full_report_numbers_each_fix_like_its_cause(bundled_json):
    full = _screen(BUNDLED, 200, "--full").stdout
    fixes = full[full.index("Fixes (numbered like the causes above)"):]
    for number, cause in enumerate(bundled_json["what_to_fix_first"]["causes"], start=1):
        if cause.get("fix"):
            assert re.search(rf"\b{number}\b.*{re.escape(cause['fix'][:30])}", fixes), (number, cause["fix"])
    first = _screen(BUNDLED, 200).stdout
    for number, cause in enumerate(bundled_json["what_to_fix_first"]["causes"][:5], start=1):
        assert (f"[fix {number}]" in first) == bool(cause.get("fix"))


def _shared_inputs():
    traces = sorted(SHARED.glob("torch/*.json.gz")) + sorted(SHARED.glob("nsys/*.sqlite"))
    return traces + [SHARED / "torch" / "v100_dlrm_8ranks"]  # the 8 ranks, as one job


@pytest.mark.parametrize("path", sweep(_shared_inputs()), ids=lambda p: p.name)
def test_every_shared_trace_first_screen_fits_40_lines_at_100_columns(path):
    args = (["--device", "H100-SXM"] if "h100x2_fsdp" in path.name else []) + (["--workers", "1"] if path.is_dir() else [])
    run = _screen(path, 100, *args)
    lines = run.stdout.splitlines()
    assert 3 <= len(lines) <= LIMIT, (len(lines), run.stdout)
    assert max(map(len, lines)) <= 100
    notes = max(i for i, line in enumerate(lines) if line.startswith("notes"))
    assert " ".join(" ".join(lines[notes:]).split()).endswith("`--full` for the whole report")  # the notes close every first screen
    assert "implausible" not in run.stderr  # flag paragraphs are the full report's; the notes count them


def test_a_headline_efficiency_past_the_physical_limit_is_flagged_everywhere(tmp_path):
    """A 16M-element fp32 add (3 x 64 MiB moved) recorded as 2 us on an H100 would need 100 TB/s:
    the headline's efficiency (sum t_min / sum time) is past its limit, so the first screen, the
    full report and summary.json mark it, and the flags list holds it (table "coverage")."""
    from synthetic import KinetoBuilder

    b = KinetoBuilder()
    b.op("aten::add", 0.0, 5.0, dims=[[1 << 24], [1 << 24], []], types=["float", "float", "Scalar"])
    b.kernel("void vectorized_elementwise_kernel<4, AddFunctor<float>>(int)", 1.0, 10.0, 2.0)
    trace = b.write(tmp_path / "too_fast.json")
    t_min_ns = 3 * 4 * (1 << 24) / 3.35e12 * 1e9  # bytes / bandwidth: the roofline time of the add
    peak = f"{t_min_ns / 2000:.1%}"  # of peak, over the 2 us it took
    first, full = _screen(trace, 100).stdout, _screen(trace, 100, "--full").stdout
    assert f"{peak} (!) of peak" in " ".join(first.split())
    assert f"({peak} (!) of peak)" in " ".join(full.split())
    summary = json.loads(run_cli("analyze", trace, "--format", "json").stdout)
    assert f"({peak} (!) of peak)" in summary["headline"][1]
    coverage = [f for f in summary["flags"] if f["table"] == "coverage" and f["figure"] == "efficiency"]
    assert len(coverage) == 1 and coverage[0]["value"] == pytest.approx(t_min_ns / 2000, rel=1e-9)
