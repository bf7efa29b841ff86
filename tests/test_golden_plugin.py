"""The pytest plugin's goldens (issue 22): a relative golden path is taken from the test
file's directory, the trace path is stored relative to the golden file (the golden passes
after the repository moves), and golden files get the user's umask."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib.metadata import entry_points

TEST = '''
def test_golden(tracekit_golden):
    import os
    here = os.path.dirname(os.path.abspath(__file__))
    summary = {"schema_version": 2, "trace": {"path": os.path.join(here, "traces", "t.json.gz"), "format": "kineto"},
               "blocks": [{"block": "ffn", "gpu_time_ns": 1000.0}]}
    tracekit_golden(summary, "golden/t.summary.json")
'''


def _pytest(cwd, *args):
    installed = any(ep.value == "tracekit.integrations.pytest_plugin" for ep in entry_points(group="pytest11"))
    plugin = [] if installed else ["-p", "tracekit.integrations.pytest_plugin"]
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, preexec_fn=lambda: os.umask(0o022))


def test_golden_is_relative_portable_and_umasked(tmp_path):
    project = tmp_path / "first" / "project"
    (project / "tests").mkdir(parents=True)
    (project / "tests" / "test_it.py").write_text(TEST)
    elsewhere = tmp_path  # run from another directory: the path is the test file's, not the cwd's
    proc = _pytest(elsewhere, str(project / "tests" / "test_it.py"), "--tracekit-update-goldens")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    golden = project / "tests" / "golden" / "t.summary.json"
    stored = json.loads(golden.read_text())
    assert stored["trace"]["path"] == "../traces/t.json.gz"  # tests/golden -> tests/traces
    assert golden.stat().st_mode & 0o777 == 0o644  # 0666 & ~0022, not mkstemp's 0600
    moved = tmp_path / "second" / "copy"
    moved.parent.mkdir()
    shutil.move(str(project), str(moved))
    proc = _pytest(moved, "tests/test_it.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # and a real change is still caught
    text = (moved / "tests" / "test_it.py").read_text().replace("1000.0", "2000.0")
    (moved / "tests" / "test_it.py").write_text(text)
    proc = _pytest(moved, "tests/test_it.py")
    assert proc.returncode == 1 and "golden 1000.0, now 2000.0" in proc.stdout, proc.stdout
