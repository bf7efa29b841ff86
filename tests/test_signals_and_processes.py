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
import tracekit.common.pools as pools
from helpers import run_cli
from tracekit.parsers import as_trace, parse, parse_tables

REPO = pathlib.Path(__file__).resolve().parents[1]
TINY = REPO / "fixtures" / "cpu_tiny_dense_generate.json.gz"
SHARED = REPO.parent / "shared" / "fixtures"
CHECKS_SHARED = True  # only the two rank tests need them (skipif below)


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


def test_a_bundle_that_does_not_read_back_is_not_installed(tmp_path, monkeypatch):
    import tracekit.reports.bundle as bundle

    real = bundle.write_files

    def torn(a, out_dir, top=15, summary_extra=None):
        names = real(a, out_dir, top, summary_extra)
        path = os.path.join(out_dir, "kernels.parquet")
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)  # what an interrupted write leaves
        return names

    monkeypatch.setattr(bundle, "write_files", torn)
    out = tmp_path / "bundle"
    code, _, err = run_cli("analyze", TINY, "--out", out, "--format", "json")
    assert code == 2 and "kernels.parquet did not read back" in err, err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_out_of_memory_is_one_line(monkeypatch):
    import tracekit.api

    def no_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(tracekit.api, "scan", no_memory)
    code, _, err = run_cli("info", TINY)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    # the trace named, and what `info` needs on it (test_bounded_runs.py checks the figure)
    assert lines[0].startswith(f"tracekit: error: {TINY}: out of memory") and "raise the memory limit" in lines[0]
    assert "--workers 1" not in lines[0]  # a parallel parse that runs out falls back to one process by itself


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
def test_two_traces_claiming_one_rank_are_named(tmp_path):
    ranks = SHARED / "torch" / "v100_dlrm_8ranks"
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    shutil.copy(ranks / "rank0.json.gz", a / "rank0.json.gz")
    shutil.copy(ranks / "rank0.json.gz", b / "rank0.json.gz")
    code, _, err = run_cli("analyze", a / "rank0.json.gz", b / "rank0.json.gz", "--format", "json", "--workers", "1")
    assert code == 2, err
    assert str(a / "rank0.json.gz") in err and str(b / "rank0.json.gz") in err and "rank 0" in err


@pytest.mark.skipif(not (SHARED / "torch" / "v100_dlrm_8ranks").exists(), reason="needs ../shared/fixtures")
def test_a_trace_of_another_job_is_warned_about(tmp_path):
    ranks = SHARED / "torch" / "v100_dlrm_8ranks"
    for r in (0, 1):
        shutil.copy(ranks / f"rank{r}.json.gz", tmp_path / f"rank{r}.json.gz")
    other = json.loads(gzip.decompress((ranks / "rank2.json.gz").read_bytes()))
    other.setdefault("distributedInfo", {})["world_size"] = 4  # the dlrm job's is 8
    (tmp_path / "rank2.json").write_text(json.dumps(other))
    code, _, err = run_cli("analyze", tmp_path, "--format", "json", "--workers", "1")
    assert code == 0, err
    assert "world size 4, the other ranks' is 8" in err


# --- out of memory during the parallel parse (issue 22) ---------------------------------------

_POOL = None  # the pool under test, inherited by its forked worker


def _write_half_a_result(marker: str) -> None:
    """In a worker: what a worker killed while sending its result leaves, half a message in
    the result pipe (a header announcing 1 MB, then 10 bytes), and then it hangs."""
    writer = _POOL._result_queue._writer
    os.write(writer.fileno(), (1 << 20).to_bytes(4, "big", signed=True) + b"x" * 10)
    pathlib.Path(marker).write_text("sent")
    time.sleep(600)


def test_a_stopped_pool_ends_its_manager_thread_with_half_a_result_in_the_pipe(tmp_path):
    """The hang under `ulimit -v` (1 run in 6-10 of `analyze` on 55 MB at 450 MB): this process
    ran out of memory while a worker was sending its result; stopping the pool killed the
    worker mid-message, and the pool's manager thread waited for the rest of it forever (the
    parent's own copy of the pipe's write end stayed open: _stop looked for the queue after
    shutdown() had dropped it), so the interpreter's exit, which joins that thread, hung
    after the out-of-memory line."""
    import multiprocessing
    import threading
    from concurrent.futures import ProcessPoolExecutor

    global _POOL
    marker = tmp_path / "sent"
    _POOL = pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork"))
    try:
        pool.submit(_write_half_a_result, str(marker))
        deadline = time.monotonic() + 30
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert marker.exists()
        manager = pool._executor_manager_thread
        time.sleep(0.1)  # the manager is now reading the rest of the message
        pools.stop_pool(pool)
        manager.join(10)
        assert not manager.is_alive(), "the pool's manager thread still waits on the result pipe"
        assert not [t for t in threading.enumerate() if type(t).__name__ == "_ExecutorManagerThread" and t.is_alive()]
    finally:
        _POOL = None


def test_parallel_parse_out_of_memory_falls_back_to_one_process(big_trace, monkeypatch):
    """Out of memory in this process while the workers decode (here: in `meanwhile`, the
    caller's imports, where `ulimit -v` hit it), or in a worker: the workers are stopped and
    the file is read in this process, with a warning saying so (it ended with exit 2, or hung)."""
    import threading

    serial = parse(big_trace, workers=1)

    def no_memory():
        raise MemoryError

    trace = as_trace(parse_tables(big_trace, workers=2, meanwhile=no_memory))
    assert trace.warnings[0].startswith("the parallel parse (2 worker processes) ran out of memory; the trace was read in one process")
    assert trace.warnings[1:] == serial.warnings and len(trace.kernels) == len(serial.kernels)
    assert not [t for t in threading.enumerate() if type(t).__name__ == "_ExecutorManagerThread" and t.is_alive()]

    def worker_out_of_memory(blob, decoder):  # runs in the forked workers
        raise MemoryError

    monkeypatch.setattr(parallel, "_decode_events", worker_out_of_memory)
    trace = parse(big_trace, workers=2)
    assert "ran out of memory; the trace was read in one process" in trace.warnings[0]
    assert len(trace.kernels) == len(serial.kernels)


def test_real_memory_limits_end_promptly_with_exit_0_or_one_line(big_trace, tmp_path):
    """`analyze` of a 21 MB trace with two parse workers under address-space limits
    (RLIMIT_AS, as `ulimit -v`), from one where nothing fits to one where all does: every run
    ends within the timeout (a hang fails here) with exit 0, or exit 2 and one line, never a
    traceback. At 100 MB OpenBLAS, starting a thread per core inside `import numpy`, could
    not get its buffers and ended the process itself ("OpenBLAS error: Memory allocation
    still failed", exit 1); now one BLAS thread under a limit, and below 128 MB one line."""
    import resource

    for limit_mb, expected in ((100, {2}), (300, {0, 2}), (380, {0, 2}), (2000, {0})):
        def limit(mb=limit_mb):
            resource.setrlimit(resource.RLIMIT_AS, (mb << 20, mb << 20))

        env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
        proc = run_cli("analyze", big_trace, "--format", "json", "--workers", "2", process=True, env=env, cwd=tmp_path,
                       preexec_fn=limit, timeout=60)
        err = proc.stderr
        assert proc.returncode in expected, (limit_mb, proc.returncode, err[-2000:])
        assert "Traceback" not in err and "OpenBLAS" not in err, err[-2000:]
        if proc.returncode == 2:
            errors = [line for line in err.splitlines() if line.startswith("tracekit: error:")]
            assert len(errors) == 1 and errors[0].startswith(f"tracekit: error: {big_trace}: out of memory") and err.endswith(errors[0] + "\n"), err
        else:
            json.loads(proc.stdout)


# --- interrupts at any moment: early, and after the command's own handlers (issue 22) ----------

def _caught_signals(pid: int) -> int | None:
    """The process's caught-signal mask (SigCgt), None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return int(line.split()[1], 16)
    except OSError:
        return None
    return 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the caught-signal mask from /proc")
@pytest.mark.parametrize("signum, delays_ms", [(signal.SIGINT, (0, 5, 10, 20, 40)), (signal.SIGTERM, (0, 20))])
def test_early_interrupt_once_tracekit_owns_the_signals(tmp_path, signum, delays_ms):
    """SIGINT (SIGTERM) at 0-40 ms after tracekit's first line has run: "tracekit: aborted",
    exit 130 (143), no traceback; or exit 0 where the run finished first.

    Where tracekit's part starts, measured (python 3.11, this repository's venv, 2 cores):
    the interpreter starts in 8-12 ms (`python -S -c pass`), then `site` runs the venv's
    .pth files (the editable install's finder imports pathlib, re, ...): 13 ms more, so
    `python -c pass` takes 22-40 ms, and `python -m tracekit` reaches tracekit/__init__.py's
    first line 42-125 ms after the fork (up to 250 ms on a loaded machine). A signal before
    that meets Python's own handling, not tracekit's: killed by the signal (-2, -15), or
    a KeyboardInterrupt inside `site` ("Fatal Python error: init_import_site" with a
    traceback, exit 1), the audit's 12-18 ms runs. No code of tracekit's can run there.
    tracekit's first line installs its handler for both signals; Python itself catches only
    SIGINT, so SIGTERM appearing in SigCgt (/proc/PID/status) marks the moment tracekit owns
    them, and the delays count from there."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for delay in delays_ms:
        proc = subprocess.Popen([sys.executable, "-m", "tracekit", "analyze", str(TINY)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, env=env, cwd=tmp_path)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            mask = _caught_signals(proc.pid)
            if mask is None or mask >> (signal.SIGTERM - 1) & 1:
                break
        time.sleep(delay / 1000)
        sent = proc.poll() is None
        if sent:
            proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
        err = err.decode()
        assert "Traceback" not in err and "Exception ignored" not in err, (delay, err)
        assert proc.returncode in ({0, 128 + signum} if sent else {0}), (delay, proc.returncode, err)
        if proc.returncode:
            assert err.rstrip().endswith("tracekit: aborted"), err


@pytest.mark.parametrize("when", ["before main's handlers", "in an exit handler", "in a weakref callback"])
def test_interrupt_outside_main_is_aborted_not_a_traceback(tmp_path, when):
    """run() installs the handler that raises KeyboardInterrupt, then calls main(), whose
    `try` turns it into "tracekit: aborted". A signal between the two, or once main() has
    returned (exit handlers, flushing the streams), raised KeyboardInterrupt where nothing
    caught it: a traceback (from an atexit callback: "Exception ignored", then exit 0)."""
    if when == "before main's handlers":  # main() stands for the moment before its `try`
        setup = "m.main = lambda argv=None: os.kill(os.getpid(), signal.SIGINT)"
    elif when == "in a weakref callback":  # signals.py: "Exception ignored in: <function ...>", a traceback, and the run went on
        setup = ("import weakref\n"
                 "class A: pass\n"
                 "def callback(ref):\n"
                 "    os.kill(os.getpid(), signal.SIGINT)\n"
                 "    sum(range(100000))  # the handler runs here, inside the callback\n"
                 "def command(argv=None):\n"
                 "    a = A(); r = weakref.ref(a, callback); del a\n"
                 "    time.sleep(30)  # ordinary code: the interrupt must stop it now\n"
                 "m.main = command")
    else:
        setup = ("m.main = lambda argv=None: None\n"
                 "atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(1)))")
    code = f"import atexit, os, signal, sys, time\nimport tracekit.cli.main\nm = sys.modules['tracekit.cli.main']\n{setup}\nm.run()\n"
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert time.monotonic() - started < 20, "the interrupt did not stop the run"
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
    assert proc.returncode == 130 and proc.stderr == "tracekit: aborted\n", (proc.returncode, proc.stderr)


@pytest.mark.parametrize("changed", [ImportError("initialization failed"), OSError("read interrupted"), MemoryError()])
def test_an_interrupt_that_arrives_as_another_error_is_aborted(monkeypatch, changed):
    """signals.py, 1 of 100 SIGTERMs: exit 1, "internal error: ImportError: initialization
    failed". The KeyboardInterrupt had been raised inside a pybind11 module's initialisation
    (matplotlib, imported while the workers parse), which turns any exception into that
    ImportError. After an interrupt the run ends as aborted, whatever error carries it."""
    import tracekit.api
    from tracekit.errors import INTERRUPTS

    def interrupted_import(*args, **kwargs):
        INTERRUPTS.append(signal.SIGTERM)  # what the handler records before it raises
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise changed from exc

    monkeypatch.setattr(tracekit.api, "scan", interrupted_import)
    try:
        code, _, err = run_cli("info", TINY)
    finally:
        INTERRUPTS.clear()
    assert code == 143 and err == "tracekit: aborted\n", (code, err)


_NO_FEEDER_THREAD = """
import sys
import multiprocessing.queues


def cannot_start(self):
    raise RuntimeError("can't start new thread")


multiprocessing.queues.Queue._start_thread = cannot_start  # as under `ulimit -v` / `ulimit -u`
sys.argv = ["tracekit", *sys.argv[1:]]
from tracekit.cli.main import run
run()
"""


@pytest.mark.skipif(not (SHARED / "torch" / "v100_dlrm_8ranks").exists(), reason="needs ../shared/fixtures")
def test_a_pool_that_cannot_start_its_feeder_thread_falls_back_to_one_process(tmp_path):
    """The edge fuzz's hang (a rank directory under a 200 MB address-space limit, as a normal
    user): the pool's manager thread could not start the call queue's feeder thread, died with
    its traceback on stderr, and the ranks' results were waited for forever. Now the wait sees
    the manager gone, the pool is stopped and the ranks are read in this process: the same
    result as with --workers 1, no traceback, no hang."""
    ranks = SHARED / "torch" / "v100_dlrm_8ranks"
    for r in (0, 1):
        shutil.copy(ranks / f"rank{r}.json.gz", tmp_path / f"rank{r}.json.gz")
    argv = ["analyze", str(tmp_path), "--format", "json"]
    broken = subprocess.run([sys.executable, "-c", _NO_FEEDER_THREAD, *argv, "--workers", "2"],
                            capture_output=True, text=True, timeout=120)
    serial = run_cli(*argv, "--workers", "1")
    assert broken.returncode == 0 == serial.returncode, broken.stderr
    assert "Traceback" not in broken.stderr and "Exception in thread" not in broken.stderr
    assert json.loads(broken.stdout)["ranks"] == json.loads(serial.stdout)["ranks"] == 2
    assert json.loads(broken.stdout)["per_rank"] == json.loads(serial.stdout)["per_rank"]


def test_a_parallel_parse_whose_feeder_thread_cannot_start_reads_in_one_process(big_trace):
    """The same for the parallel parse of one large trace: no hang, no traceback, the serial
    parse's result."""
    broken = subprocess.run([sys.executable, "-c", _NO_FEEDER_THREAD, "info", str(big_trace), "--format", "json", "--workers", "2"],
                            capture_output=True, text=True, timeout=120)
    serial = run_cli("info", big_trace, "--format", "json", "--workers", "1")
    assert broken.returncode == 0 == serial.returncode, broken.stderr
    assert "Traceback" not in broken.stderr and "Exception in thread" not in broken.stderr
    assert json.loads(broken.stdout) == json.loads(serial.stdout)
