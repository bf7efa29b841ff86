"""Issue 19: verdicts that hold on traces nobody tuned for. The headline ranks what a user
can act on by time, idle time is charged to the host code that held the GPU up, and no
figure breaks a physical limit without a flag that says why.

Each test quotes the real form it mirrors; numbers are checked against the raw trace
(gzip + json, sqlite3) or a formula written here."""

from __future__ import annotations

import json
import pathlib
import shutil
import sqlite3

import numpy as np
import pytest

import tracekit
from tracekit.reports.headline import cause_sentences, headline as headline_words
from conftest import PROJECT_FIXTURES, SHARED, shared
from physical_limits import unflagged, violations
from synthetic import KinetoBuilder

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
BF16 = ["c10::BFloat16", "c10::BFloat16"]


def _every_trace() -> list[pathlib.Path]:
    shared("torch")  # skips (or fails under TRACEKIT_REQUIRE_SHARED) without the shared fixtures
    found = sorted(SHARED.glob("torch/*.json.gz")) + sorted(SHARED.glob("torch/*/*.json.gz")) + sorted(SHARED.glob("nsys/*.sqlite"))
    return found + sorted(PROJECT_FIXTURES.glob("*.json.gz"))


# -- plausibility: every trace we have ---------------------------------------------------------

@pytest.fixture(scope="module")
def summaries(shared_analysis) -> dict[str, dict]:
    out = {}
    shared_analysis.many([(path, None) for path in _every_trace()])  # made (or read back) in the order that waits least
    for path in _every_trace():
        # every row of every table, not only the top 15, so that nothing escapes the check
        out[f"{path.parent.name}/{path.name}"] = json.loads(shared_analysis.full_summary_of(path))
    return out


def test_no_unflagged_figure_breaks_a_physical_limit_on_any_trace(summaries):
    """tests/physical_limits.py reads the limits off summary.json alone (shares <= 100%,
    rates <= 105% of the device's peak, link efficiency <= 100%, no negative time),
    apart from tracekit's own pass; every figure past one must be in `flags`."""
    assert len(summaries) >= 30
    assert {name: unflagged(s) for name, s in summaries.items() if unflagged(s)} == {}
    # and every flag has a reason, and is in the warnings a user reads
    for name, s in summaries.items():
        for f in s["flags"]:
            assert f["reason"] and f["value"] > f["limit"], (name, f)
        if s["flags"]:
            assert any(w.startswith("implausible") for w in s["warnings"]), name


def test_the_limit_check_is_not_vacuous(summaries):
    """On the 2021 V100 ResNet-50 training trace cuDNN's Winograd kernels run above the direct
    formula's roofline (fewer multiplications than 2·N·K·C·R·S·P·Q): the independent checker
    finds them, and tracekit flags them with the algorithm as the reason, not clipped."""
    s = summaries["torch/v100_resnet50_train_legacy2021.json.gz"]
    found = list(violations(s))
    assert any(v[0] == "kernels" and v[2] == "efficiency" for v in found)
    winograd = [f for f in s["flags"] if f["table"] == "kernels" and "winograd" in f["where"].lower()]
    assert winograd and all("Winograd" in f["reason"] and f["value"] > 1.05 for f in winograd)
    # the kernel's figure stays as measured: t_min / time, unclipped
    row = s["top_kernels"][winograd[0]["row"]]
    assert row["efficiency"] == pytest.approx(row["t_min_ns"] / row["time_ns"]) and row["efficiency"] > 1.05


def test_what_to_fix_first_never_adds_up_past_the_step(summaries):
    """mi300x ResNet with activation checkpointing and NCCL: before, "what to fix first:
    blocks" reached 108.5% of step time (kernel durations that overlap, and kernels outside
    the steps, over the step time). Now each line is GPU time a kernel holds alone inside
    the steps, so the running total stays under the sum of the steps' GPU windows."""
    s = summaries["torch/mi300x_resnet_act_checkpoint_rank0.json.gz"]
    basis = s["what_to_fix_first"]["basis_ns"]
    # the ranked list's one denominator: the steps' GPU windows and the idle inside their host ranges outside them
    outside = (s["what_to_fix_first"].get("idle_outside_gpu_windows") or {}).get("idle_ns") or 0.0
    assert basis == s["what_to_fix_first"]["denominator_ns"] == pytest.approx(sum(r["duration_ns"] for r in s["steps"]) + outside)
    for table in ("ops", "kernels", "blocks"):
        rows = s["what_to_fix_first"][table]
        assert rows and rows[-1]["cumulative_share"] <= 1.0
        assert sum(r["time_ns"] for r in rows) <= basis


# -- the headline -------------------------------------------------------------------------------

def _exposed_allreduce_trace(tmp_path) -> str:
    """A step of 600 us of GEMM kernels with no op (no shapes, no cost), then an all_reduce
    nobody overlaps (360 us) and one 3 us aten::copy_ that has a cost."""
    b = KinetoBuilder()
    b.range("ProfilerStep#1", 0.0, 1100.0)
    t = 10.0
    for _ in range(6):
        b.kernel(GEMM, t, t + 5, 100.0)
        t += 100
    b.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", t, t + 5, 360.0)
    t += 360
    b.op("aten::copy_", t + 2, 3.0, dims=[[1024], [1024]], types=["float", "float"])
    b.kernel("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >", t + 3, t + 5, 3.0)
    return b.write(tmp_path / "allreduce.json")


def test_exposed_communication_outranks_a_tiny_copy(tmp_path):
    """Seen on a real trace: "a fully exposed all_reduce taking 36% of GPU time loses the
    headline to an aten::copy_ of 0.3%". Step GPU window: 10 us to 973 us = 963 us; the
    all_reduce holds 360 us alone: 360 / 963 = 37%. The copy's 3 us (0.3%) is under 1%."""
    a = tracekit.analyze(_exposed_allreduce_trace(tmp_path))
    step = a.steps.iloc[0]
    assert step["duration_ns"] == 963_000
    first = a.findings.causes[0]
    assert first["cause"] == "exposed_communication" and first["time_ns"] == 360_000
    # every share of the ranked list is of the step time: its GPU window and the GPU idle inside
    # its host range outside it (here all of the host range around the window: the GPU ran nothing else)
    wall = (max(step["start_ns"] + step["duration_ns"], step["host_start_ns"] + step["host_duration_ns"])
            - min(step["start_ns"], step["host_start_ns"]))
    assert a.findings.denominator == "step time" and a.findings.denominator_ns == wall
    assert first["share"] == pytest.approx(360_000 / wall)
    text = " ".join(headline_words(a.findings))
    assert f"Communication no compute hides takes 360.000 us ({round(100 * 360_000 / wall)}% of step time)" in text
    assert "aten::copy_" not in text and "recoverable" not in text  # the copy's 0.3%: no headline material
    copy = next(c for c in a.findings.causes if c["cause"] == "recoverable")
    assert copy["time_ns"] < 0.01 * 963_000


def test_names_in_the_headline_fit_sixty_characters():
    """A 400-character Tensile / templated name never reaches the headline whole."""
    for path in (shared("torch", "mi300x_bert_small_hf_inference.json.gz"), shared("torch", "h100_qwen1.5-0.5b_hf_inference.json.gz")):
        a = tracekit.analyze(path)
        for c in cause_sentences(a.findings):
            for key in ("op", "kernel"):
                name = c["evidence"].get(key)
                if name and len(name) > 60:
                    assert name not in c["sentence"]


# -- idle: the host code behind it --------------------------------------------------------------

def test_python_code_not_a_returned_sync_holds_the_gap(tmp_path):
    """Seen on an image pipeline: a cudaDeviceSynchronize that returns 5 us into a gap
    claimed all of it while the host resized images in Python (scipy) for most of it. Here:
    GEMM ends at 100 us, the sync runs 95-105 us, scipy's zoom 106-214 us, the next GEMM starts
    at 220 us: a 120 us gap waiting for the host, 108 us of it in zoom (its own time)."""
    b = KinetoBuilder()
    b.range("ProfilerStep#1", 0.0, 400.0)
    b.frame("model.py(10): forward", 1.0, 60.0)
    b.op("aten::mm", 2.0, 5.0, dims=[[1024, 1024], [1024, 1024]], types=BF16)
    b.kernel(GEMM, 3.0, 10.0, 90.0)
    b.call("cudaDeviceSynchronize", 95.0, 10.0)
    b.frame("scipy/ndimage/_interpolation.py(836): zoom", 106.0, 108.0)
    b.op("aten::mm", 215.0, 5.0, dims=[[1024, 1024], [1024, 1024]], types=BF16)
    b.kernel(GEMM, 216.0, 220.0, 90.0)
    a = tracekit.analyze(b.write(tmp_path / "zoom.json"))
    idle = a.findings.idle.set_index("category")["idle_ns"]
    assert idle["host_wait"] == 120_000 and idle["sync"] == 0
    top = a.findings.idle_host.iloc[0]
    assert (top["kind"], top["name"]) == ("frame", "scipy/ndimage/_interpolation.py(836): zoom")
    assert top["idle_ns"] == pytest.approx(108_000)
    # the idle cause's sentence names the frame (the headline, at most four lines, shows the
    # first cause only: here the kernel time above the roofline, 175 us)
    idle_sentence = next(c["sentence"] for c in cause_sentences(a.findings) if c["cause"] == "idle_host_wait")
    assert "the host was in frame scipy/ndimage/_interpolation.py(836): zoom for 108.000 us" in idle_sentence


def test_a_compiler_range_open_across_the_gap_is_named():
    """nvFuser: `executor_utils::Nvrtc::CompileProgram` runs 313.4 ms with the GPU idle; the
    old rule charged the innermost range only where it overlapped, and named a 3.3 us
    `ExpressionEvaluator::evaluate`. Checked from sqlite: the range lies in one idle gap of
    the GPU (between two activities) and no NVTX range on its thread nests inside it, so its
    own time in the gap is its whole duration."""
    path = shared("nsys", "h100_nvfuser_matmul_nsys2024.6.sqlite")
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    start, end, tid = db.execute("SELECT n.start, n.end, n.globalTid FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
                                 "WHERE coalesce(n.text, s.value) = 'executor_utils::Nvrtc::CompileProgram'").fetchone()
    gpu = db.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY "
                     "UNION ALL SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMSET").fetchall()
    nested = db.execute("SELECT count(*) FROM NVTX_EVENTS WHERE globalTid = ? AND start >= ? AND end <= ? AND eventType IN (59, 60) "
                        "AND NOT (start = ? AND end = ?)", (tid, start, end, start, end)).fetchone()[0]
    assert not any(s < end and e > start for s, e in gpu)  # the GPU did nothing while it compiled
    assert any(e <= start for s, e in gpu) and any(s >= end for s, e in gpu)  # a gap between two activities
    assert nested == 0
    a = tracekit.analyze(path)
    top = a.findings.idle_host.iloc[0]
    assert (top["kind"], top["name"]) == ("range", "executor_utils::Nvrtc::CompileProgram")
    assert top["idle_ns"] == pytest.approx(end - start)
    assert "executor_utils::Nvrtc::CompileProgram for 313.358 ms" in " ".join(headline_words(a.findings))


def test_step_markers_are_not_host_code():
    """A step range (ProfilerStep#N, a serving engine's execute_... beside step[DECODE ...]) is
    open across every gap of its step: it names no code, so it is never charged."""
    for path in (shared("torch", "h100_qwen1.5-0.5b_hf_inference.json.gz"), shared("torch", "mi300x_sglang_qwen3-8b_decode_bs32.json.gz")):
        names = tracekit.analyze(path).findings.idle_host["name"].astype(str)
        assert not names.str.match(r"^ProfilerStep#|^execute_|^step\[").any(), list(names)


# -- advice that fits the trace -----------------------------------------------------------------

def test_a_tensorrt_engine_is_not_told_to_record_with_emit_nvtx(tmp_path):
    """TensorRT writes its layers as NVTX ranges in the "TensorRT" domain, with no tensor
    shapes: "record with emit_nvtx" is advice for PyTorch, wrong for an engine. A copy of a
    real export gets that domain and a layer range around its kernels."""
    src = shared("nsys", "a100_saxpy_mpi_nsys2022.2.sqlite")
    before = tracekit.analyze(src)  # a CUDA program with no framework ops: told to measure bytes
    assert "--ncu NCU.csv --bytes measured" in " ".join(headline_words(before.findings))
    path = tmp_path / "trt.sqlite"
    shutil.copy(src, path)
    db = sqlite3.connect(path)
    first, last = db.execute("SELECT min(start), max(end) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    tid = db.execute("SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME LIMIT 1").fetchone()[0]
    db.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, domainId, text) VALUES (?, NULL, 75, ?, 7, 'TensorRT')", (first - 10, tid))
    db.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, domainId, text) VALUES (?, ?, 59, ?, 7, 'conv1 + relu1')",
               (first - 5, last + 5, tid))
    db.commit()
    db.close()
    text = " ".join(headline_words(tracekit.analyze(path).findings))
    assert "TensorRT engine" in text and "emit_nvtx(" not in text and "--ncu" not in text


# -- a flagged figure is printed flagged --------------------------------------------------------

def test_a_rate_above_the_device_peak_is_flagged_with_its_reason(tmp_path):
    """An elementwise op whose tensors (2 x 512 MiB of fp32 read, 512 MiB written: 1.61 GB)
    are said to move in 100 us: 16.1 TB/s on a 3.35 TB/s H100, 480% of peak. It stays as
    measured and is flagged, in summary.json `flags`, the warnings and the table."""
    b = KinetoBuilder()
    n = 128 * 1024 * 1024  # fp32 elements: 512 MiB per tensor
    b.op("aten::add", 0.0, 5.0, dims=[[n], [n], []], types=["float", "float", "Scalar"])
    b.kernel("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >", 1.0, 10.0, 100.0)
    a = tracekit.analyze(b.write(tmp_path / "fast.json"))
    k = a.kernel_summary.iloc[0]
    assert k["bytes"] == 3 * 4 * n and k["achieved_tbps"] == pytest.approx(3 * 4 * n / 100e3 / 1e3)
    assert k["efficiency"] == pytest.approx(k["achieved_tbps"] / 3.35, rel=1e-3) and k["efficiency"] > 4
    flags = {(f.table, f.figure) for f in a.flags}
    assert {("kernels", "efficiency"), ("kernels", "achieved_tbps"), ("ops", "efficiency")} <= flags
    assert any(w.startswith("implausible kernels efficiency") and "re-read from cache" in w for w in a.warnings)
    doc = json.loads(tracekit.summary_json(a))
    assert any(f["table"] == "kernels" and f["row"] == 0 and f["figure"] == "efficiency" for f in doc["flags"])
    from tracekit.reports.tables import FLAG, kernel_rows, Labels

    row = kernel_rows(a, 5, Labels(a)).rows[0]
    assert any(str(cell).endswith(FLAG) for cell in row)


def test_a_copy_faster_than_memory_is_flagged_once_in_its_cell(tmp_path):
    """A device-to-device copy of 1 GiB said to take 100 us (read and written: 21.5 TB/s on a
    3.35 TB/s H100):
    its rate and its efficiency (the rate over the bandwidth) are both flagged, and the one
    cell that shows them carries one mark, not one per figure."""
    b = KinetoBuilder()
    b.kernel("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >", 1.0, 10.0, 5.0)
    b.corr += 1
    b.events += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": 20.0, "dur": 1.0,
                  "args": {"correlation": b.corr}},
                 {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "pid": 0, "tid": 7, "ts": 30.0,
                  "dur": 100.0, "args": {"correlation": b.corr, "device": 0, "stream": 7, "bytes": 2**30}}]
    a = tracekit.analyze(b.write(tmp_path / "copy.json"))
    assert a.copy_summary.iloc[0]["achieved_tbps"] == pytest.approx(2 * 2**30 / 100e3 / 1e3)
    assert {("copies", 0, "achieved_tbps"), ("copies", 0, "efficiency")} <= {(f.table, f.row, f.figure) for f in a.flags}
    from tracekit.reports.tables import FLAG, copy_rows

    cell = copy_rows(a, 5).rows[0][-1]
    assert cell.endswith(FLAG) and cell.count(FLAG.strip()) == 1, cell
