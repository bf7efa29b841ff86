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


@pytest.fixture(scope="module")
def twin():
    """The README's first trace: prefill and decode, 11 blocks, 8 top ops."""
    import pathlib

    return tracekit.analyze(pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "gpu" / "h100" /
                            "h10080gbhbm3_llama3-8b_4layers_prefill1x512_decode_bs16_ncu_twin.json.gz", workers=1)


def _drawn(fig):
    fig.canvas.draw()
    return fig.canvas.get_renderer()


@pytest.mark.parametrize("name", ["bert", "twin"])
def test_breakdown_legend_is_beside_the_bars_never_on_them(name, request):
    """Issue 40: the legend covered the bars (ffn, memory and norm hidden). It now sits right
    of the axes: no bar's box meets the legend's, and the legend is inside the image."""
    from matplotlib.patches import Rectangle

    from tracekit.reports.plots import breakdown_figure

    fig = breakdown_figure(request.getfixturevalue(name))
    renderer = _drawn(fig)
    (legend,) = fig.legends
    box = legend.get_window_extent(renderer)
    bars = [p for ax in fig.axes for p in ax.patches if isinstance(p, Rectangle) and p.get_width() > 0]
    assert len(bars) >= 3
    assert not any(box.overlaps(p.get_window_extent(renderer)) for p in bars)
    assert not any(box.overlaps(ax.get_window_extent(renderer)) for ax in fig.axes)
    assert fig.bbox.x1 >= box.x1 and fig.bbox.y0 <= box.y0 and all(t.get_fontsize() >= 8 for t in legend.get_texts())


def test_every_roofline_marker_is_named_in_the_key_beside_the_plot(twin):
    """Issue 40: the roofline's key was tiny text and its shapes were cut mid-number
    (`aten::bmm [[32, 1536, 2048], [3…`). Every point carries a number (B1.. blocks, O1..
    ops) and each number has one line in the key, at a readable size, outside the axes;
    shapes are cut at an element boundary."""
    from matplotlib.text import Annotation

    from tracekit.reports.plots import roofline_figure

    fig = roofline_figure(twin)
    renderer = _drawn(fig)
    (ax,) = fig.axes
    marks = [t.get_text() for t in ax.texts if isinstance(t, Annotation)]
    blocks = twin.blocks[(twin.blocks["flops"] > 0) & (twin.blocks["bytes"] > 0)]
    assert sorted(marks) == sorted([f"B{i + 1}" for i in range(len(blocks))] + [f"O{i + 1}" for i in range(8)])
    (key,) = [t for t in fig.texts if t.get_gid() == "roofline-key"]
    lines = key.get_text().splitlines()
    assert sorted(line.split()[0] for line in lines) == sorted(marks)
    assert key.get_fontsize() >= 8 and all(t.get_fontsize() >= 8 for t in ax.texts if isinstance(t, Annotation))
    assert not key.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))
    assert key.get_window_extent(renderer).x1 <= fig.bbox.x1
    assert not any(re.search(r"\d…|…\d|\[[\d, \[\]]*…", line) for line in lines)
    # O1 is the top op: its line names it with its shapes, whole where they fit
    top = twin.ops.iloc[0]
    assert lines[len(blocks)] == f"O1  {top['op']} {top['shapes']}"


def test_a_trace_with_no_costs_says_nothing_to_plot():
    """Issue 40: nsys without shapes drew an empty log-log box: now one line says why."""
    from tracekit.reports.plots import NOTHING_TO_PLOT, roofline_figure

    a = tracekit.analyze(shared("nsys", "h100x2_fsdp_emit_nvtx_nsys2026.2.sqlite"), device="H100", workers=1)
    assert not (a.blocks["flops"] > 0).any()
    fig = roofline_figure(a)
    assert not fig.axes and NOTHING_TO_PLOT in [t.get_text() for t in fig.texts]
