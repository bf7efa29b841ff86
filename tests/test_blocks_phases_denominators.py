"""Issue 38's review of the blocks, phases and denominators, checked against the raw traces.

1. Every share says its denominator where it is printed: the headline's block shares are of the
   GPU busy time of the whole trace (the blocks table's: GPU activity, overlap counted once,
   kernels before the first step included), its idle share of the step time; the sentence
   prints both durations.
2. The logits' work after the lm_head (vLLM's sampler: sort, cumsum, softmax, scatter, argmax,
   exponential_) is block `logits`, not `lm_head`: on the RTX 3090 vLLM trace, the kernels from
   each step's last GEMM to the next step's GPU window.
3. A step's CUDA-graph replays take the phase of its eager kernels (one phase per step); a trace
   with no phases (CloverLeaf) prints blocks without `unknown / `.
"""

from __future__ import annotations

import gzip
import json
import sqlite3

import numpy as np
import pytest

import tracekit
from conftest import shared
from tracekit.common.format import duration
from tracekit.reports.headline import headline

RTX = "rtx3090_vllm_gpt-oss-20b_decode_bs4_cudagraph.json.gz"
QWEN = "h100_qwen1.5-0.5b_hf_inference.json.gz"
CLOVER = "a100x4_cloverleaf_nsys2024.5.sqlite"
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def _raw_events(name: str) -> list[dict]:
    with gzip.open(shared("torch", name)) as f:
        return json.load(f)["traceEvents"]


def _union_us(spans: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end) spans (overlap counted once)."""
    total, reach = 0.0, -np.inf
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


@pytest.fixture(scope="module")
def rtx():
    return tracekit.analyze(shared("torch", RTX), workers=1)


@pytest.mark.parametrize("name", [RTX, QWEN])
def test_headline_says_both_denominators_and_the_busy_time_is_the_raw_union(name, rtx):
    a = rtx if name == RTX else tracekit.analyze(shared("torch", name), workers=1)
    events = _raw_events(name)
    busy_us = _union_us([(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATS])
    h, f = a.findings.headline, a.findings
    assert h.busy_ns == pytest.approx(busy_us * 1e3, abs=2e3)  # Kineto's us with 3 decimals
    assert h.busy_ns == pytest.approx(float(a.blocks["gpu_time_ns"].sum()))
    first = headline(f)[0]
    assert f"(of the GPU's busy time, {duration(h.busy_ns)}, whole trace)" in first
    assert f"of the {f.denominator} ({duration(f.denominator_ns)})." in first
    if name == QWEN:  # the busy time holds kernels before the profiled step: not the step time
        assert h.busy_ns / 1e6 == pytest.approx(45.65, abs=0.01) and f.denominator_ns / 1e6 == pytest.approx(35.90, abs=0.01)


def test_rtx3090_sampler_is_block_logits_and_lm_head_is_the_vocabulary_gemm(rtx):
    events = _raw_events(RTX)
    windows = sorted((e for e in events if e.get("cat") == "gpu_user_annotation"), key=lambda e: e["ts"])
    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    gemm = [k for k in kernels if "gemm" in k["name"].lower() or "gemv" in k["name"].lower()]
    opens = [w["ts"] for w in windows[1:]] + [np.inf]
    head, sampler = [], []
    for w, next_open in zip(windows, opens):
        last = max((g for g in gemm if w["ts"] <= g["ts"] <= w["ts"] + w["dur"]), key=lambda g: g["ts"])
        head.append(last)
        sampler += [k for k in kernels if last["ts"] < k["ts"] < next_open]
    assert len(windows) == len(head) == 17 and len(sampler) == 439
    k = rtx.kernels
    block = k["block"].astype(str).to_numpy()
    dur = k["duration_ns"].to_numpy()
    assert (block == "lm_head").sum() == 17
    assert dur[block == "lm_head"].sum() == pytest.approx(sum(g["dur"] for g in head) * 1e3, abs=20)  # 22.572 ms
    assert (block == "logits").sum() == 439
    assert dur[block == "logits"].sum() == pytest.approx(sum(s["dur"] for s in sampler) * 1e3, abs=500)  # 12.255 ms
    lines = headline(rtx.findings)[0]
    assert "forward / lm_head 11.8%" in lines


def test_rtx3090_graph_replays_take_their_steps_phase(rtx):
    k = rtx.kernels
    phase = k["phase"].astype(str).to_numpy()
    graph = k["graph_launch"].to_numpy()
    assert graph.sum() == 6833 and set(phase[graph]) == {"forward"}  # the eager kernels of every step are forward
    assert "unknown" not in set(rtx.blocks["phase"].astype(str))
    assert "unknown / " not in headline(rtx.findings)[0]


def test_cloverleaf_blocks_without_a_phase():
    a = tracekit.analyze(shared("nsys", CLOVER), workers=1)
    assert set(a.blocks["phase"].astype(str)) == {"unknown"}
    with sqlite3.connect(f"file:{shared('nsys', CLOVER)}?mode=ro", uri=True) as db:
        advec = sum(t for n, t in db.execute(
            "select s.value, k.end - k.start from CUPTI_ACTIVITY_KIND_KERNEL k join StringIds s on s.id = k.demangledName")
            if "advec_mom_kernel(" in n)
        spans = {}
        tables = {t for (t,) in db.execute("select name from sqlite_master where type = 'table'")}
        for table in {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"} & tables:
            for dev, s, e in db.execute(f"select deviceId, start, end from {table}"):
                spans.setdefault(dev, []).append((s, e))
    busy = sum(_union_us(v) for v in spans.values())
    first = headline(a.findings)[0]
    assert first.startswith(f"GPU time went to advec_mom_kernel {advec / busy:.1%}, ")  # 32.9%
    assert "unknown / " not in first
    from tracekit.reports.tables import block_rows
    table = block_rows(a)  # no phase column of "unknown" on every row
    assert table.head[:3] == ["block", "GPU time", "share"] and table.rows[0][:3] == ["advec_mom_kernel", duration(advec), f"{advec / busy:.1%}"]


def test_a_program_without_framework_ops_is_told_to_measure_bytes_not_to_record_shapes():
    """CloverLeaf (CUDA C++, no torch): none of its 303 ms of kernels has a cost, and the way to
    one is Nsight Compute's measured bytes (--ncu), not record_shapes or a model config."""
    a = tracekit.analyze(shared("nsys", CLOVER), workers=1)
    assert a.meta["blocks_basis"].startswith("the program's own units")
    efficiency = headline(a.findings)[1]
    assert "--ncu NCU.csv --bytes measured" in efficiency
    assert "emit_nvtx" not in efficiency and "--model" not in efficiency
