"""tracekit diff and check on real traces; the numbers asserted are read from the raw
trace JSON (gzip + json) independently of tracekit's parser."""

from __future__ import annotations

import gzip
import json
import re
import xml.etree.ElementTree as ET

import pytest

from conftest import raw_step_ns, REPO, shared
from helpers import run_cli

QWEN = shared("torch", "h100_qwen1.5-0.5b_hf_inference.json.gz")
SGLANG = shared("torch", "mi300x_sglang_qwen3-8b_decode_bs32.json.gz")
RANK0 = shared("torch", "v100_dlrm_8ranks", "rank0.json.gz")
RANK1 = shared("torch", "v100_dlrm_8ranks", "rank1.json.gz")
NSYS = shared("nsys", "h100_nvfuser_matmul_nsys2024.6.sqlite")
GOLDEN = REPO / "tests" / "golden"


def raw_events(path):
    with gzip.open(path) as f:
        return json.load(f)["traceEvents"]


@pytest.fixture(scope="module")
def dlrm_diff():
    from tracekit.compare import diff

    return diff(RANK0, RANK1)


def test_diff_steps_match_by_order_with_raw_durations(dlrm_diff):
    (step,) = dlrm_diff["steps"]
    base, new = raw_step_ns(RANK0, "ProfilerStep#10"), raw_step_ns(RANK1, "ProfilerStep#10")
    assert (step["base"]["time_ns"], step["new"]["time_ns"]) == (base, new) == (13_009_000, 18_467_000)
    assert step["delta_ns"] == new - base and step["ratio"] == pytest.approx(new / base)
    assert dlrm_diff["totals"][0] == {"metric": "step_time_ns", "base": base, "new": new, "delta": new - base, "ratio": pytest.approx(new / base),
                                      "normalisation": "median step", "compared": True,
                                      # one step each side: no spread to measure, so no interval or verdict
                                      "interval": None, "verdict": None, "samples": [1, 1]}


def test_diff_kernels_by_label_add_up_raw_kernel_time(dlrm_diff):
    def raw_kernel_ns(path, prefix):
        return sum(e["dur"] for e in raw_events(path) if e.get("cat") == "kernel" and e["name"].startswith(prefix)) * 1000

    row = next(r for r in dlrm_diff["kernels"] if r["key"]["kernel"] == "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t")
    base, new = raw_kernel_ns(RANK0, "ncclKernel_SendRecv"), raw_kernel_ns(RANK1, "ncclKernel_SendRecv")
    assert (row["base"]["time_ns"], row["new"]["time_ns"], row["total_delta_ns"]) == (base, new, new - base) == (3_999_000, 9_506_000, 5_507_000)
    # per call: 5 calls each side (count the raw events), Δ = (9,506 - 3,999) µs / 5
    calls = [sum(1 for e in raw_events(p) if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel_SendRecv")) for p in (RANK0, RANK1)]
    assert calls == [row["base"]["calls"], row["new"]["calls"]] == [5, 5]
    assert row["delta_ns"] == pytest.approx(5_507_000 / 5) and row["impact_ns"] == pytest.approx(5_507_000)
    # The largest change of the run comes first.
    assert dlrm_diff["kernels"][0] is row


def test_diff_ops_match_by_name_and_shapes_and_list_one_side_only(dlrm_diff):
    def shapes(path):
        return {json.dumps(e["args"]["Input Dims"]).replace('"', "") for e in raw_events(path)
                if e.get("cat") == "cpu_op" and e["name"] == "fbgemm::permute_2D_sparse_data"}

    # rank 0 permutes 768 indices where rank 1 permutes 1792: one op each side only.
    in_base, in_new = shapes(RANK0), shapes(RANK1)
    assert in_base - in_new == {"[[24], [24, 16], [768], [], []]"} and in_new - in_base == {"[[24], [24, 16], [1792], [], []]"}
    rows = {(r["key"]["shapes"], r["only"]) for r in dlrm_diff["ops"] if r["key"]["op"] == "fbgemm::permute_2D_sparse_data"}
    assert ("[[24], [24, 16], [768], [], []]", "base") in rows and ("[[24], [24, 16], [1792], [], []]", "new") in rows
    assert ("[[26], [26, 16], [3424], [], []]", None) in rows
    only_base = next(r for r in dlrm_diff["ops"] if r["key"]["shapes"] == "[[24], [24, 16], [768], [], []]")
    assert only_base["new"] is None and only_base["delta_ns"] == -only_base["base"]["time_ns"] == only_base["impact_ns"]


def test_diff_sections_are_sorted_by_absolute_time_change(dlrm_diff):
    # impact: the change in time (per call tables: Δ per call × the new run's calls)
    for section in ("blocks", "ops", "kernels", "collectives"):
        deltas = [abs(r["impact_ns"]) for r in dlrm_diff[section]]
        assert deltas == sorted(deltas, reverse=True), section
    collectives = {(r["key"]["collective"], r["key"]["message_bytes"]): r for r in dlrm_diff["collectives"]}
    assert collectives[("all_to_all", 24576.0)]["total_delta_ns"] == 5_520_000


def test_diff_of_stored_summaries_matches_diff_of_traces(dlrm_diff):
    from tracekit.compare import diff

    stored = diff(GOLDEN / "torch__v100_dlrm_8ranks__rank0.json.gz.summary.json", GOLDEN / "torch__v100_dlrm_8ranks__rank1.json.gz.summary.json")
    assert [(r["key"], r["delta_ns"]) for r in stored["blocks"]] == [(r["key"], r["delta_ns"]) for r in dlrm_diff["blocks"]]
    assert stored["steps"][0]["delta_ns"] == dlrm_diff["steps"][0]["delta_ns"]
    # A stored summary keeps only its top ops: an op missing from one top list is not
    # claimed absent, its change is unknown.
    unlisted = [r for r in stored["ops"] if r["unlisted"]]
    assert unlisted and all(r["delta_ns"] is None and r["only"] is None for r in unlisted)


def test_diff_across_gpus_and_formats():
    from tracekit.compare import diff

    d = diff(QWEN, SGLANG)
    assert (d["base"]["device_key"], d["new"]["device_key"]) == ("H100-SXM", "MI300X")
    assert d["steps"][0]["base"]["time_ns"] == raw_step_ns(QWEN, "ProfilerStep#6")
    # PyTorch's own kernels meet across CUDA and ROCm by label; the vendor GEMMs cannot.
    by_label = {r["key"]["kernel"]: r for r in d["kernels"]}
    assert by_label["elementwise_kernel_with_index<int, arange_cuda_out>"]["only"] is None
    assert {r["only"] for k, r in by_label.items() if k.startswith("sm90_xmma_gemm")} == {"base"}
    assert {r["only"] for k, r in by_label.items() if k.startswith("Cijk_")} == {"new"}
    x = diff(QWEN, NSYS)
    assert x["new"]["format"] == "nsys" and x["base"]["format"] == "kineto"
    # one capture marks a step, the other none: totals are not compared, blocks by share
    assert x["same_steps"] is False and x["normalisation"]["blocks"] == "share of GPU time"
    assert x["totals"][1]["delta"] is None and all(r["delta_ns"] is None for r in x["blocks"])
    for side in ("base", "new"):  # block times still add up to busy time, shares to 1
        assert sum((r[side] or {}).get("time_ns") or 0 for r in x["blocks"]) == pytest.approx(x["totals"][1][side])
        assert sum((r[side] or {}).get("share") or 0 for r in x["blocks"]) == pytest.approx(1)


def test_diff_cli_formats_and_out_dir(tmp_path):
    run = run_cli("diff", RANK0, RANK1, "--format", "json", "--out", tmp_path / "d")
    assert run.returncode == 0, run.stderr
    printed = json.loads(run.stdout)
    assert printed["steps"][0]["delta_ns"] == 18_467_000 - 13_009_000  # GPU windows, as raw_step_ns
    assert json.loads((tmp_path / "d" / "diff.json").read_text()) == printed
    markdown = (tmp_path / "d" / "diff.md").read_text()
    assert "## Phase x block" in markdown and "ncclKernel\\_SendRecv\\_RING\\_SIMPLE\\_Sum\\_int8\\_t" in markdown
    table = run_cli("diff", QWEN, SGLANG, "--top", "3")
    assert table.returncode == 0 and "only in base" in table.stdout and "step[DECODE bs=32]" in table.stdout
    bad = run_cli("diff", RANK0, REPO / "setup.cfg")
    assert bad.returncode == 2 and bad.stderr.startswith("tracekit: error: ") and "Traceback" not in bad.stderr


def write_expect(tmp_path, text):
    path = tmp_path / "expect.toml"
    path.write_text(text)
    return path


def test_check_exit_0_when_all_hold_and_3_when_one_fails(tmp_path):
    step_ms = raw_step_ns(QWEN, "ProfilerStep#6") / 1e6  # 34.892 ms: the gpu_user_annotation ProfilerStep#6
    holds = write_expect(tmp_path, f"[[expect]]\nmax_step_time_ms = {step_ms + 0.01}\nmax_exposed_comm_share = 0.0\n")
    run = run_cli("check", QWEN, "--expect", holds, "--format", "json")
    assert run.returncode == 0, run.stderr
    verdicts = json.loads(run.stdout)["verdicts"]
    assert [v["ok"] for v in verdicts] == [True, True] and verdicts[0]["measured"] == pytest.approx(step_ms)
    fails = write_expect(tmp_path, f"[[expect]]\nmax_step_time_ms = {step_ms - 0.01}\n")
    run = run_cli("check", QWEN, "--expect", fails, "--junit", tmp_path / "junit.xml")
    assert run.returncode == 3 and "FAIL" in run.stdout and "0 of 1 expectations hold" in run.stdout
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == ("1", "1")
    assert "34.8924" in suite.find("testcase/failure").get("message")


def test_check_block_expectations_on_a_stored_summary():
    from tracekit.compare import check

    summary = json.loads((GOLDEN / "torch__h100_qwen1.5-0.5b_hf_inference.json.gz.summary.json").read_text())
    block = next(b for b in summary["blocks"] if (b["phase"], b["block"]) == ("forward", "attention"))
    limits = {"min_efficiency": block["efficiency"], "max_time_ms": block["gpu_time_ns"] / 1e6 - 0.001}
    verdicts = check(summary, [{"block": "forward/attention", **limits}])
    assert [v.ok for v in verdicts] == [True, False]
    assert verdicts[1].measured == block["gpu_time_ns"] / 1e6 and verdicts[1].reason == "above the maximum"


def test_check_a_block_name_alone_spans_every_phase():
    from tracekit.compare import check

    summary = json.loads((GOLDEN / "torch__v100_dlrm_8ranks__rank0.json.gz.summary.json").read_text())
    rows = [b for b in summary["blocks"] if b["block"] == "collective"]
    assert {b["phase"] for b in rows} == {"forward", "backward"}  # DLRM's all_to_all both ways
    share, time_ms = sum(b["share"] for b in rows), sum(b["gpu_time_ns"] for b in rows) / 1e6
    verdicts = check(summary, [{"block": "collective", "max_share": share, "max_time_ms": time_ms - 0.001}])
    assert [(v.measured, v.ok) for v in verdicts] == [(time_ms, False), (pytest.approx(share), True)]


def test_check_unknown_efficiency_fails_even_a_zero_minimum(tmp_path):
    """The MI300X decode trace costs almost none of its attention time (hipGraph launches,
    no op shapes): the efficiency is unknown, and unknown must not pass."""
    expect = write_expect(tmp_path, '[[expect]]\nblock = "decode/attention"\nmin_efficiency = 0.0\n')
    run = run_cli("check", SGLANG, "--expect", expect, "--format", "json")
    assert run.returncode == 3
    (verdict,) = json.loads(run.stdout)["verdicts"]
    assert verdict["measured"] is None and verdict["reason"] == "unknown (coverage 0.0%)"


def test_check_regression_against_a_baseline_summary(tmp_path):
    baseline = GOLDEN / "torch__v100_dlrm_8ranks__rank0.json.gz.summary.json"
    expect = write_expect(tmp_path, "[[expect]]\nmax_regression = 0.05\n")
    run = run_cli("check", RANK1, "--expect", expect, "--baseline", baseline, "--format", "json")
    assert run.returncode == 3
    (verdict,) = json.loads(run.stdout)["verdicts"]
    assert verdict["measured"] == pytest.approx(18_467 / 13_009 - 1)  # step time (GPU window) grew 42.0%
    same = run_cli("check", RANK0, "--expect", expect, "--baseline", baseline)
    assert same.returncode == 0, same.stdout


@pytest.mark.parametrize("text, reason", [
    ("[[expect]]\nmin_efficency = 0.5\n", "unknown key 'min_efficency'"),
    ("[[expect]]\nblock = 'decode/attention'\n", "no limit given"),
    ("[[expect]]\nmax_step_time_ms = 'fast'\n", "max_step_time_ms must be a number"),
    ("[[expect]\n", "not valid TOML"),
    ("[[expect]]\nmax_regression = 0.05\n", "max_regression needs a baseline"),
])
def test_check_bad_expectations_exit_2_with_one_line(tmp_path, text, reason):
    run = run_cli("check", GOLDEN / "torch__h100_bert_small_hf_inference.json.gz.summary.json", "--expect", write_expect(tmp_path, text))
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("tracekit: error: ") and reason in run.stderr


def test_max_regression_without_baseline_names_the_expectations_file(tmp_path):
    """The error named `<expectations>` instead of the file; it is now given before any
    analysis (a trace is not read for a check that cannot run)."""
    expect = write_expect(tmp_path, "[[expect]]\nmin_coverage = 0.0\n[[expect]]\nmax_regression = 0.05\n")
    for subject in (GOLDEN / "torch__h100_bert_small_hf_inference.json.gz.summary.json", tmp_path / "no-such-trace.json"):
        run = run_cli("check", subject, "--expect", expect)
        assert run.returncode == 2, run.stderr
        assert run.stderr == f"tracekit: error: {expect}: expect[1]: max_regression needs a baseline summary (--baseline)\n"
    from tracekit.compare import check
    from tracekit.errors import TraceError

    summary = json.loads((GOLDEN / "torch__h100_bert_small_hf_inference.json.gz.summary.json").read_text())
    with pytest.raises(TraceError, match="max_regression needs a baseline") as caught:
        check(summary, [{"max_regression": 0.05}], source=expect)
    assert caught.value.path == str(expect)


def test_diff_renders_hostile_names_as_text():
    """Op names come from the trace: rich markup, terminal escapes, Markdown and HTML in them
    must reach the reader as the literal characters."""
    from rich.console import Console

    from tracekit.compare import diff
    from tracekit.reports import diff as render

    base = json.loads((GOLDEN / "torch__h100_bert_small_hf_inference.json.gz.summary.json").read_text())
    new = json.loads(json.dumps(base))
    hostile = "[bold red]evil[/] \x1b[2J|<img src=x onerror=alert(1)>*_x_*"
    new["top_ops"][0]["op"] = hostile
    d = diff(base, new)
    console = Console(record=True, width=400, force_terminal=False)
    render.render_console(d, console, top=50)
    text = console.export_text()
    assert "[bold red]evil[/]" in text and "\x1b" not in text
    markdown = render.to_markdown(d, top=50)
    # the one Markdown escape: markup and cell breaks backslashed, HTML as entities, ESC shown as \x1b
    assert "\\[bold red\\]evil\\[/\\] \\\\x1b\\[2J\\|&lt;img src=x onerror=alert(1)&gt;\\*\\_x\\_\\*" in markdown
    (row,) = [line for line in markdown.splitlines() if "evil" in line]
    assert not re.findall(r"(?<!\\)[<>]", row)  # no raw HTML
    assert len(re.findall(r"(?<!\\)\|", row)) == 11  # the ops table's 10 cells, no extra cell break
    assert "\x1b" not in markdown
