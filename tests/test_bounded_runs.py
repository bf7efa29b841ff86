"""Runs that end, and outputs that are whole (issues 33 and 29): hostile numbers in device
files and exports, outputs published together, staging left by killed runs removed, the
out-of-memory line naming the trace with a measured need, and an interrupt that ends a run
whose main thread is stuck in native code."""

from __future__ import annotations

import errno
import fcntl
import gzip
import os
import pathlib
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from helpers import run_cli
from conftest import shared

REPO = pathlib.Path(__file__).resolve().parents[1]
TINY = REPO / "fixtures" / "cpu_tiny_dense_generate.json.gz"
TINY_CONFIG = REPO / "fixtures" / "cpu_tiny_dense.config.json"
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
CHECKS_SHARED = True  # only the Nsight and bert tests need them (shared() skips)


def device_file(tmp_path: pathlib.Path, **figures: str) -> pathlib.Path:
    values = {"matrix_tflops": "{ bf16 = 100.0, fp32 = 50.0 }", "vector_tflops": "{ fp32 = 50.0 }", "memory_gbps": "1000",
              **figures}
    path = tmp_path / "lab.toml"
    path.write_text('[LAB-GPU]\nname = "Lab GPU"\n' + "".join(f"{k} = {v}\n" for k, v in values.items()))
    return path


# --- hostile numbers -----------------------------------------------------------------------

@pytest.mark.parametrize("figure, value, key", [
    ("memory_gbps", "5e-324", "[LAB-GPU].memory_gbps"),  # denormal: accepted before, then "overflow encountered in divide"
    ("memory_gbps", "0.5", "[LAB-GPU].memory_gbps"),  # half a GB/s: no GPU
    ("matrix_tflops", "{ bf16 = 1e-300 }", "[LAB-GPU].matrix_tflops.bf16"),
    ("vector_tflops", "{ fp32 = 0.001 }", "[LAB-GPU].vector_tflops.fp32"),  # below 0.01 TFLOP/s
    ("host_link_gbps", "1e-300", "[LAB-GPU].host_link_gbps"),
    ("interconnect_gbps", "1e-10", "[LAB-GPU].interconnect_gbps"),  # 0 says none; a tiny bandwidth is hostile
    ("memory_gbps", "1e308", "[LAB-GPU].memory_gbps"),  # x 1e9 would be infinite
])
def test_device_figures_outside_physical_ranges_exit_2_naming_the_key(tmp_path, figure, value, key):
    spec = device_file(tmp_path, **{figure: value})
    proc = run_cli("analyze", TINY, "--device-file", spec, "--device", "LAB-GPU", "--format", "json")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [proc.stderr.strip()] and proc.stderr.startswith(f"tracekit: error: {spec}: {key}: must be"), proc.stderr
    assert "Warning" not in proc.stderr


def test_device_figures_at_the_edges_of_the_ranges_are_accepted(tmp_path):
    """1 GB/s and 0.01 TFLOP/s are the lowest figures taken; 0 interconnect says none."""
    spec = device_file(tmp_path, memory_gbps="1", matrix_tflops="{ bf16 = 0.01 }", interconnect_gbps="0")
    proc = run_cli("analyze", TINY, "--device-file", spec, "--device", "LAB-GPU", "--format", "json")
    assert proc.returncode == 0 and "Warning" not in proc.stderr, proc.stderr


def test_calibrate_refuses_a_denormal_peak_naming_the_key(tmp_path):
    """calibrate with a 1e-300 TFLOP/s peak printed numpy's overflow warning and fitted on it."""
    spec = device_file(tmp_path, matrix_tflops="{ bf16 = 1e-300, fp32 = 1e-300 }")
    proc = run_cli("calibrate", TINY, "--model", TINY_CONFIG, "--device-file", spec, "--device", "LAB-GPU", "--format", "json")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"tracekit: error: {spec}: [LAB-GPU].matrix_tflops.bf16: must be at least 0.01, not 1e-300"), proc.stderr
    assert "Warning" not in proc.stderr


def test_an_export_time_beyond_int64_is_dropped_with_tracekits_warning(tmp_path):
    """An Nsight export whose RUNTIME.start holds a REAL of 1e300: numpy's "invalid value
    encountered in cast" reached stderr; now the call is dropped and counted in tracekit's
    warning (1e300 ns is beyond any capture: MAX_ABS_TIME_NS = 4e18)."""
    export = tmp_path / "export.sqlite"
    shutil.copy(shared("nsys", "rtx3080_tiny_nsys2026.1.sqlite"), export)
    export.chmod(0o644)
    with sqlite3.connect(export) as db:
        calls = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = 1e300 WHERE rowid = (SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_RUNTIME)")
    assert calls > 1
    proc = run_cli("info", export, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr and "numpy" not in proc.stderr, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "outside any plausible capture" in line]
    assert len(warnings) == 1 and warnings[0].startswith(f"tracekit: warning: {export}: 1 "), proc.stderr


# --- writers: published together; stale staging removed -----------------------------------

def test_diff_out_on_a_full_disk_leaves_neither_file(tmp_path, monkeypatch):
    """The disk fills while diff.md is written: diff.json was already in place and the run
    said "(nothing was written)". Now both are staged first and published together."""
    import tracekit.common.atomic as atomic

    real_fsync, calls = os.fsync, []

    def full_on_the_second(fd):
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(atomic.os, "fsync", full_on_the_second)
    out = tmp_path / "d"
    code, _, err = run_cli("diff", TINY, TINY, "--out", out, "--format", "json")
    assert code == 2 and "No space left on device (nothing was written)" in err, err
    assert len(calls) == 2
    assert not out.exists() or list(out.iterdir()) == [], list(out.iterdir())


def test_diff_out_writes_both_files(tmp_path):
    out = tmp_path / "d"
    code, _, err = run_cli("diff", TINY, TINY, "--out", out, "--format", "json")
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["diff.json", "diff.md", "tracekit-manifest.json"]


def _wait_for(predicate, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.002)
    return False


def test_staging_of_a_killed_run_is_removed_by_the_next_run(tmp_path):
    """SIGKILL while the bundle is written leaves `.bundle.tracekit-*`: no run removed it.
    The next run into the same place does; a staging directory a live run holds (locked) is
    left alone."""
    out = tmp_path / "bundle"
    proc = subprocess.Popen([sys.executable, "-m", "tracekit", "analyze", str(TINY), "--out", str(out), "--format", "json"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV, cwd=REPO)
    staging = lambda: [p for p in tmp_path.iterdir() if p.name.startswith(".bundle.tracekit-")]  # noqa: E731
    seen = _wait_for(staging, 60)
    proc.kill()
    proc.wait()
    if not seen:
        pytest.skip("the run finished before its staging directory was seen")
    killed = staging()
    assert killed and not out.exists()
    live = tmp_path / ".bundle.tracekit-live"  # what a run still writing holds
    live.mkdir()
    held = os.open(live, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        again = run_cli("analyze", TINY, "--out", out, "--format", "json")
        assert again.returncode == 0, again.stderr
        assert [p.name for p in staging()] == [live.name]
        assert (out / "summary.json").is_file()
    finally:
        os.close(held)


def test_stale_staging_files_beside_an_output_file_are_removed(tmp_path):
    """The same for single files (export --perfetto, diff --out): a `.NAME.tracekit-*` file
    no run holds is removed by the next write of NAME."""
    out = tmp_path / "d"
    out.mkdir()
    (out / ".diff.json.tracekit-killed").write_text("{")
    (out / ".diff.md.tracekit-killed").write_text("#")
    code, _, err = run_cli("diff", TINY, TINY, "--out", out, "--format", "json")
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["diff.json", "diff.md", "tracekit-manifest.json"]


# --- out of memory: the trace named, the need measured -------------------------------------

def test_the_out_of_memory_line_names_the_trace_and_its_measured_need(monkeypatch, tmp_path):
    """The need is errors.MEMORY_NEED_MB (benchmarks/memory_need.py): fixed + per MB x the
    trace's MB, a gzip's MB being its uncompressed JSON."""
    import tracekit.api
    from tracekit.errors import MEMORY_NEED_MB

    def no_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(tracekit.api, "scan", no_memory)
    code, _, err = run_cli("info", TINY)
    assert code == 2 and err.count("\n") == 1, err
    json_mb = len(gzip.decompress(TINY.read_bytes())) / 1e6
    fixed, per_mb = MEMORY_NEED_MB[("kineto", "info")]
    assert err.startswith(f"tracekit: error: {TINY}: out of memory: `info` on this {json_mb:,.1f} MB Kineto trace needs about "
                          f"{fixed + per_mb * json_mb:,.0f} MB of address space: raise the memory limit"), err


def test_a_thread_that_cannot_start_is_running_out_of_memory(monkeypatch):
    """A 46 MB trace under a limit: "internal error: RuntimeError: can't start new thread"
    (exit 1). A thread's stack is address space: that is the out-of-memory line, exit 2."""
    import tracekit.api

    def no_thread(*args, **kwargs):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(tracekit.api, "scan", no_thread)
    code, _, err = run_cli("info", TINY)
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"tracekit: error: {TINY}: out of memory"), err


def test_the_need_depends_on_the_command_and_the_format():
    from tracekit.errors import MEMORY_NEED_MB, out_of_memory

    nsys = shared("nsys", "rtx3080_tiny_nsys2026.1.sqlite")
    mb = nsys.stat().st_size / 1e6
    path, reason = out_of_memory(["analyze", str(nsys), "--out", "/nonexistent/out", "--device", "h100"])
    fixed, per_mb = MEMORY_NEED_MB[("nsys", "analyze --out")]
    assert path == str(nsys) and f"`analyze --out` on this {mb:,.1f} MB Nsight export needs about {fixed + per_mb * mb:,.0f} MB" in reason
    assert MEMORY_NEED_MB[("kineto", "analyze --out")] != MEMORY_NEED_MB[("kineto", "info")]


# --- an interrupt ends a run stuck in native code ------------------------------------------

_STUCK = """
import ctypes, os, sys
import tracekit.reports.bundle as bundle

def stuck(a, out_dir, top=15, summary_extra=None):
    os.makedirs(out_dir, exist_ok=True)
    open(os.path.join(out_dir, "report.md"), "w").write("half a bundle")
    libc = ctypes.CDLL(None)
    mutex, cond = ctypes.create_string_buffer(64), ctypes.create_string_buffer(64)  # zeroed: the static initialisers
    libc.pthread_mutex_lock(mutex)
    open(os.environ["STUCK_MARKER"], "w").write("stuck")
    libc.pthread_cond_wait(cond, mutex)  # never signalled, and not ended by a signal (what pyarrow's read did)

bundle.write_files = stuck
sys.argv = ["tracekit"] + sys.argv[1:]
from tracekit.__main__ import entry
entry()
"""


def test_sigterm_ends_a_run_whose_main_thread_waits_in_native_code(tmp_path):
    """The hang of issue 33 (pyarrow's read waiting on a pool thread that never started):
    Python runs a signal handler only between bytecodes of the main thread, so SIGTERM and
    SIGINT did nothing. Now the watchdog ends the run INTERRUPT_GRACE_S after the signal,
    with the abort line and 143, and removes the staging directory."""
    from tracekit.errors import INTERRUPT_GRACE_S

    out, marker = tmp_path / "bundle", tmp_path / "stuck"
    proc = subprocess.Popen([sys.executable, "-c", _STUCK, "analyze", str(TINY), "--out", str(out), "--format", "json"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**ENV, "STUCK_MARKER": str(marker)},
                            cwd=REPO)
    try:
        assert _wait_for(marker.exists, 60), proc.stderr.read() if proc.poll() is not None else "never stuck"
        time.sleep(0.2)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        proc.kill()
    assert proc.returncode == 143 and err.strip() == "tracekit: aborted", (proc.returncode, err)
    assert INTERRUPT_GRACE_S <= took < INTERRUPT_GRACE_S + 2.5
    assert [p.name for p in tmp_path.iterdir()] == ["stuck"]  # no bundle, no staging
