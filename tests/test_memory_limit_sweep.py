"""Under any memory limit every command ends (issue 33): `analyze --out`, `analyze --format
json` and `info`, on the shared bert trace and on a ~50 MB tile of it, under every
address-space limit (`ulimit -v`) from 300 to 700 MB in 25 MB steps, each in a fresh process
with a 60 s timeout:

- it ends with exit 0, or exit 2 and one error line that names the trace (no hang, no exit 1
  from OpenBLAS, no 127 from glibc, no std::terminate, no traceback);
- no staging directory (`.NAME.tracekit-*`) is left beside the bundle;
- and SIGTERM sent 2 s into `analyze --out` of the tile ends the run within 5 s.

Slow (~119 runs, ~2-5 minutes on 2 cores, run 2 at a time): the whole sweep is in the slow
set (the README's slow command); the quick set runs each command at the smallest and the
largest limit on the 1 MB trace."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import shared

REPO = pathlib.Path(__file__).resolve().parents[1]
LIMITS_MB = range(300, 701, 25)
COMMANDS = {"analyze --out": ("analyze", "--format", "json", "--out"), "analyze": ("analyze", "--format", "json"), "info": ("info",)}
TILE_BYTES = 50e6



BERT_NAME = "h100_bert_small_hf_inference.json.gz"


@pytest.fixture(scope="module")
def traces() -> dict[str, pathlib.Path]:
    """The bert trace and a ~50 MB tile of it, made once per machine in the temporary
    directory (a tile of a fixed source and size is always the same file)."""
    bert = shared("torch", BERT_NAME)
    cache = pathlib.Path(tempfile.gettempdir()) / "tracekit-tests"
    cache.mkdir(exist_ok=True)
    tile = cache / f"bert-tile-{int(TILE_BYTES / 1e6)}mb-{bert.stat().st_size}.json"
    if not tile.exists():
        partial = cache / f"{tile.name}.{os.getpid()}.partial"
        subprocess.run([sys.executable, str(REPO / "benchmarks" / "tile_kineto.py"), str(bert), str(partial), "--min-bytes",
                        str(TILE_BYTES)], check=True, capture_output=True)
        os.replace(partial, tile)
    return {"bert": bert, "tile": tile}


def limited(limit_mb: int, args: list[str]) -> list[str]:
    """`python -m tracekit ARGS` under an address-space limit, set by the shell that execs it
    (preexec_fn is not safe with the test's threads)."""
    return ["/bin/sh", "-c", 'ulimit -v "$0" && exec "$@"', str(limit_mb << 10), sys.executable, "-m", "tracekit", *args]


def one_run(trace: pathlib.Path, command: str, limit_mb: int, sigterm_after: float | None = None) -> dict:
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="tk-memlimit-"))
    args = [*COMMANDS[command][:1], str(trace), *COMMANDS[command][1:]]
    if command == "analyze --out":
        args.append(str(scratch / "bundle"))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    started = time.monotonic()
    proc = subprocess.Popen(limited(limit_mb, args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=scratch)
    sent = None
    if sigterm_after is not None:
        try:
            proc.wait(sigterm_after)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            sent = time.monotonic()
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        err = f"TIMEOUT after 60 s\n{err}"
    ended = time.monotonic()
    left = sorted(p.name for p in scratch.iterdir() if p.name != "bundle")
    import shutil

    shutil.rmtree(scratch, ignore_errors=True)
    return {"trace": trace, "command": command, "limit_mb": limit_mb, "rc": proc.returncode, "stderr": err, "left": left,
            "seconds": ended - started, "after_signal": None if sent is None else ended - sent}


def problems(r: dict) -> list[str]:
    """What is wrong with one run's ending (empty when it ended as it must)."""
    found = []
    lines = r["stderr"].splitlines()
    errors = [line for line in lines if line.startswith("tracekit: error:")]
    # (a blank line: click writes one before it raises Abort for an interrupt)
    others = [line for line in lines if line.strip() and not line.startswith(("tracekit: warning:", "tracekit: error:", "tracekit: wrote"))]
    if r["after_signal"] is not None:
        if r["after_signal"] > 5:
            found.append(f"ended {r['after_signal']:.1f} s after SIGTERM")
        if r["rc"] not in (0, 2, 143):
            found.append(f"exit {r['rc']} after SIGTERM")
        others = [line for line in others if line != "tracekit: aborted"]
    elif r["rc"] not in (0, 2):
        found.append(f"exit {r['rc']}")
    if r["rc"] == 2 and not (len(errors) == 1 and lines[-1] == errors[0] and errors[0].startswith(f"tracekit: error: {r['trace']}: ")):
        found.append("exit 2 without one error line naming the trace")
    if others:
        found.append(f"other output: {others[:3]}")
    if r["left"]:
        found.append(f"left behind: {r['left']}")
    return found


SWEEP = "~119 fresh processes under address-space limits, ~2-5 minutes on 2 cores"


def _judged(runs: list[dict]) -> list[str]:
    return [f"{r['trace'].name} `{r['command']}` at {r['limit_mb']} MB"
            f"{' (SIGTERM at 2 s)' if r['after_signal'] is not None else ''}: {'; '.join(problems(r))}: {r['stderr'][-300:]!r}"
            for r in runs if problems(r)]


def test_each_command_ends_at_the_smallest_and_largest_limit():
    """The quick set's share of the sweep: every command on the 1 MB trace, where the smallest
    limit runs out of memory and the largest holds (the 50 MB tile is the slow sweep's alone)."""
    bert = shared("torch", BERT_NAME)
    cases = [(bert, command, mb) for command in COMMANDS for mb in (LIMITS_MB[0], LIMITS_MB[-1])]
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda case: one_run(*case), cases))
    assert not _judged(runs), "\n".join(_judged(runs))
    assert any(r["rc"] == 2 for r in runs if r["limit_mb"] == LIMITS_MB[0])
    assert all(r["rc"] == 0 for r in runs if r["limit_mb"] == LIMITS_MB[-1])


@pytest.mark.slow(reason=SWEEP)
def test_every_command_ends_under_every_memory_limit(traces):
    cases = [(traces[name], command, mb) for name in ("bert", "tile") for command in COMMANDS for mb in LIMITS_MB]
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda case: one_run(*case), cases))
        # SIGTERM 2 s into the longest run (the tile's bundle), at every limit
        runs += list(pool.map(lambda mb: one_run(traces["tile"], "analyze --out", mb, sigterm_after=2.0), LIMITS_MB))
    bad = _judged(runs)
    assert not bad, "\n".join(bad)
    # the sweep spans both outcomes: the smallest limits run out, the largest hold every command
    assert any(r["rc"] == 2 for r in runs) and all(r["rc"] == 0 for r in runs if r["limit_mb"] == 700 and r["after_signal"] is None)
