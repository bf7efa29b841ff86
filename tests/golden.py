"""Golden summaries: each shared fixture's summary.json, stored under tests/golden/.

Regenerate after an intended change (and review the diff before committing):

    python tests/golden.py      # = python -m pytest tests/test_golden.py --tracekit-update-goldens
"""

from __future__ import annotations

import json
import math
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
GOLDEN = HERE / "golden"
SHARED = HERE.parent.parent / "shared" / "fixtures"
# Exports that do not name their GPU are analysed on the GPU their README gives.
DEVICES = {"h100x2_fsdp_emit_nvtx_nsys2026.2.sqlite": "H100-SXM"}
TOP = 10


def fixtures() -> list[pathlib.Path]:
    if not SHARED.is_dir():
        return []  # the tests that use them skip (conftest.pytest_runtest_setup) or fail under CI
    return sorted(SHARED.glob("torch/**/*.json.gz")) + sorted(SHARED.glob("nsys/*.sqlite"))


def golden_name(path: pathlib.Path) -> str:
    rel = path.relative_to(SHARED).as_posix().replace("/", "__")
    return rel + ".summary.json"


def summary(path: pathlib.Path, analysis=None) -> dict:
    """The golden form of a fixture's summary.json; `analysis`: its Analysis, if already made
    (on DEVICES' device)."""
    import tracekit
    from tracekit.reports import summary_json

    a = analysis if analysis is not None else tracekit.analyze(path, device=DEVICES.get(path.name))
    out = summary_json.summary(a, TOP)  # what summary.json holds, the headline's words included
    out["trace"]["path"] = path.relative_to(SHARED).as_posix()  # machine-independent
    capture = out.get("capture") or {}
    if capture.get("path"):  # a self-paired capture names the trace itself: the same treatment
        capture["path"] = _relative_to_shared(capture["path"])
    return _rounded(json.loads(json.dumps(out, default=str)))


def _relative_to_shared(name: str) -> str:
    """A path under the shared fixtures, as the goldens store it on every machine."""
    try:
        return pathlib.Path(name).resolve().relative_to(SHARED.resolve()).as_posix()
    except ValueError:
        return name


def _rounded(value):
    """Floats to 9 significant digits: the goldens hold numbers, not float noise."""
    if isinstance(value, float):
        return float(f"{value:.9g}") if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def main() -> int:
    """Rewrite the goldens through the test itself, so the files are exactly what it compares."""
    import pytest

    return pytest.main(["-q", str(HERE / "test_golden.py"), "--tracekit-update-goldens"])


if __name__ == "__main__":
    sys.exit(main())
