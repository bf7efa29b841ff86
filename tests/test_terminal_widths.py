"""At 60, 80, 120 and 200 columns, every table of `analyze`, `diff` and `check` on every shared trace
keeps its answer columns (each Section declares them: priority 0), fits the width, and never
prints two rows the same when their data differ (long text elides in the middle, or wraps
where eliding would make two values look alike). Each trace is analysed once, in-process,
and rendered to a rich Console of the given width."""

from __future__ import annotations

import re

import pytest
from rich.console import Console

from conftest import SHARED
from golden import DEVICES, fixtures

WIDTHS = (60, 80, 120, 200)


@pytest.fixture(scope="module")
def analyses(shared_analysis):
    paths = fixtures()
    return dict(zip((p.name for p in paths), shared_analysis.many([(p, DEVICES.get(p.name)) for p in paths])))


@pytest.fixture(scope="module")
def sections(analyses):
    """_sections, made once for every width (the diffs and checks of every pair of traces):
    what plan/fit read of them must not change them (checked when the module ends)."""
    made = list(_sections(analyses))
    before = repr([(where, s) for where, s in made])
    yield made
    assert repr([(where, s) for where, s in made]) == before, "a width's layout changed a Section"


def _sections(analyses):
    """(where, Section) for every table the three commands print."""
    from tracekit.compare import as_summary, check, diff
    from tracekit.reports import check as check_report, diff as diff_report
    from tracekit.reports.tables import sections

    names = sorted(analyses)
    summaries = {n: as_summary(analyses[n], top=15) for n in names}
    from tracekit.reports.first_screen import blocks_section, causes_section

    for n in names:
        for s in sections(analyses[n], 15):
            if s.terminal:
                yield f"analyze {n}", s
        for s in (causes_section(analyses[n]), blocks_section(analyses[n])):  # the first screen's tables
            if s is not None:
                yield f"analyze {n} (first screen)", s
    # each trace against the next: every diff table with matches, changes and one-side rows
    for a, b in zip(names, names[1:] + names[:1]):
        for s in diff_report.console_sections(diff(summaries[a], summaries[b]), 15):
            yield f"diff {a} {b}", s
        expect = [{"max_step_time_ms": 1}, {"min_coverage": 0.9}, {"max_regression": 0.05}, {"block": "attention", "min_efficiency": 0.5},
                  {"kernel": str((summaries[a]["top_kernels"] or [{"name": "none"}])[0]["name"]), "max_regression": 0.05}]
        yield f"check {b}", check_report.section(check(summaries[b], expect, summaries[a]), str(SHARED / b))


@pytest.mark.parametrize("width", WIDTHS)
def test_every_table_keeps_its_answer_and_tells_rows_apart(sections, width):
    from tracekit.reports.terminal import fit, plan

    checked = 0
    for where, section in sections:
        if not section.rows:
            continue
        layout = plan(section, width)
        kept = [section.head[i] for i in layout.keep]
        assert all(h in kept for h in section.answer), (where, section.title, width, section.answer, kept)
        if layout.records:  # too narrow for the answer side by side: one record per row, every line within the width
            from tracekit.reports.terminal import records

            assert all(line.cell_len <= width for line in records(section, width)), (where, section.title, width)
            checked += 1
            continue
        # no two rows print the same when their data differ
        printed: dict[tuple, tuple] = {}
        for full, shown in zip(section.rows, layout.cells):
            text = tuple(shown[i].plain for i in layout.keep)
            data = tuple(str(c) for c in full)
            assert printed.setdefault(text, data) == data, (where, section.title, width, text)
        console = Console(width=width, record=True, file=open("/dev/null", "w"), force_terminal=False)
        console.print(fit(section, width, plain=True))
        lines = console.export_text().splitlines()
        assert max(len(line.rstrip()) for line in lines) <= width, (where, section.title)
        checked += 1
    assert checked > 100


@pytest.mark.parametrize("width", WIDTHS)
def test_no_number_is_cut(analyses, sections, width):
    """Issue 30: numbers were cut (`456.644 …`) where a table did not fit and rich squeezed
    its columns. A table fits when its planned widths do (rich then prints each column at
    the width given); every number column (right-aligned: not a text column) keeps its
    widest cell, so a number is always printed whole, and text columns give way first."""
    from tracekit.reports.terminal import _table_width, plan

    from tracekit.reports.tables import lead

    checked = 0
    for where, section in sections + [(f"analyze {n}", s) for n in sorted(analyses) for s in lead(analyses[n])]:
        if not section.rows:
            continue
        layout = plan(section, width)
        if layout.records:  # printed as records: every cell whole (the walk below checks the printed text)
            checked += 1
            continue
        assert _table_width([layout.widths[i] for i in layout.keep]) <= width, (where, section.title, width)
        for i in layout.keep:  # numbers, and the short labels a Section keeps whole, are never cut
            if (i in section.left or i == section.flex) and i not in section.whole:
                continue
            widest = max(len(str(row[i])) for row in section.rows)
            assert layout.widths[i] >= widest, (where, section.title, section.head[i], width)
            assert all("…" not in cell[i].plain for cell in layout.cells), (where, section.title, section.head[i])
        for i in layout.keep:  # a flag name (`--samples-per-step`) is never cut: `pass --…per-step`
            for cell in layout.cells:
                shown = cell[i].plain
                assert not re.search(r"--[\w-]*…|…[\w]*-[\w-]*-step", shown), (where, section.title, shown)
        checked += 1
    assert checked > 100


# A value cut inside: an ellipsis against a number (`19.861 …`, `26,…`, `14.45…`,
# `[[8944, 1024…024, 2816]]`, a range written `10,510.86…10,510.86`), or an ellipsis inside a
# shape list (cut with "+N more"). A label's left-out arguments after a whole one
# (`<float, 128, …>`) are not a cut number.
_CUT_NUMBER = re.compile(r"\d[.,]?…|\d …|…[.,]?\d")
_CUT_SHAPE = re.compile(r"\[[\d, \[\]]*…")


def _cuts(text: str) -> list[str]:
    return [line for line in text.splitlines() if _CUT_NUMBER.search(line) or _CUT_SHAPE.search(line)]


@pytest.mark.parametrize("width", WIDTHS)
def test_no_value_is_cut_in_any_printed_report(analyses, width):
    """Issue 40: walk what a user reads, every fixture at 60, 80, 120 and 200 columns: the whole
    `analyze` report (headline, tables, notes), `info`, and `project` (throughput and its range):
    no number or shape is cut inside its value, no line is wider than the terminal."""
    import io

    from tracekit.reports.analyze import render_console
    from tracekit.reports.info import render_console as info_console

    def console(out):
        return Console(file=out, width=width, force_terminal=False, markup=False, emoji=False, highlight=False, soft_wrap=False)

    for name, a in sorted(analyses.items()):
        out = io.StringIO()
        render_console(a, console(out), 15)
        text = out.getvalue()
        assert not _cuts(text), (name, width, _cuts(text)[:3])
        assert max(len(line) for line in text.splitlines()) <= width, (name, width)
    from tracekit.trace.inventory import inventory
    from tracekit.api import scan

    for path in [SHARED / "torch" / "h100_qwen1.5-0.5b_hf_inference.json.gz",
                 SHARED / "torch" / "h200_llama3-8b_cudagraph_decode_bs16_execution_zero_kernel_times.json.gz"]:
        out = io.StringIO()
        info_console(inventory(scan(path, workers=1)), console(out))
        assert not _cuts(out.getvalue()), (path.name, width, _cuts(out.getvalue())[:3])


@pytest.fixture(scope="module")
def projected(analyses):
    from tracekit.projection.run import project

    name = "b200_vllm_tp8_rank0_eager.json.gz"
    return project(SHARED / "torch" / name, "H100", analysis=analyses[name])


@pytest.mark.parametrize("width", WIDTHS)
def test_project_writes_ranges_with_a_dash_and_cuts_no_rate(projected, width):
    """`project` printed "10,510.86 (10,510.86…" (a cut) and "18.863 ms…18.868 ms" (a range
    that reads like a cut): ranges are "18.863–18.868 ms", rates abbreviate their unit."""
    import io

    from tracekit.reports.projection import render_console

    out = io.StringIO()
    render_console(projected, Console(file=out, width=width, force_terminal=False, markup=False, emoji=False, highlight=False))
    text = out.getvalue()
    assert not _cuts(text), (width, _cuts(text)[:3])
    assert "–" in text and "tokens/s" in text


def test_cut_keeps_values_whole():
    """common.format.cut: a shape at an element boundary with the count left out, a name
    between separators, a figure never."""
    from tracekit.common.format import cut, span

    shape = "[[16, 559, 16, 64], [16, 559, 16, 64], [16, 559, 16, 64], [], [], []]"
    assert cut(shape, 40) == "[[16, 559, 16, 64], +5 more]"
    assert cut(shape, 26) == "[[16, +3 more], +5 more]"
    assert cut("[[8944, 1024], [1024, 2816]]", 25) == "[[8944, 1024], +1 more]"
    assert cut("256,330.74 tokens/s", 8) == "256,330.74 tokens/s"
    name = cut("elementwise_kernel<128, 4, direct_copy_kernel_cuda>", 24)
    assert len(name) <= 24 and name.startswith("elementwise_") and name.endswith("_cuda>")
    assert span(18_863_000, 18_868_000) == "18.863–18.868 ms"


def test_two_shapes_that_differ_in_the_middle_never_print_the_same():
    """Eliding `[[8192, 2432], ...]` at its end made two aten::mm rows look identical."""
    from tracekit.reports.section import Section
    from tracekit.reports.terminal import plan

    a, b = "[[8192, 2432], [2432, 7296], [7296]]", "[[8192, 2432], [2432, 9728], [7296]]"
    s = Section("ops", ["op", "input shapes", "time"], [["aten::mm", a, "1.000 ms"], ["aten::mm", b, "2.000 ms"]], [0, 0, 0],
                flex=1, left=(0, 1))
    layout = plan(s, 40)
    shown = [row[1].plain for row in layout.cells]
    assert shown[0] != shown[1] and 1 in layout.wrap  # they differ only in the middle: the column wraps
    c = Section("ops", ["op", "input shapes", "time"], [["aten::mm", a, "1.000 ms"], ["aten::mm", a[:-1] + ", [1]]", "2.000 ms"]],
                [0, 0, 0], flex=1, left=(0, 1))
    layout = plan(c, 40)
    assert 1 in layout.wrap  # cut at an element boundary ("+N more") they read the same: the column wraps
    from rich.text import Text
    from tracekit.reports.terminal import elide_middle

    # a shape is cut at an element boundary, with the count of what is left out
    assert elide_middle(Text(a), 30).plain == "[[8192, 2432], +2 more]"
    assert elide_middle(Text("[[8192, 2432, 7296, 9728], [1]]"), 28).plain == "[[8192, +3 more], +1 more]"


@pytest.mark.parametrize("width", (80, 120))
def test_devices_prints_every_key_and_name_whole_one_line_each(width):
    """`tracekit devices` cut the GPU names (`NVIDIA A10…SXM4 40GB`) and wrapped each source
    over 6 lines: the key (what --device takes) stays whole on one line, and the name too at
    120 columns; the sources give way first (they are in devices.toml). At 80 columns a name
    cut at a word boundary would print two GPUs the same (`NVIDIA A100 … 80GB`): it wraps,
    whole, onto a second line (issue 40: a name is never cut inside a word)."""
    import io

    from tracekit.hardware import builtin_devices
    from tracekit.reports.devices import render_devices

    devices = builtin_devices()
    out = io.StringIO()
    render_devices(devices, Console(file=out, width=width, force_terminal=False))
    lines = out.getvalue().splitlines()
    table = [[c.strip() for c in line.strip("|").split("|")] for line in lines if line.startswith("| ") and "key" not in line]
    rows: list[list[str]] = []
    for cells in table:  # a line with an empty key continues the row above (a wrapped name)
        if cells[0]:
            rows.append(cells)
        else:
            rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells)]
    assert len(rows) == len(devices)
    assert all(len(line) <= width for line in lines)
    for d, cells in zip(devices.values(), rows):
        assert cells[0] == d.key and cells[1] == d.name and "…" not in cells[1]
    assert width < 120 or len(table) == len(devices)  # at 120, one line each


@pytest.fixture(scope="module")
def dlrm_ranks():
    from tracekit.ranks.executor import analyze_ranks

    return analyze_ranks([str(SHARED / "torch" / "v100_dlrm_8ranks")], workers=1)


@pytest.mark.parametrize("width", (80, 120))
def test_multi_rank_tables_keep_the_answer_and_cut_no_number(dlrm_ranks, width):
    """The per-rank table dropped exposed communication, waited and GPU busy at 120 columns:
    its answer (step time, exposed communication, waited, made others wait) comes first and
    stays at any width, and no number in any of its tables is cut."""
    import io
    import re

    from tracekit.reports.ranks import render_console

    out = io.StringIO()
    render_console(dlrm_ranks, Console(file=out, width=width, force_terminal=False))
    text = out.getvalue()
    table = text[text.index("\nPer rank") + 1:]
    head = table.splitlines()[2]
    for column in ("rank", "step time", "vs median", "exposed comm", "waited", "made others wait"):
        assert f" {column} " in head, (width, head)
    assert ("GPU busy" in head) == (width >= 120)
    cells = [c.strip() for line in text.splitlines() if line.startswith("|") for c in line.strip("|").split("|")]
    assert not [c for c in cells if re.search(r"\d…|…$", c)], width
