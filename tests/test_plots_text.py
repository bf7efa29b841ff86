"""The plots' text renders right (issue 30, point 1): log-axis ticks are math text
(`$\\mathdefault{10^{2}}$`) that must be rendered, never printed raw; the breakdown chart
shows GPU idle, the main finding on many traces, in the ranked list's own figures."""

from __future__ import annotations

import re

import pytest

import tracekit
from conftest import shared


@pytest.fixture(scope="module")
def bert():
    return tracekit.analyze(shared("torch", "h100_bert_small_hf_inference.json.gz"), workers=1)


def _svg(render, a) -> str:
    import matplotlib

    # text as <text> elements (not glyph paths), so the test reads what is drawn
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        return render(a, fmt="svg").decode()


def _texts(svg: str) -> list[str]:
    return re.findall(r"<text[^>]*>([^<]*)</text>", svg)


def test_roofline_ticks_are_rendered_not_raw_math(bert):
    from tracekit.reports.plots import roofline_png

    svg = _svg(roofline_png, bert)
    texts = _texts(svg)
    # with math text off, each tick is a <text> holding `$\mathdefault{10^{2}}$` itself;
    # rendered, it is drawn as glyphs, its source left only in an SVG comment
    assert texts and not any("mathdefault" in t or "$" in t for t in texts)
    assert "<!-- $\\mathdefault{10^{2}}$ -->" in svg


def test_breakdown_shows_idle_by_cause(bert):
    """BERT: 3.598 ms idle inside the step (host late to launch) and 0.459 + 0.060 ms
    before/after its kernels: the idle bar is labelled and its parts are the ranked list's."""
    from tracekit.reports.plots import _idle_by_cause, breakdown_png

    idle = _idle_by_cause(bert)
    assert idle["GPU idle: host late to launch"] == pytest.approx(3.598, rel=1e-3)
    total = sum(c["time_ns"] for c in bert.findings.causes if c["cause"].startswith("idle_")) / 1e6
    assert sum(idle.values()) == pytest.approx(total)
    texts = _texts(_svg(breakdown_png, bert))
    assert "GPU idle" in texts and any(t.startswith("idle: GPU idle: host late to launch") for t in texts)
    assert not any("mathdefault" in t for t in texts)


def test_a_dollar_in_a_trace_name_is_drawn_literally():
    from tracekit.reports.plots import _literal

    assert _literal(r"op$\x$") == r"op\$\x\$"
