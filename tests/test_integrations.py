"""torch.profiler handler, MLflow logging and the pytest plugin, each through the real thing:
a torch.profiler capture, a local MLflow tracking store read back with MLflow's own client,
and an inner pytest run."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, raw_step_ns, shared
from helpers import run_cli

QWEN = shared("torch", "h100_qwen1.5-0.5b_hf_inference.json.gz")


def test_on_trace_ready_writes_the_trace_and_its_bundle(tmp_path):
    torch = pytest.importorskip("torch", reason="torch records the capture (pip install -e '.[test]')")
    import tracekit.profiler

    handler = tracekit.profiler.on_trace_ready(tmp_path, worker_name="w")
    a, b = torch.randn(64, 32), torch.randn(32, 16)
    schedule = torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule,
                                on_trace_ready=handler, record_shapes=True) as prof:
        for _ in range(5):
            for _ in range(3):
                torch.mm(a, b)
            prof.step()
    (capture,) = handler.wait(timeout=300)
    assert capture.returncode == 0, capture.log
    assert capture.trace == str(tmp_path / "w.step4.pt.trace.json.gz") and os.path.isdir(capture.bundle)
    with gzip.open(capture.trace) as f:
        recorded = [e for e in json.load(f)["traceEvents"] if e.get("name") == "aten::mm"]
    summary = json.loads((tmp_path / "w.step4" / "summary.json").read_text())
    (mm,) = [r for r in summary["top_ops"] if r["op"] == "aten::mm"]
    # 2 active steps x 3 matmuls of (64x32)(32x16): 2*M*N*K FLOPs each.
    assert len(recorded) == mm["calls"] == 6
    assert mm["flops"] == 6 * 2 * 64 * 16 * 32
    assert {"report.html", "summary.json", "kernels.parquet"} <= set(os.listdir(capture.bundle))
    assert not [n for n in os.listdir(tmp_path) if "partial" in n]


def test_on_trace_ready_keeps_a_failed_analysis_reason(tmp_path):
    import tracekit.profiler

    class Broken:  # a profiler whose export writes a file that is no trace
        step_num = 7

        def export_chrome_trace(self, path):
            with gzip.open(path, "wb") as f:
                f.write(b"{not json")

    handler = tracekit.profiler.on_trace_ready(tmp_path, worker_name="w")
    handler(Broken())
    (capture,) = handler.wait(timeout=120)
    assert capture.returncode == 2 and not os.path.exists(capture.bundle)
    assert (tmp_path / "w.step7.log").read_text().startswith("tracekit: error: ")


@pytest.fixture(scope="session")
def mlflow_server(session_dir):
    """A real MLflow tracking server (`mlflow server`, the full package) on the loopback,
    with a SQLite backend and served artifacts: tracekit logs to it over HTTP, as a team's
    client does. One per test session: the first xdist worker that needs it starts it (its
    start takes ~15 s), the others use it; it is stopped when the session ends. Skipped with
    the reason where the server package is missing; TRACEKIT_REQUIRE_MLFLOW=1 (.ci/run) turns
    that into a failure."""
    import fcntl
    import importlib.util

    pytest.importorskip("mlflow", reason="MLflow is optional: pip install 'tracekit[mlflow]'")
    executable = os.path.join(os.path.dirname(sys.executable), "mlflow")
    if importlib.util.find_spec("flask") is None or importlib.util.find_spec("sqlalchemy") is None or not os.path.exists(executable):
        reason = "the MLflow tests run against a real tracking server: pip install 'tracekit[mlflow-server]'"
        if os.environ.get("TRACEKIT_REQUIRE_MLFLOW") == "1":
            pytest.fail(reason + "; TRACEKIT_REQUIRE_MLFLOW=1 requires it")
        pytest.skip(reason)
    root = session_dir / "mlflow-server"
    with open(session_dir / "mlflow-server.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "uri").exists():
            _start_mlflow_server(executable, root, session_dir)
        return (root / "uri").read_text()


def _start_mlflow_server(executable: str, root, session_dir) -> None:
    import socket
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "server.log", "wb") as log:
        server = subprocess.Popen([executable, "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
                                   "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}", "--artifacts-destination", str(root / "artifacts")],
                                  stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    (session_dir / f"pgid-{server.pid}").touch()  # killed when the session ends (conftest)
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(uri + "/health", timeout=2) as response:
                if response.status == 200:
                    break
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            pytest.fail(f"mlflow server did not start: {(root / 'server.log').read_text()[-2000:]}")
        time.sleep(0.2)
    (root / "uri").write_text(uri)


@pytest.fixture
def mlflow_store(mlflow_server, monkeypatch):
    import mlflow

    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    mlflow.set_tracking_uri(mlflow_server)
    yield mlflow_server
    mlflow.set_tracking_uri(None)


def test_mlflow_without_a_tracking_uri_says_what_to_set(tmp_path):
    pytest.importorskip("mlflow", reason="MLflow is optional: pip install 'tracekit[mlflow]'")
    unset = {k: None for k in os.environ if k.startswith("MLFLOW_")}
    done = run_cli("analyze", shared("torch", "h100_bert_small_hf_inference.json.gz"), "--mlflow", cwd=tmp_path, env=unset)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "set MLFLOW_TRACKING_URI=http://HOST:PORT" in lines[0]
    assert done.stdout == ""  # before the analysis: no report printed
    assert not list(tmp_path.iterdir())  # and no local store made


def test_log_analysis_to_a_local_mlflow_store(mlflow_store, tmp_path, shared_analysis):
    import mlflow
    from mlflow.tracking import MlflowClient

    import tracekit
    import tracekit.mlflow

    analysis = shared_analysis(QWEN)  # the goldens' analysis (sealed: logging it must not change it)
    with mlflow.start_run() as run:
        assert tracekit.mlflow.log_analysis(analysis) == run.info.run_id
    client = MlflowClient(mlflow_store)
    metrics = client.get_run(run.info.run_id).data.metrics
    assert metrics["tracekit.step_time_ms"] == pytest.approx(raw_step_ns(QWEN, "ProfilerStep#6") / 1e6)
    block = analysis.blocks.set_index(["phase", "block"]).loc[("forward", "attention")]
    assert metrics["tracekit.block.forward.attention.time_ms"] == pytest.approx(block["gpu_time_ns"] / 1e6)
    assert metrics["tracekit.block.forward.attention.efficiency"] == pytest.approx(block["efficiency"])
    assert metrics["tracekit.coverage"] == pytest.approx(analysis.coverage["modeled_share"])
    assert metrics["tracekit.exposed_comm_share"] == 0.0  # one GPU, no collectives
    html = client.download_artifacts(run.info.run_id, "tracekit/report.html", str(tmp_path))
    text = open(html, encoding="utf-8").read()
    assert text.lstrip().lower().startswith("<!doctype html") and "h100_qwen1.5-0.5b_hf_inference" in text
    summary = json.loads(open(client.download_artifacts(run.info.run_id, "tracekit/summary.json", str(tmp_path))).read())
    assert summary["steps"][0]["duration_ns"] == raw_step_ns(QWEN, "ProfilerStep#6")


def test_log_analysis_leaves_unknown_metrics_out(mlflow_store, shared_analysis):
    from mlflow.tracking import MlflowClient

    import tracekit
    import tracekit.mlflow

    # hipGraph decode: almost no kernel has a cost, so no efficiency is logged at all.
    run_id = tracekit.mlflow.log_analysis(shared_analysis(shared("torch", "mi300x_sglang_qwen3-8b_decode_bs32.json.gz")), artifacts=False)
    metrics = MlflowClient(mlflow_store).get_run(run_id).data.metrics
    assert metrics["tracekit.coverage"] < 0.5 and "tracekit.efficiency" not in metrics
    assert "tracekit.block.decode.attention.time_ms" in metrics and "tracekit.block.decode.attention.efficiency" not in metrics


def test_analyze_cli_logs_into_a_named_run(mlflow_store, tmp_path):
    import mlflow
    from mlflow.tracking import MlflowClient

    with mlflow.start_run() as run:
        pass
    done = run_cli("analyze", shared("torch", "h100_bert_small_hf_inference.json.gz"), "--mlflow-run", run.info.run_id, "--format", "json")
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    client = MlflowClient(mlflow_store)
    assert client.get_run(run.info.run_id).data.metrics["tracekit.coverage"] == pytest.approx(printed["coverage"]["modeled_share"])
    assert "tracekit/report.html" in [a.path for a in client.list_artifacts(run.info.run_id, "tracekit")]
    missing = run_cli("analyze", shared("torch", "h100_bert_small_hf_inference.json.gz"), "--mlflow-run", "0123456789abcdef")
    # MLflow's own wording differs between stores and versions; the line is tracekit's
    lines = missing.stderr.splitlines()
    assert missing.returncode == 2 and len(lines) == 1, missing.stderr
    assert lines[0].startswith("tracekit: error: MLflow run 0123456789abcdef: ") and "not found" in lines[0]


INNER_TEST = '''
import json, pathlib
SUMMARY = {summary!r}

def test_replay(tracekit_summary, tracekit_expect, tracekit_golden):
    summary = tracekit_summary(SUMMARY)
    assert tracekit_summary(SUMMARY) is summary  # loaded once per session
    tracekit_expect(summary, [{{"block": "forward/attention", "max_time_ms": {limit}}}])
    tracekit_golden(summary, pathlib.Path(__file__).parent / "golden.json")
'''


def _inner_pytest(tmp_path, limit, *args):
    from conftest import _plugin_installed

    (tmp_path / "test_inner.py").write_text(INNER_TEST.format(summary=str(REPO / "tests" / "golden" / "torch__h100_qwen1.5-0.5b_hf_inference.json.gz.summary.json"), limit=limit))
    plugin = [] if _plugin_installed() else ["-p", "tracekit.integrations.pytest_plugin"]
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin, *args, str(tmp_path)],
                          capture_output=True, text=True, cwd=tmp_path, env=env)


def test_pytest_plugin_expectations_and_goldens(tmp_path):
    golden = tmp_path / "golden.json"
    # No golden yet: the test fails and says how to make one.
    first = _inner_pytest(tmp_path, 1000)
    assert first.returncode == 1 and "--tracekit-update-goldens" in first.stdout
    update = _inner_pytest(tmp_path, 1000, "--tracekit-update-goldens")
    assert update.returncode == 0 and "rewrote 1 golden summaries" in update.stdout
    original = golden.read_text()
    stored = json.loads(original)
    assert stored["blocks"] == json.loads((REPO / "tests" / "golden" / "torch__h100_qwen1.5-0.5b_hf_inference.json.gz.summary.json").read_text())["blocks"]
    assert _inner_pytest(tmp_path, 1000).returncode == 0
    # A changed number beyond the tolerance fails, naming the field.
    stored["steps"][0]["duration_ns"] += 1
    golden.write_text(json.dumps(stored))
    changed = _inner_pytest(tmp_path, 1000)
    assert changed.returncode == 1 and "$.steps[0].duration_ns: golden" in changed.stdout
    # A violated expectation fails with its measured value.
    golden.write_text(original)
    failed = _inner_pytest(tmp_path, 1.0)
    attention = next(b for b in stored["blocks"] if (b["phase"], b["block"]) == ("forward", "attention"))
    assert failed.returncode == 1 and f"forward/attention time | <= 1 ms | {attention['gpu_time_ns'] / 1e6:,.3f} ms | FAIL" in failed.stdout
