"""report.html in a real browser: headless Chromium renders it, the headline, the tables and
plots are there, and a kernel named like a script tag stays text.

Without Chromium these tests are skipped, with the reason; `.ci/run` installs Debian's
chromium and sets TRACEKIT_REQUIRE_BROWSER=1, which turns that skip into a failure."""

from __future__ import annotations

import os
import shutil
import re
import subprocess

import numpy as np
import pytest

import tracekit
from tracekit.analysis import build
from tracekit.api import device_name
from tracekit.hardware import resolve
from conftest import shared
from tracekit.reports.bundle import write_bundle

BROWSER = 'renders report.html in headless Chromium (a browser start per test)'

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not path:
        reason = "no Chromium found (chromium, chromium-browser or google-chrome on PATH): apt-get install chromium"
        if os.environ.get("TRACEKIT_REQUIRE_BROWSER") == "1":
            pytest.fail(reason + "; TRACEKIT_REQUIRE_BROWSER=1 requires it")
        pytest.skip(reason)
    return path


@pytest.fixture(scope="module")
def report(html):
    _chromium()
    return html


@pytest.fixture(scope="module")
def html(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle")
    # The hostile name goes in before the analysis, so it reaches every table built from it
    # (the kernel summary is computed once, inside build).
    trace = tracekit.load(shared("torch", "h100_bert_small_hf_inference.json.gz"))
    k = trace.kernels
    top = (k["end"] - k["start"]).groupby(k["name"], observed=True).sum().idxmax()
    k["name"] = k["name"].cat.rename_categories({top: "<script>alert(1)</script>"})
    spec, _ = resolve(device_name(trace), None, None)
    write_bundle(build(trace, spec), str(out), top=20)
    return out / "report.html"


def _run(args: list[str], tmp_path) -> subprocess.CompletedProcess:
    profile = tmp_path / "profile"
    return subprocess.run([_chromium(), *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.slow(reason=BROWSER)
def test_dom_has_the_tables_and_the_name_stays_text(report, tmp_path):
    dom = _run(["--dump-dom", report.as_uri()], tmp_path).stdout
    assert dom.count("<table>") >= 5  # blocks, devices, steps, kernels, ops
    # the headline comes first, then the ranked list of causes (the first table), then the rest
    body = dom[dom.index("<body>"):]
    assert body.index('class="headline"') < body.index("<table>")
    first = body[body.index("<table>"):body.index("</table>")]
    assert body.index("What to fix first: every cause") < body.index("<table>") < body.index("coverage: ")
    # BERT: the GPU idles 3.598 ms of the step's 4.426 ms wall time waiting for the host
    assert "<td>1</td><td class=\"t\">GPU idle: host late to launch</td>" in first and "3.598 ms" in first
    assert "GPU time went to" in body and "Recoverable kernel time by op" in body
    assert "Collectives" in body and "Compute / communication overlap" in body
    assert "Overhead no roofline shows" in body
    assert "<script" not in dom.lower()  # no script element was created from the kernel name
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom  # it is shown, as text
    assert dom.count('src="data:image/png;base64,') == 2


@pytest.mark.slow(reason=BROWSER)
def test_screenshot_shows_tables_and_plots(report, tmp_path):
    import matplotlib.image as mpimg

    png = tmp_path / "shot.png"
    _run([f"--screenshot={png}", "--window-size=1400,3200", report.as_uri()], tmp_path)
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = mpimg.imread(str(png))[..., :3]
    ink = (pixels < 0.9).any(axis=2).mean()
    assert ink > 0.03  # text, table borders and plots, not a blank page
    # the plots' colours: matplotlib's orange (block points) and red (compute ceilings)
    orange = (np.abs(pixels - np.array([1.0, 0.5, 0.055])) < 0.12).all(axis=2).sum()
    red = (np.abs(pixels - np.array([0.84, 0.15, 0.16])) < 0.12).all(axis=2).sum()
    assert orange > 100 and red > 100


def test_the_hostile_name_is_escaped_in_the_file_and_no_script_may_run(html):
    """Without a browser: the file as written. The hostile kernel name is text (escaped
    wherever it appears, never a tag), and the page's policy allows no script at all."""
    text = html.read_text()
    assert "<script>alert(1)</script>" not in text
    assert text.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 1
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', text)
    assert policy is not None, "report.html has no Content-Security-Policy"
    assert "default-src 'none'" in policy.group(1) and "script-src" not in policy.group(1), policy.group(1)

