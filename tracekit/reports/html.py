"""report.html: one self-contained file (inline CSS, images as data URIs, no network).

Every name from a trace passes through Jinja's autoescaping: a kernel named
`<script>alert(1)</script>` is shown as text."""

from __future__ import annotations

import base64

from jinja2 import Environment, select_autoescape

from tracekit.analysis import Analysis
from tracekit.reports.analyze import coverage_line, device_label
from tracekit.reports.format import duration
from tracekit.reports.tables import sections

_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src data:; style-src 'unsafe-inline'">
<title>tracekit: {{ path }}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f3f3f3; } td:first-child, td:nth-child(2) { text-align: left; }
.meta li { margin: 2px 0; } img { max-width: 100%; border: 1px solid #ddd; margin: 8px 0; }
.warn { color: #a50; }
</style></head><body>
<h1>tracekit report</h1>
<ul class="meta">
<li>trace: <code>{{ path }}</code> ({{ fmt }}, span {{ span }})</li>
<li>device: {{ device }}</li>
<li>{{ coverage }}</li>
{% for w in warnings %}<li class="warn">warning: {{ w }}</li>{% endfor %}
</ul>
{% for title, png in images %}<img alt="{{ title }}" src="data:image/png;base64,{{ png }}">{% endfor %}
{% for title, head, rows in sections %}
<h2>{{ title }}</h2>
{% if rows %}<table><thead><tr>{% for h in head %}<th>{{ h }}</th>{% endfor %}</tr></thead>
<tbody>{% for row in rows %}<tr>{% for c in row %}<td>{{ c }}</td>{% endfor %}</tr>{% endfor %}</tbody></table>
{% else %}<p>(none)</p>{% endif %}
{% endfor %}
</body></html>
"""

_ENV = Environment(autoescape=select_autoescape(default=True, default_for_string=True))


def render(a: Analysis, images: dict[str, bytes], top: int = 15) -> str:
    return _ENV.from_string(_TEMPLATE).render(
        path=a.meta.get("path"), fmt=a.meta.get("format"), span=duration(a.meta.get("span_ns")),
        device=device_label(a),
        coverage=coverage_line(a).replace("coverage    ", "coverage: "), warnings=a.warnings,
        images=[(name, base64.b64encode(png).decode("ascii")) for name, png in images.items()],
        sections=sections(a, top),
    )
