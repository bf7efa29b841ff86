"""Signals, worker processes, memory and ranks (issue 22): SIGTERM during `analyze --out`
behaves like SIGINT; parse workers die with their parent; a bundle is read back before it
is installed; running out of memory is one line; the non-UTF-8 count does not depend on
the worker split; ranks of another job are named."""

from __future__ import annotations

import gzip
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest

import tracekit.parsers.kineto_parallel as parallel
from tracekit.cli.main import main
from tracekit.parsers import parse

REPO = pathlib.Path(__file__).resolve().parents[1]
TINY = REPO / "fixtures" / "cpu_tiny_dense_generate.json.gz"
SHARED = REPO.parent / "shared" / "fixtures"
CHECKS_SHARED = True  # only the two rank tests need them (skipif below)


def run(capsys, *argv) -> tuple[int, str, str]:
    try:
        main([str(a) for a in argv])
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    out, err = capsys.readouterr()
    return code, out, err


def children(pid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(name))
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory) -> pathlib.Path:
    """A trace past MIN_PARALLEL_BYTES (16 MiB), so that two parse workers read it: the tiny
    CPU fixture tiled in time."""
    out = tmp_path_factory.mktemp("big") / "big.json"
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "tile_kineto.py"), str(TINY), str(out), "--min-bytes", str(18 << 20)],
                   check=True, capture_output=True)
    assert out.stat().st_size >= parallel.MIN_PARALLEL_BYTES
    return out


def _start(argv, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "tracekit", *map(str, argv)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True, env=env, cwd=tmp_path)


def _wait_for_workers(proc, timeout=60.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        workers = children(proc.pid)
        if len(workers) >= 2:
            return workers
        time.sleep(0.01)
    pytest.skip("the parse finished before two workers were seen (a very fast machine)")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_interrupt_during_parallel_parse_of_analyze_out(big_trace, tmp_path, signum):
    out = tmp_path / "bundle"
    proc = _start(["analyze", big_trace, "--out", out, "--workers", "2", "--format", "json"], tmp_path)
    workers = _wait_for_workers(proc)
    os.kill(proc.pid, signum)  # the parent alone, not its group
    _, err = proc.communicate(timeout=60)
    err = err.decode()
    assert proc.returncode == 128 + signum, err
    assert "tracekit: aborted" in err and "Traceback" not in err, err
    time.sleep(0.5)
    assert not [w for w in workers if alive(w)]
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # no .bundle.tracekit-XXXX left


def test_workers_die_with_a_killed_parent(big_trace, tmp_path):
    proc = _start(["info", big_trace, "--workers", "2", "--format", "json"], tmp_path)
    workers = _wait_for_workers(proc)
    os.kill(proc.pid, signal.SIGKILL)  # no handler runs: PR_SET_PDEATHSIG (or the watchdog) must end them
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(alive(w) for w in workers):
        time.sleep(0.05)
    left = [w for w in workers if alive(w)]
    for w in left:
        os.kill(w, signal.SIGKILL)
    assert not left


def test_a_bundle_that_does_not_read_back_is_not_installed(capsys, tmp_path, monkeypatch):
    import tracekit.reports.bundle as bundle

    real = bundle.write_files

    def torn(a, out_dir, top=15):
        names = real(a, out_dir, top)
        path = os.path.join(out_dir, "kernels.parquet")
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)  # what an interrupted write leaves
        return names

    monkeypatch.setattr(bundle, "write_files", torn)
    out = tmp_path / "bundle"
    code, _, err = run(capsys, "analyze", TINY, "--out", out, "--format", "json")
    assert code == 2 and "kernels.parquet did not read back" in err, err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_out_of_memory_is_one_line(capsys, monkeypatch):
    import tracekit.api

    def no_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(tracekit.api, "scan", no_memory)
    code, _, err = run(capsys, "info", TINY)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    # the gzip file inflates ~8x; the trace then needs ~6x its JSON: 48x the file
    size_mb = TINY.stat().st_size * 8 / 1e6
    assert f"a trace of {size_mb:,.0f} MB" in lines[0] and "out of memory" in lines[0] and "--workers 1" in lines[0]


def test_non_utf8_count_does_not_depend_on_the_split(tmp_path, monkeypatch):
    """Bad bytes in fields tracekit reads (a kernel name) and in fields it skips (an unknown
    key): both counted, once each, whatever the pieces. 40 events carry one bad byte each in
    a skipped field, 10 in a kernel name: 50 sequences."""
    events = []
    for i in range(400):
        e = {"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": 10 * i, "dur": 5,
             "args": {"device": 0, "stream": 7, "correlation": i}}
        events.append(json.dumps(e).encode())
    raw = []
    for i, e in enumerate(events):
        if i % 10 == 0:  # skipped field
            e = e[:-1] + b', "zz_unread": "a\xffb"}'
        if i % 40 == 5:  # a name tracekit reads
            e = e.replace(f'"k{i}"'.encode(), f'"k{i}'.encode() + b'\xfe"')
        raw.append(e)
    path = tmp_path / "bad.json"
    path.write_bytes(b'{"traceEvents": [' + b",\n".join(raw) + b"]}")
    monkeypatch.setattr(parallel, "MIN_PARALLEL_BYTES", 0)
    monkeypatch.setattr(parallel, "MIN_PIECE_BYTES", 1 << 10)
    monkeypatch.setattr(parallel, "SUB_BYTES", 1 << 11)
    counts = set()
    for workers in (1, 2, 3):
        trace = parse(path, workers=workers)
        counts |= {w for w in trace.warnings if "not UTF-8" in w}
    assert counts == {"50 byte sequences that are not UTF-8 were replaced with U+FFFD"}


@pytest.mark.skipif(not (SHARED / "torch" / "v100_dlrm_8ranks").exists(), reason="needs ../shared/fixtures")
def test_two_traces_claiming_one_rank_are_named(capsys, tmp_path):
    ranks = SHARED / "torch" / "v100_dlrm_8ranks"
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    shutil.copy(ranks / "rank0.json.gz", a / "rank0.json.gz")
    shutil.copy(ranks / "rank0.json.gz", b / "rank0.json.gz")
    code, _, err = run(capsys, "analyze", a / "rank0.json.gz", b / "rank0.json.gz", "--format", "json", "--workers", "1")
    assert code == 2, err
    assert str(a / "rank0.json.gz") in err and str(b / "rank0.json.gz") in err and "rank 0" in err


@pytest.mark.skipif(not (SHARED / "torch" / "v100_dlrm_8ranks").exists(), reason="needs ../shared/fixtures")
def test_a_trace_of_another_job_is_warned_about(capsys, tmp_path):
    ranks = SHARED / "torch" / "v100_dlrm_8ranks"
    for r in (0, 1):
        shutil.copy(ranks / f"rank{r}.json.gz", tmp_path / f"rank{r}.json.gz")
    other = json.loads(gzip.decompress((ranks / "rank2.json.gz").read_bytes()))
    other.setdefault("distributedInfo", {})["world_size"] = 4  # the dlrm job's is 8
    (tmp_path / "rank2.json").write_text(json.dumps(other))
    code, _, err = run(capsys, "analyze", tmp_path, "--format", "json", "--workers", "1")
    assert code == 0, err
    assert "world size 4, the other ranks' is 8" in err
