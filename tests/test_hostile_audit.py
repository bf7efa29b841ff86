"""The hostile-user audit's other cases (issue 49): secrets, terminals, journals, XML, encodings,
compression, amplification, the forms users have. Each builds its own minimal input."""

from __future__ import annotations

import base64
import http.server
import threading

import pytest

from helpers import run_cli
from tracekit.errors import TraceError
from tracekit.integrations.mlflow import check_server, masked

import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
TINY = ROOT / "fixtures" / "gpu" / "h100" / "h10080gbhbm3_llama3-8b_4layers_prefill1x512_decode_bs16_ncu_twin.json.gz"


class _Health(http.server.BaseHTTPRequestHandler):
    """/health: 200 for alice:S3cretPass (basic auth), 401 else."""

    def do_GET(self):  # noqa: N802 - the stdlib's name
        good = "Basic " + base64.b64encode(b"alice:S3cretPass").decode()
        self.send_response(200 if self.path == "/health" and self.headers.get("Authorization") == good else 401)
        self.end_headers()
        self.wfile.write(b"OK")

    def log_message(self, *args):
        pass


@pytest.fixture
def health_server():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()


def test_mlflow_credentials_in_the_uri_pass_the_health_check(health_server):
    check_server(f"http://alice:S3cretPass@127.0.0.1:{health_server}")  # no error: the server said 200


def test_mlflow_credentials_from_the_environment_pass_the_health_check(health_server, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "alice")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "S3cretPass")
    check_server(f"http://127.0.0.1:{health_server}")


def test_a_refused_password_is_never_printed(health_server):
    uri = f"http://alice:Wr0ngPass@127.0.0.1:{health_server}"
    with pytest.raises(TraceError) as caught:
        check_server(uri)
    assert "Wr0ngPass" not in str(caught.value) and "alice" not in str(caught.value) and "***@" in str(caught.value)
    assert "HTTP 401" in str(caught.value)


def test_masked_hides_user_info_and_the_environments_secrets(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "tok-123")
    text = masked("could not reach https://bob:pw%40x@host/api, token tok-123, pw@x", "https://bob:pw%40x@host")
    assert "bob" not in text and "pw%40x" not in text and "pw@x" not in text and "tok-123" not in text


@pytest.mark.parametrize("columns", ["²", "٣", "abc", "-5", "1e3", ""])
def test_a_columns_value_that_is_not_ascii_digits_is_ignored(columns):
    run = run_cli("info", TINY, env={"COLUMNS": columns, "LINES": columns})
    assert run.returncode == 0, run.stderr
