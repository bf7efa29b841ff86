"""Failures that were silent, slow or partial (issue 29): each is named in one line, with
exit 2, before or instead of work done for nothing."""

from __future__ import annotations

import gzip
import json
import socket
import time

import pytest

from conftest import shared, shared_model
from helpers import run_cli

BERT = shared("torch", "h100_bert_small_hf_inference.json.gz")


@pytest.fixture
def unnamed_gpu(tmp_path):
    """The BERT trace without deviceProperties: the GPU it ran on is unnamed."""
    with gzip.open(BERT, "rt") as f:
        doc = json.load(f)
    del doc["deviceProperties"]
    out = tmp_path / "unnamed_gpu.json.gz"
    with gzip.open(out, "wt") as f:
        json.dump(doc, f)
    return out


def test_calibrate_with_no_usable_trace_says_why_and_exits_2(unnamed_gpu, tmp_path):
    config = shared_model("llama3.1-8b.config.json")
    out = tmp_path / "factors.json"
    done = run_cli("calibrate", str(unnamed_gpu), "--model", str(config), "--out", str(out))
    assert done.returncode == 2, done.stderr
    reason = "its GPU is unnamed or not in the device table"
    assert f"tracekit: warning: {unnamed_gpu}: left out of the fit: {reason}" in done.stderr
    assert done.stderr.splitlines()[-1].startswith(f"tracekit: error: {unnamed_gpu}: no trace can be used to calibrate")
    assert done.stdout == "" and not out.exists()
    # --device names the GPU, and the same trace is fitted
    fixed = run_cli("calibrate", str(unnamed_gpu), "--model", str(config), "--device", "h100", "--format", "json")
    assert fixed.returncode == 0, fixed.stderr
    assert [t["path"] for t in json.loads(fixed.stdout)["traces"]] == [str(unnamed_gpu)]


def test_calibrate_names_the_trace_it_leaves_out_of_the_fit(unnamed_gpu):
    config = shared_model("llama3.1-8b.config.json")
    done = run_cli("calibrate", str(BERT), str(unnamed_gpu), "--model", str(config), "--format", "json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [t["path"] for t in result["traces"]] == [str(BERT)]
    assert [t["path"] for t in result["left_out"]] == [str(unnamed_gpu)]
    assert f"tracekit: warning: {unnamed_gpu}: left out of the fit: its GPU is unnamed" in done.stderr


def test_a_device_value_too_long_is_refused_not_cut():
    # its first 120 characters say "h100"; cut there, it used to select the H100
    typed = "h100" + " " * 116 + "b200"
    done = run_cli("analyze", str(BERT), "--device", typed, "--format", "json")
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "124 characters long; a device key or name has at most 120" in lines[0]
    assert done.stdout == ""


def test_mlflow_with_an_unreachable_server_fails_before_the_analysis():
    pytest.importorskip("mlflow", reason="MLflow is optional: pip install 'tracekit[mlflow]'")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    uri = f"http://127.0.0.1:{port}"
    began = time.monotonic()
    done = run_cli("analyze", str(BERT), "--mlflow", env={"MLFLOW_TRACKING_URI": uri}, timeout=60)
    took = time.monotonic() - began
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"tracekit: error: {uri}: the MLflow tracking server cannot be reached")
    assert done.stdout == ""  # no analysis printed: it never ran
    assert took < 15
