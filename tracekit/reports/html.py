"""report.html: one self-contained file (inline CSS, images as data URIs, no network).

Every string from a trace passes through text.html (escaped, control characters shown),
and Jinja autoescapes the rest: a kernel named `<script>alert(1)</script>` is shown as text.
A kernel's cell carries its full demangled name in its title attribute."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING

from jinja2 import Environment, select_autoescape

from tracekit.analysis import Analysis
from tracekit.reports.lines import capture_line, coverage_line, device_line, roofline_line
from tracekit.common.format import duration
from tracekit.reports.tables import headline, lead, sections
from tracekit.reports.text import html as h

if TYPE_CHECKING:
    from tracekit.reports.renderer import RenderOptions

_TEMPLATE = """{% macro table(s) %}
<h2>{{ s.title }}</h2>
{% if s.rows %}<table><thead><tr>{% for h in s.head %}<th{% if loop.index0 in s.left %} class="t"{% endif %}>{{ h }}</th>{% endfor %}</tr></thead>
<tbody>{% for row in s.rows %}<tr>{% for text, full in row %}<td{% if loop.index0 in s.left %} class="t"{% endif %}{% if full %} title="{{ full }}"{% endif %}>{{ text }}</td>{% endfor %}</tr>{% endfor %}</tbody></table>
{% if s.note %}<p class="note">{{ s.note }}</p>{% endif %}
{% else %}<p>{{ s.empty }}</p>{% endif %}
{% endmacro %}<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src data:; style-src 'unsafe-inline'">
<title>tracekit: {{ path }}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f3f3f3; } td.t, th.t { text-align: left; } td:not(.t) { white-space: nowrap; }
.meta li { margin: 2px 0; } img { max-width: 100%; border: 1px solid #ddd; margin: 8px 0; }
.warn { color: #a50; } .headline { font-size: 15px; max-width: 60em; } .note { color: #555; }
</style></head><body>
<h1>tracekit report</h1>
<p class="headline">{% for s in headline %}{{ s }}{% if not loop.last %}<br>{% endif %}{% endfor %}</p>
{% for s in lead %}{{ table(s) }}{% endfor %}
<ul class="meta">
<li>trace: <code>{{ path }}</code> ({{ fmt }}, span {{ span }})</li>
<li>{{ device }}</li>
<li>{{ coverage }}</li>
{% if capture %}<li>{{ capture }}</li>{% endif %}
<li>{{ roofline }}</li>
{% for w in warnings %}<li class="warn">warning: {{ w }}</li>{% endfor %}
</ul>
{% for title, png in images %}<img alt="{{ title }}" src="data:image/png;base64,{{ png }}">{% endfor %}
{% for s in sections %}{{ table(s) }}{% endfor %}
</body></html>
"""

_ENV = Environment(autoescape=select_autoescape(default=True, default_for_string=True))


def _section(s) -> dict:
    rows = [[(h(c), h(getattr(c, "full", "")) or None) for c in row] for row in s.rows]
    # text columns (names, shapes, where) left-aligned, figures right-aligned: the Section says which
    left = {*s.left, s.flex} - {-1}
    return {"title": h(s.title), "head": [h(x) for x in s.head], "rows": rows, "note": h(s.note), "empty": h(s.empty), "left": left}


def render(a: Analysis, options: RenderOptions) -> str:
    images, top = options.images, options.top
    return _ENV.from_string(_TEMPLATE).render(
        path=h(a.meta.get("path")), fmt=h(a.meta.get("format")), span=duration(a.meta.get("span_ns")),
        headline=[h(x) for x in headline(a)], device=h("device: " + device_line(a)),
        coverage=h("coverage: " + coverage_line(a)) if len(a.kernels) else "",
        capture=h("capture: " + captured) if (captured := capture_line(a)) is not None else "",
        roofline=h("roofline: " + roofline_line(a)) if a.device else "",
        warnings=[h(w) for w in a.warnings],
        images=[(name, base64.b64encode(png).decode("ascii")) for name, png in images.items()],
        lead=[_section(s) for s in lead(a)], sections=[_section(s) for s in sections(a, top)],
    )
