"""`tracekit check`: each expectation, its limit, the measured value and the verdict."""

from __future__ import annotations

from tracekit.compare.check import Verdict
from tracekit.common.format import UNKNOWN
from tracekit.strict_json import dumps



def _measured(v: Verdict) -> str:
    if v.measured is None:
        return UNKNOWN
    return f"{v.measured:,.3f} ms" if v.unit == "ms" else f"{v.measured:.4g}"


def rows(verdicts: list[Verdict]) -> tuple[list[str], list[list[str]]]:
    head = ["expectation", "limit", "measured", "verdict", "why"]
    return head, [[v.expectation, v.limit, _measured(v), "PASS" if v.ok else "FAIL", v.reason] for v in verdicts]


def summary_line(verdicts: list[Verdict]) -> str:
    failed = sum(not v.ok for v in verdicts)
    return f"{len(verdicts) - failed} of {len(verdicts)} expectations hold" + (f"; {failed} failed" if failed else "")


def to_json(verdicts: list[Verdict], source: str) -> str:
    return dumps({"source": source, "ok": all(v.ok for v in verdicts), "verdicts": [v.to_dict() for v in verdicts]})


def to_markdown(verdicts: list[Verdict], source: str) -> str:
    from tracekit.reports.text import markdown as esc, markdown_table

    head, body = rows(verdicts)
    lines = [f"# tracekit check: {esc(source)}", "", summary_line(verdicts), "", *markdown_table(head, body)]
    return "\n".join(lines) + "\n"


def section(verdicts: list[Verdict], source: str):
    """The verdicts as a Section: every column is the answer (the why elides or wraps)."""
    from tracekit.reports.section import Section

    head, body = rows(verdicts)
    text = tuple(i for i, h in enumerate(head) if h != "measured")
    return Section(f"tracekit check: {source}", head, body, [0] * len(head), flex=0, left=text, wrap=(len(head) - 1,))


def render_console(verdicts: list[Verdict], console, source: str) -> None:
    from tracekit.reports.terminal import print_section
    from tracekit.reports.text import terminal

    print_section(section(verdicts, source), console)
    console.print(terminal(summary_line(verdicts)))


def junit_xml(verdicts: list[Verdict], source: str) -> bytes:
    """JUnit XML (one testcase per limit) for CI systems: every text (an expectation, a path,
    a reason quoting a trace's name) through text.xml_text, so the file parses whatever it holds."""
    import xml.etree.ElementTree as ET

    from tracekit.reports.text import xml_text as x

    failures = sum(not v.ok for v in verdicts)
    suites = ET.Element("testsuites", tests=str(len(verdicts)), failures=str(failures))
    suite = ET.SubElement(suites, "testsuite", name=x(f"tracekit check {source}"), tests=str(len(verdicts)), failures=str(failures), errors="0")
    for v in verdicts:
        case = ET.SubElement(suite, "testcase", classname="tracekit.check", name=x(f"{v.expectation} {v.limit}"))
        if not v.ok:
            measured = "unknown" if v.measured is None else f"{v.measured:.6g}"
            failure = ET.SubElement(case, "failure", message=x(f"measured {measured}: {v.reason}"))
            failure.text = x(f"{v.expectation}: expected {v.limit}, measured {measured} ({v.reason})")
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True)
