"""Log an analysis to MLflow: headline metrics, and the report bundle as artifacts.

    import tracekit, tracekit.mlflow
    with mlflow.start_run():
        tracekit.mlflow.log_analysis(tracekit.analyze("trace.json.gz"))

Metrics (unknown figures are not logged at all: an absent metric is not a 0):
    tracekit.step_time_ms               median step
    tracekit.coverage                   share of kernel time with a cost
    tracekit.efficiency                 Σ t_min / Σ time over modeled kernels
    tracekit.exposed_comm_share         exposed communication / capture span
    tracekit.gpu_busy_ms
    tracekit.block.<phase>.<block>.time_ms / .share / .efficiency
Artifacts under `tracekit/`: summary.json, report.md, report.html, parquet, csv, png.
Needs `pip install 'tracekit[mlflow]'`; the tracking store is MLflow's own setting
(MLFLOW_TRACKING_URI or mlflow.set_tracking_uri)."""

from __future__ import annotations

import contextlib
import re
import tempfile
from typing import Any

from tracekit.common.format import MIN_COVERAGE  # an efficiency over less than half its time is unknown
from tracekit.compare.summary import coverage_share, exposed_comm_share, number, records, step_time_ns

PREFIX = "tracekit"
# MLflow metric keys allow alphanumerics, _ - . space and /; phase and block names come
# from the trace and user rules, so anything else becomes "_".
_KEY_UNSAFE = re.compile(r"[^A-Za-z0-9_\-. ]")


def headline_metrics(summary: dict[str, Any]) -> dict[str, float]:
    """The metrics logged for a summary dict (`Analysis.to_dict()` or a summary.json)."""
    out: dict[str, float | None] = {
        "step_time_ms": _scaled(step_time_ns(summary), 1e-6),
        "coverage": coverage_share(summary),
        "exposed_comm_share": exposed_comm_share(summary),
        "gpu_busy_ms": _scaled(_sum(number(r.get("busy_ns")) for r in records(summary, "devices")), 1e-6),
    }
    if (coverage_share(summary) or 0.0) >= MIN_COVERAGE:
        out["efficiency"] = number((summary.get("coverage") or {}).get("efficiency"))
    for r in records(summary, "blocks"):
        key = f"block.{_key(r.get('phase'))}.{_key(r.get('block'))}"
        out[f"{key}.time_ms"] = _scaled(number(r.get("gpu_time_ns")), 1e-6)
        out[f"{key}.share"] = number(r.get("share"))
        coverage = number(r.get("coverage"))
        if coverage is not None and coverage >= MIN_COVERAGE:
            out[f"{key}.efficiency"] = number(r.get("efficiency"))
    return {f"{PREFIX}.{k}": v for k, v in out.items() if v is not None}


def log_analysis(analysis, run_id: str | None = None, top: int = 15, artifact_path: str = PREFIX, artifacts: bool = True) -> str:
    """Log `analysis` (an Analysis) to the MLflow run `run_id`, else the active run, else a
    new run. Returns the run id."""
    try:
        import mlflow
        from mlflow.entities import Metric, RunTag
        from mlflow.tracking import MlflowClient
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError("tracekit's MLflow logging needs MLflow: pip install 'tracekit[mlflow]'") from exc
    import time

    summary = analysis.to_dict(top)
    now = int(time.time() * 1000)
    metrics = [Metric(k, v, now, 0) for k, v in headline_metrics(summary).items()]
    device = (summary.get("device") or {}).get("name")
    tags = [RunTag(f"{PREFIX}.trace", str((summary.get("trace") or {}).get("path"))), RunTag(f"{PREFIX}.device", str(device))]
    own_run = run_id is None and mlflow.active_run() is None
    with (mlflow.start_run() if own_run else contextlib.nullcontext()):
        run_id = run_id or mlflow.active_run().info.run_id
        client = MlflowClient()
        client.log_batch(run_id, metrics=metrics, tags=tags)
        if artifacts:
            from tracekit.reports.bundle import write_bundle

            with tempfile.TemporaryDirectory(prefix="tracekit-bundle-") as bundle:
                write_bundle(analysis, bundle, top)
                client.log_artifacts(run_id, bundle, artifact_path)
    return run_id


# How long the tracking server has to answer its health check before any work is done: a
# server that is down or unreachable is named in seconds, not after the analysis and
# MLflow's own retries (minutes).
SERVER_TIMEOUT_S = 10.0
# MLflow's HTTP retries, where the user has not set them: a server that answered the
# health check and then fails is reported after a few seconds, not ~250 s of backoff.
_HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                  "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}


def check_server(uri: str, timeout: float = SERVER_TIMEOUT_S) -> None:
    """Raise TraceError (one line, exit 2) unless the HTTP tracking server at `uri` answers
    its /health endpoint within `timeout` seconds. Other stores (databricks, a local path)
    are MLflow's to check."""
    import os
    import urllib.error
    import urllib.parse
    import urllib.request

    from tracekit.errors import TraceError

    for key, value in _HTTP_DEFAULTS.items():
        os.environ.setdefault(key, value)
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme not in ("http", "https"):
        return
    request = _health_request(parts)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            if response.status == 200:
                return
            why = f"HTTP {response.status}"
    except urllib.error.HTTPError as exc:
        why = f"HTTP {exc.code} from /health"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        why = "no answer within {:g} s".format(timeout) if "timed out" in str(reason) else str(reason)
    raise TraceError(masked(uri), f"the MLflow tracking server cannot be reached ({masked(why, uri)}); nothing was analysed or "
                                  "logged (start it, or set MLFLOW_TRACKING_URI to one that runs)")


def _health_request(parts):
    """GET /health of the server, its credentials (from the URI's user info, else MLflow's
    MLFLOW_TRACKING_USERNAME / _PASSWORD, or MLFLOW_TRACKING_TOKEN) as a header, as MLflow's
    own client sends them: urllib does not take user info from a URL's host part."""
    import base64
    import os
    import urllib.parse
    import urllib.request

    host = parts.hostname or ""
    netloc = (f"[{host}]" if ":" in host else host) + (f":{parts.port}" if parts.port else "")
    url = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/") + "/health", "", ""))
    request = urllib.request.Request(url)
    user = urllib.parse.unquote(parts.username) if parts.username else os.environ.get("MLFLOW_TRACKING_USERNAME")
    password = urllib.parse.unquote(parts.password or "") if parts.username else os.environ.get("MLFLOW_TRACKING_PASSWORD", "")
    if user:
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    elif os.environ.get("MLFLOW_TRACKING_TOKEN"):
        request.add_header("Authorization", "Bearer " + os.environ["MLFLOW_TRACKING_TOKEN"])
    return request


def masked(text: object, uri: str | None = None) -> str:
    """`text` with the user info of any URL in it (and of `uri`) shown as `***@`, and the
    password of `uri` and MLFLOW_TRACKING_PASSWORD / _TOKEN nowhere: no message carries a secret."""
    import os
    import re
    import urllib.parse

    out = re.sub(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s]*@", r"\1***@", str(text))
    secrets = [os.environ.get("MLFLOW_TRACKING_PASSWORD"), os.environ.get("MLFLOW_TRACKING_TOKEN")]
    if uri:
        parts = urllib.parse.urlsplit(uri)
        secrets += [parts.password, urllib.parse.unquote(parts.password or "") or None]
    for secret in secrets:
        if secret:
            out = out.replace(secret, "***")
    return out


def _key(name: Any) -> str:
    return _KEY_UNSAFE.sub("_", str(name))[:100] or "_"


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def _sum(values) -> float | None:
    values = list(values)
    return sum(values) if values and None not in values else None
