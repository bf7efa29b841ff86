"""Steps from what repeats (tracekit.structure.steps.find_steps, structure_finder,
repetition), checked against the truth the recorders measured in the runs themselves
(fixtures/record_cpu_video_pipelines.py, record_cpu_generate_gpt2.py,
record_cpu_block_ranges.py) and against a real nsys export given NCCL-domain ranges."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tracekit.analysis.load import load
from tracekit.trace.column_text import as_text
from tracekit.structure.steps import find_steps, with_inferred_steps
from tracekit.structure.repeats import outermost_repeat

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "fixtures"
VIDEO_TRUTH = json.loads((FIXTURES / "cpu_video_pipelines_truth.json").read_text())
PER_BLOCK = {"self_attention", "cross_attention", "ffn"}


def test_outermost_repeat_takes_the_steps_not_the_layers_inside_them():
    layer = [10, 11, 12, 13]
    step = [1, 2, *layer * 6, 3, 4]  # a head, 6 layers, a tail
    codes = np.array([7, 8, 9, *step * 8, 20, 21])  # an encoder before, a decoder after
    found = outermost_repeat(codes)
    assert (found.start, found.period, found.count) == (3, len(step), 8)
    # inside one step, the outermost repeat is the layer stack
    inner = outermost_repeat(np.array(step))
    assert (inner.start, inner.period, inner.count) == (2, 4, 6)
    assert outermost_repeat(np.arange(50)) is None  # nothing repeats


def test_streaming_pipeline_steps_are_its_chunks_never_the_per_block_ranges():
    truth = VIDEO_TRUTH["streaming"]
    trace = load(FIXTURES / truth["trace"])
    windows, source = find_steps(trace)
    # the loop of the pipeline's calls: 4 DiT forwards, one more of the same weights, a VAE per chunk
    assert source == "pipeline loop"
    assert len(windows) == truth["steps"] == 4
    assert not any(w[0].split("#")[0] in PER_BLOCK for w in windows)
    # named by the Python frame that holds each chunk (the structure found it; the frame names it)
    assert all(w[0] == f"chunk#{j}" for j, w in enumerate(windows))
    # each step is one chunk: its time is the chunk's, measured by perf_counter in the profiled run
    for (_, lo, hi, _, _), seconds in zip(windows, truth["profiled"]["chunk_s"]):
        assert (hi - lo) * 1e-9 == pytest.approx(seconds, rel=0.02)


def test_text_to_video_with_default_options_finds_its_denoise_steps():
    truth = VIDEO_TRUTH["t2v"]
    trace = load(FIXTURES / truth["trace"])
    windows, source = find_steps(trace)
    # the loop of the DiT's calls between the text encoder's and the VAE's
    assert source == "pipeline loop"
    assert len(windows) == truth["steps"] == 8
    for (_, lo, hi, _, _), seconds in zip(windows, truth["profiled"]["step_s"]):
        assert (hi - lo) * 1e-9 == pytest.approx(seconds, rel=0.05)
    # each step holds exactly one patch-embedding Conv3d on the CFG batch [2, 16, 5, h, w]
    ops = trace.ops
    names = as_text(ops["name"])
    patch = [i for i in np.flatnonzero(names == "aten::conv3d") if ops["input_dims"].iat[i][0] == truth["patch_embedding_input"]]
    starts = ops["start"].to_numpy()[patch]
    assert [int(((starts >= lo) & (starts < hi)).sum()) for _, lo, hi, _, _ in windows] == [1] * 8
    # the text encoder (before) and the VAE decoder (after) are in no step
    assert starts.min() >= windows[0][1]


def test_gpt2_generate_with_default_options_is_one_prefill_and_its_decodes():
    truth = json.loads((FIXTURES / "cpu_tiny_gpt2_generate_truth.json").read_text())
    windows, source = find_steps(load(FIXTURES / truth["trace"]))
    kinds = [w[0].split("#")[0] for w in windows]
    assert kinds == ["prefill"] * truth["prefill_forwards"] + ["decode"] * truth["decode_forwards"]
    assert windows[0][0] == f"prefill#0 [B={truth['batch']} T={truth['prompt']}]"


def test_a_trace_with_per_layer_ranges_only_has_no_steps():
    trace = load(FIXTURES / "cpu_dit_block_ranges_only.json.gz")
    assert set(as_text(trace.ranges["name"]).tolist()) == PER_BLOCK  # the trace's only ranges
    assert find_steps(trace) == ([], None)


def _with_ranges(tmp_path: Path, domain_id: int, domain_name: str | None) -> Path:
    """A copy of the real FSDP nsys export with 34 NCCL-like group ranges added, in domain
    `domain_id` (named by an eventType 75 domain-create row, as nsys 2026 writes them)."""
    path = tmp_path / f"fsdp_domain{domain_id}.sqlite"
    shutil.copy(SHARED / "nsys" / "h100x2_fsdp_emit_nvtx_nsys2026.2.sqlite", path)
    db = sqlite3.connect(path)
    lo, hi, tid = db.execute("SELECT MIN(start), MAX(end), MIN(globalTid) FROM NVTX_EVENTS WHERE eventType = 59").fetchone()
    if domain_name is not None:
        db.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) VALUES (?, NULL, 75, ?, ?, ?)",
                   (lo, domain_name, tid, domain_id))
    period = (hi - lo) // 35
    for j in range(34):
        t = lo + j * period
        for k, name in enumerate(("ncclCommCount", "ncclGroupEnd")):
            db.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) VALUES (?, ?, 59, ?, ?, ?)",
                       (t + k * period // 2, t + k * period // 2 + period // 4, name, tid, domain_id))
    db.commit()
    db.close()
    return path


def test_nccl_domain_ranges_are_never_steps(tmp_path):
    nccl = load(_with_ranges(tmp_path, 1, "NCCL"))
    assert (as_text(nccl.ranges["domain"]) == "nvtx:NCCL").sum() == 68  # the parser read them, in NCCL's domain
    windows, source = find_steps(nccl)
    assert not any(w[0].startswith("nccl") for w in windows)
    assert source is None  # no shapes in this export: nothing else tells an iteration, and the report says why
    assert "68 range(s) named 'ncclCommCount', 'ncclGroupEnd' are a library's" in with_inferred_steps(nccl).warnings[-1]
    # the same ranges in the default domain, each spanning 1/140 of the run (dozens of launches,
    # unlike any NCCL range, which holds one launch at most: tests/test_library_ranges_by_content.py)
    # hold more than one call's work, so their cycle stands (no shapes say otherwise)
    user = load(_with_ranges(tmp_path, 0, None))
    windows, source = find_steps(user)
    assert source == "range cycle" and len(windows) == 34 and windows[0][0] == "ncclCommCount..ncclGroupEnd#0"


def _analyze(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracekit", "analyze", *args], capture_output=True, text=True, timeout=600,
                          cwd=FIXTURES.parent)


def test_step_option_names_the_step_and_the_report_says_so():
    done = _analyze(str(FIXTURES / "cpu_streaming_dit_stack.json.gz"), "--step", r"\): chunk$", "--format", "json")
    assert done.returncode == 0, done.stderr
    d = json.loads(done.stdout)
    assert d["trace"]["step_source"] == "user's --step"
    assert len(d["steps"]) == 4 and all(s["step"].endswith(f"chunk#{j}") for j, s in enumerate(d["steps"]))
    for s, seconds in zip(d["steps"], VIDEO_TRUTH["streaming"]["profiled"]["chunk_s"]):
        assert s["duration_ns"] * 1e-9 == pytest.approx(seconds, rel=0.02)
    bad = _analyze(str(FIXTURES / "cpu_streaming_dit_stack.json.gz"), "--step", "no_such_range")
    assert bad.returncode == 2 and "matches no range or Python frame" in bad.stderr and "Traceback" not in bad.stderr
    assert _analyze(str(FIXTURES / "cpu_streaming_dit_stack.json.gz"), "--step", "(").returncode == 2


def test_the_report_names_the_step_source():
    done = _analyze(str(FIXTURES / "cpu_t2v_clip_default.json.gz"), "--format", "markdown")
    assert done.returncode == 0, done.stderr
    assert "steps from: pipeline loop (weight reads: 8 periods of 1 call(s) of 1 network(s) (denoise \u00d71); 2 call(s) around the loop)" in done.stdout


def test_diff_says_when_the_runs_steps_come_from_different_sources():
    from tracekit.compare.diff import diff_summaries

    golden = Path(__file__).resolve().parent / "golden" / "torch__h200_llama3-8b_eager_decode_bs16.json.gz.summary.json"
    base = json.loads(golden.read_text())
    assert base["trace"]["step_source"] == "annotation"  # its decode_step ranges
    same = diff_summaries(base, json.loads(golden.read_text()))
    assert not any("different sources" in w for w in same["warnings"])
    other = json.loads(golden.read_text())
    other["trace"]["step_source"] = "range cycle"
    warned = [w for w in diff_summaries(base, other)["warnings"] if "different sources" in w]
    assert warned == ["the runs' steps come from different sources (base: annotation, new: range cycle): per-step figures "
                      "compare different units; name one with --step to compare like with like"]


def test_a_prefill_range_beside_decode_step_ranges_is_a_step():
    """record_cpu_decode.py: `prefill` over the prompt (batch 2 x 32 tokens), then 4
    `decode_step` ranges: the prefill is a step, so its work is inside a step."""
    from tracekit.trace.step_ownership import step_rows

    trace = load(FIXTURES / "cpu_tiny_llama_decode.json.gz")
    rows = step_rows(trace)
    assert as_text(trace.ranges["name"])[rows].tolist() == ["prefill"] + ["decode_step"] * 4
    ops = trace.ops
    sdpa = np.flatnonzero(as_text(ops["name"]) == "aten::scaled_dot_product_attention")
    prompt = [i for i in sdpa if ops["input_dims"].iat[i][0] == [2, 8, 32, 16]]  # the prefill's attention, 2 layers
    lo, hi = trace.ranges["start"].iat[rows[0]], trace.ranges["end"].iat[rows[0]]
    assert len(prompt) == 2 and all(lo <= ops["start"].iat[i] < hi for i in prompt)
