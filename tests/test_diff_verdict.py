"""diff (issue 30, point 5): one verdict line first; GPU idle, throughput and iterations in
the comparison; no empty unlabelled column, no "Run (totals: total)"; the op and kernel
per-call figures say why they differ."""

from __future__ import annotations

import copy
import io

import pytest
from rich.console import Console

import tracekit
from conftest import shared


@pytest.fixture(scope="module")
def bert_summary():
    from tracekit.compare import as_summary

    return as_summary(tracekit.analyze(shared("torch", "h100_bert_small_hf_inference.json.gz"), workers=1), top=15)


def _slower_by_idle(s: dict, factor: float) -> dict:
    """The same run with every idle row of its ranked list `factor` times longer (the
    denominator grown by the added idle) and throughput down in proportion."""
    n = copy.deepcopy(s)
    fix = n["what_to_fix_first"]
    added = 0.0
    for c in fix["causes"]:
        if c["cause"].startswith("idle_"):
            added += c["time_ns"] * (factor - 1)
            c["time_ns"] *= factor
    fix["denominator_ns"] += added
    n["throughput"]["total"]["throughput"] *= s["what_to_fix_first"]["denominator_ns"] / fix["denominator_ns"]
    return n


def test_idle_and_throughput_are_compared_and_decide_the_verdict(bert_summary):
    from tracekit.compare.diff import diff_summaries
    from tracekit.reports.diff import verdict_line

    b = bert_summary
    n = _slower_by_idle(b, 1.5)
    d = diff_summaries(b, n)
    totals = {r["metric"]: r for r in d["totals"]}
    idle_b = sum(c["time_ns"] for c in b["what_to_fix_first"]["causes"] if c["cause"].startswith("idle_"))
    share_b = idle_b / b["what_to_fix_first"]["denominator_ns"]
    assert totals["gpu_idle_share"]["base"] == pytest.approx(share_b)  # BERT: 4.116 / 4.426 ms = 93%
    assert totals["gpu_idle_share"]["new"] == pytest.approx(1.5 * idle_b / (b["what_to_fix_first"]["denominator_ns"] + 0.5 * idle_b))
    assert totals["throughput"]["ratio"] < 0.9 and totals["iterations"]["base"] == totals["iterations"]["new"] == 1
    line = verdict_line(d)
    # the step times are equal (the same steps), yet the run is worse: idle up, throughput down
    assert line.startswith("verdict: worse (GPU idle, throughput worse)"), line
    same = verdict_line(diff_summaries(b, copy.deepcopy(b)))
    assert same.startswith("verdict: within noise"), same


def test_console_and_markdown_lead_with_the_verdict_and_label_every_column(bert_summary):
    from tracekit.compare.diff import diff_summaries
    from tracekit.reports import diff as report

    d = diff_summaries(bert_summary, _slower_by_idle(bert_summary, 1.5))
    out = io.StringIO()
    report.render_console(d, Console(file=out, width=120), 15)
    text = out.getvalue()
    assert text.startswith("verdict: worse")
    assert "Run (totals: total)" not in text and "(totals: " not in text
    for title, head, rows, _ in report.sections(d, 15):
        assert all(h.strip() for h in head), (title, head)  # no unlabelled column
        for i in range(len(head)):
            if rows and head[i] == "note":
                assert any(row[i] for row in rows), title  # no empty one
    md = report.to_markdown(d)
    assert md.splitlines()[2].startswith("**verdict: worse")
    titles = [t for t, *_ in report.sections(d, 15)]
    assert any(t.startswith("Ops by") and "sum of every kernel it launched" in t for t in titles)
