"""One Kineto trace read by worker processes builds the very Trace the serial parser builds.

The pieces are made small here (a few hundred KB) so that every shared trace is cut into
many pieces, each decoded in sub-chunks, by two forked workers; the serial parser's own
chunking is shrunk too, to show that no table depends on where a file is cut.
"""

from __future__ import annotations

import gzip
import json
import pathlib

import numpy as np
import pandas as pd
import pytest

import tracekit
import tracekit.parsers.kineto as kineto
import tracekit.parsers.kineto_parallel as parallel
from tracekit.parsers import parse

from conftest import sweep

SHARED = pathlib.Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "torch"
TRACES = sorted(SHARED.glob("*.json.gz")) + sorted((SHARED / "v100_dlrm_8ranks").glob("rank0.json.gz"))


@pytest.fixture
def small_pieces(monkeypatch):
    """Parallel parsing from the first byte, in pieces of ~256 KB; records what _run returned."""
    monkeypatch.setattr(parallel, "MIN_PARALLEL_BYTES", 0)
    monkeypatch.setattr(parallel, "MIN_PIECE_BYTES", 1 << 18)
    monkeypatch.setattr(parallel, "SUB_BYTES", 1 << 17)
    runs: list[list | None] = []
    real_run = parallel._run

    def spy(pieces, *args):
        result = real_run(pieces, *args)
        runs.append(None if result is None else pieces)
        return result

    monkeypatch.setattr(parallel, "_run", spy)
    return runs


def assert_same_trace(a, b) -> None:
    for table in ("kernels", "launches", "ops", "ranges"):
        pd.testing.assert_frame_equal(getattr(a, table), getattr(b, table), check_exact=True, obj=table)
    assert a.meta == b.meta
    assert a.warnings == b.warnings


@pytest.mark.filterwarnings("error")  # no Python warning on either path (the analyses' own: test_costs_current_torch)
@pytest.mark.parametrize("path", sweep(TRACES), ids=lambda p: p.name)
def test_workers_build_the_serial_trace(path, small_pieces):
    serial = parse(path, workers=1)
    together = parse(path, workers=2)
    assert small_pieces and small_pieces[0] is not None, "the parallel path fell back to the serial parser"
    # Cut into many pieces: the uncompressed JSON over ~256 KB pieces (8 per worker at most).
    assert len(small_pieces[0]) >= min(8, serial.meta["size_bytes"] // (1 << 18))
    assert_same_trace(serial, together)
    # The counts are the file's: kernels (GPU activities) by category, read with the stdlib.
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    gpu = [e for e in events if e.get("ph") == "X" and str(e.get("cat", "")).lower() in
           ("kernel", "gpu_memcpy", "memcpy", "gpu_memset", "memset")]
    # less those whose times the profiler lost (trace health drops them, and counts them)
    lost = sum(p["count"] for p in together.meta["health"] if p["problem"].startswith("have ts 0 and dur 0")
               and p["kind"] in ("kernel", "memcpy", "memset"))
    assert lost == (sum(e["ts"] == 0 and e["dur"] == 0 for e in gpu) if lost else 0)
    assert len(together.kernels) == len(gpu) - lost


def test_serial_chunking_changes_nothing(monkeypatch):
    path = SHARED / "mi300x_resnet_act_checkpoint_rank0.json.gz"
    whole = parse(path, workers=1)
    monkeypatch.setattr(kineto, "CHUNK_EVENTS", 997)  # 57 chunks, cut anywhere
    assert_same_trace(whole, parse(path, workers=1))


def test_nested_objects_that_look_like_event_boundaries(tmp_path, small_pieces):
    """Events whose args hold lists of objects keyed like events (`}, {"name": ...`): a cut
    may land inside one; that piece does not decode whole, and the file is read serially."""
    events = [{"ph": "X", "cat": "cpu_op", "name": f"aten::op{i}", "pid": 1, "tid": 1, "ts": i * 10.0, "dur": 5.0,
               "args": {"External id": i, "list": [{"name": "x}, {", "id": j} for j in range(40)]}}
              for i in range(3000)]
    path = tmp_path / "nested.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}, indent=1))
    serial = parse(path, workers=1)
    assert_same_trace(serial, parse(path, workers=2))
    assert len(small_pieces) == 1  # the parallel path was tried (here it hands the file back)
    assert len(serial.ops) == 3000


def test_cut_short_trace_reads_as_serial(tmp_path, small_pieces):
    """A file cut mid-event goes to the serial parser, which salvages it and says so."""
    with gzip.open(SHARED / "h100_qwen1.5-0.5b_hf_inference.json.gz", "rb") as f:
        data = f.read()
    path = tmp_path / "cut.json"
    path.write_bytes(data[: len(data) * 2 // 3])
    serial = parse(path, workers=1)
    together = parse(path, workers=2)
    assert small_pieces == [None]  # the workers' pieces did not all decode
    assert_same_trace(serial, together)
    assert any("cut short" in w for w in together.warnings)


def test_thread_names_keep_one_code_across_tables_chunks_and_workers(tmp_path, small_pieces, monkeypatch):
    """Older traces name threads ("main", "worker"): a launch on "worker" must link to the op
    on "worker", however the file is cut (serial chunks or worker pieces)."""
    events, corr = [], 1
    for i in range(3000):
        for thread in ("main", "worker"):
            t = i * 40.0 + (20.0 if thread == "worker" else 0.0)
            events += [
                {"ph": "X", "cat": "cpu_op", "name": f"aten::mm_{thread}", "pid": "proc", "tid": thread, "ts": t, "dur": 10.0, "args": {}},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": "proc", "tid": thread, "ts": t + 1, "dur": 2.0,
                 "args": {"correlation": corr}},
                {"ph": "X", "cat": "kernel", "name": f"gemm_{thread}", "pid": 0, "tid": 7, "ts": t + 5, "dur": 3.0,
                 "args": {"correlation": corr, "device": 0, "stream": 7}},
            ]
            corr += 1
    path = tmp_path / "named_threads.json"
    path.write_text(json.dumps({"traceEvents": events}))
    monkeypatch.setattr(kineto, "CHUNK_EVENTS", 997)
    serial = tracekit.load(path, workers=1)
    assert_same_trace(serial, tracekit.load(path, workers=2))
    assert small_pieces and small_pieces[0] is not None
    k, ops = serial.kernels, serial.ops
    assert (k["op"] >= 0).all()
    # every kernel's op is the one on its own thread: gemm_main <- aten::mm_main, ...
    op_names = ops["name"].astype(str).to_numpy()[k["op"].to_numpy()]
    assert (op_names == np.char.replace(k["name"].astype(str).to_numpy().astype(str), "gemm_", "aten::mm_")).all()
    # "main", "proc", "worker" in name order: -2, -3, -4
    assert sorted(set(ops["tid"])) == [-4, -2] and set(ops["pid"]) == {-3}


@pytest.mark.parametrize("error", [RuntimeError("in the caller"), OSError("in the caller"), ImportError("in the caller")])
def test_an_error_of_the_meanwhile_hook_is_the_callers(error, small_pieces):
    """`meanwhile` (work done while the workers decode) failing is not the workers failing:
    its error comes out as it is, after the pool has stopped, and the file is not re-read."""
    calls = []

    def meanwhile():
        calls.append(1)
        raise error

    with pytest.raises(type(error), match="in the caller"):
        tracekit.load(SHARED / "h100_qwen1.5-0.5b_hf_inference.json.gz", workers=2, meanwhile=meanwhile)
    assert calls == [1]
    assert small_pieces == []  # _run raised; nothing fell back to the serial parser


def test_the_meanwhile_hook_runs_while_the_workers_decode(small_pieces):
    calls = []
    trace = tracekit.load(SHARED / "h100_qwen1.5-0.5b_hf_inference.json.gz", workers=2, meanwhile=lambda: calls.append(1))
    assert calls == [1] and small_pieces and small_pieces[0] is not None
    assert len(trace.kernels) == 1707
