"""Blocks where a name or shape cannot say them (issue 38, item 2: "other" <= 10% on every fixture).

- A program with no ML structure (attribution/program_blocks.py): CloverLeaf (a hydrodynamics
  mini-app, Nsight Systems export, no framework ops) is split by its kernel functions, and each
  block's time is the sum of its kernels' times in the raw SQLite `CUPTI_ACTIVITY_KIND_KERNEL`
  table; the MPI saxpy by its NVTX range `saxpy`.
- A serving trace recorded without shapes (attribution/structure.after_final_norm): vLLM's
  gpt-oss-20b decode under CUDA graphs on an RTX 3090; the vocabulary projection (an eager
  aten::mm after the graph-replayed layers) is each step's last GEMM, right after the final norm.
"""

from __future__ import annotations

import json
import re
import sqlite3

import numpy as np
import pytest

import tracekit
from conftest import shared, shared_model
from tracekit.attribution.program_blocks import PROGRAM_BASIS, kernel_function


def _raw_kernels(path):
    """(demangled name, duration ns) per kernel, straight from the SQLite export."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as c:
        return c.execute("SELECT s.value, k.end - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                         "JOIN StringIds s ON s.id = k.demangledName").fetchall()


def _block_times(a) -> dict[str, int]:
    b = a.blocks
    return dict(zip(b["block"].astype(str), b["gpu_time_ns"].astype(int)))


def test_cloverleaf_blocks_are_its_kernel_functions_with_their_raw_times():
    path = shared("nsys", "a100x4_cloverleaf_nsys2024.5.sqlite")
    raw = _raw_kernels(path)
    # every CloverLeaf kernel is `clover::par_*_kernel<FUNCTION(...)::[lambda ...]>`: a person reads the
    # function off the name
    by_function: dict[str, int] = {}
    for name, duration in raw:
        function = re.match(r"void clover::par_\w+<(\w+)\(", name).group(1)
        by_function[function] = by_function.get(function, 0) + duration
    a = tracekit.analyze(str(path), workers=1)
    times = _block_times(a)
    assert a.meta["blocks_basis"] == PROGRAM_BASIS
    assert "other" not in times
    assert {b: t for b, t in times.items() if b != "memory"} == by_function
    assert len(by_function) == 15 and max(by_function, key=by_function.get) == "advec_mom_kernel"
    # the blocks and their time add up to all kernel time (1,312 kernels)
    assert sum(by_function.values()) == sum(d for _, d in raw) and len(raw) == 1312
    summary = json.loads(tracekit.api.summary_json(a))
    assert summary["trace"]["blocks_basis"] == PROGRAM_BASIS


def test_reports_say_what_the_blocks_are():
    """The terminal and report.html say under the blocks table that CloverLeaf's blocks are its
    own units; a model's report says they are layer parts."""
    import io

    from rich.console import Console

    from tracekit.reports import analyze as terminal_report, html
    from tracekit.reports.renderer import RenderOptions

    for path, words in ((shared("nsys", "a100x4_cloverleaf_nsys2024.5.sqlite"), "blocks: the program's own units"),
                        (shared("torch", "h100_bert_small_hf_inference.json.gz"), "blocks: a model's layer parts")):
        a = tracekit.analyze(str(path), workers=1)
        out = io.StringIO()
        terminal_report.render_console(a, Console(file=out, width=200), top=15)
        for text in (out.getvalue(), html.render(a, RenderOptions())):
            assert words in text.replace("&#x27;", "'").replace("&#39;", "'")


def test_saxpy_blocks_are_its_nvtx_ranges():
    path = shared("nsys", "a100_saxpy_mpi_nsys2022.2.sqlite")
    raw = _raw_kernels(path)
    a = tracekit.analyze(str(path), workers=1)
    b = a.blocks.set_index(a.blocks["block"].astype(str))
    assert b.loc["saxpy", "count"] == len(raw) == 5  # the five kernels, each inside the NVTX range `saxpy`
    assert int(b.loc["saxpy", "gpu_time_ns"]) == sum(d for _, d in raw)


def test_an_ml_program_keeps_layer_blocks():
    a = tracekit.analyze(str(shared("torch", "h100_bert_small_hf_inference.json.gz")), workers=1)
    assert a.meta["blocks_basis"] != PROGRAM_BASIS
    assert {"attention", "ffn"} <= set(a.blocks["block"].astype(str))


@pytest.mark.parametrize("name, function", [
    ("void clover::par_ranged2d_kernel<PdV_kernel(bool, int, clover::Buffer2D<double> &)::[lambda(int, int) (instance 1)]>"
     "(clover::Range2d, T1)", "PdV_kernel"),
    ("void clover::par_reduce_kernel<field_summary(global_variables &, parallel_ &)::[lambda(int) (instance 1)]>(T1)", "field_summary"),
    ("void launch<ns::update_halo(int, int)::{lambda(int)#3}>(T1)", "update_halo"),  # GCC's spelling of a lambda
    ("saxpy(double *, double *, double *, double, int)", "saxpy"),
    ("void at::native::<unnamed>::distribution_elementwise_grid_stride_kernel<float, (int)4>(long, T3)",
     "distribution_elementwise_grid_stride_kernel"),
    ("void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<bool, at::native::func_wrapper_t<bool, "
     "at::native::and_kernel_cuda(at::TensorIterator &)::[lambda() (instance 1)]>>>(T3)", "reduce_kernel"),
    ("<unnamed>::nvfuser_none_f0_c0_r0_g0(<unnamed>::Tensor<<unnamed>::__half, (int)3, (int)3>)", "nvfuser_none_f0_c0_r0_g0"),
    ("void cut<f(int)::[lambda", "f"),  # a name cut short keeps what it says
    ("void cut<(int)4, Functor<float", "cut"),
    ("", ""),
])
def test_kernel_function(name, function):
    assert kernel_function(name) == function


def test_unshaped_serving_steps_last_gemm_after_the_final_norm_is_the_lm_head():
    a = tracekit.analyze(str(shared("torch", "rtx3090_vllm_gpt-oss-20b_decode_bs4_cudagraph.json.gz")), workers=1)
    k = a.kernels.sort_values("start")
    assert all(d is None for d in a.trace.ops["input_dims"])  # recorded without shapes: no widths
    gemm = k[k["kernel_class"].astype(str) == "gemm"]
    owned = gemm[gemm["step"] >= 0]
    last = owned.groupby("step").tail(1)
    assert len(last) == k.loc[k["step"] >= 0, "step"].nunique() == 17
    head = gemm[gemm["block"].astype(str) == "lm_head"]
    assert list(head.index) == list(last.index)  # exactly each step's last GEMM, nothing else
    # the vocabulary projection's launch grid covers gpt-oss's vocabulary (201,088: its config.json):
    # 64-wide output tiles for the batched steps, 8 rows per block for the batch-1 GEMV
    vocab = json.loads(shared_model("gpt-oss-20b.config.json").read_text())["vocab_size"]
    tiled = head[head["name"].astype(str).str.contains("64x64")]
    assert len(tiled) == 16 and (tiled["grid_x"] * 64 == vocab).all()
    assert (head.loc[~head.index.isin(tiled.index), "grid_x"] * 8 == vocab).all()
    # each follows the final norm on its stream: the nearest GEMM / attention / norm kernel before it is a norm
    lane = k[k["stream"] == head["stream"].iloc[0]]
    cls = lane["kernel_class"].astype(str).to_numpy()
    block = lane["block"].astype(str).to_numpy()
    anchor = np.flatnonzero(np.isin(cls, ["gemm", "attention", "norm"]) | (block == "norm"))
    for i in np.flatnonzero(lane.index.isin(head.index)):
        before = anchor[anchor < i][-1]
        assert cls[before] == "norm" or block[before] == "norm"
    share = float(head["duration_ns"].sum() / k.loc[k["kind"].astype(str) == "kernel", "duration_ns"].sum())
    assert share == pytest.approx(0.119, abs=0.002)  # what was `other` before
    assert not (k["block"].astype(str) == "other").any()


def test_unshaped_emit_nvtx_gemms_take_their_sublayer_block():
    """FSDP T5 on two H100s (Nsight Systems, emit_nvtx: op names, no shapes, no modules): each
    sub-layer opens with an RMSNorm written out (aten::rsqrt); a sub-layer with the eager
    attention core (aten::_softmax between two bmm) is attention, one with the written-out GELU
    (aten::tanh) the FFN. Every GEMM of a sub-layer takes its block: q/k/v, QK^T, PV and the
    output projection attention; gate, up and down ffn. Half the kernels ran before the capture
    of their launch calls (no op): they take their identical kernels' blocks."""
    a = tracekit.analyze(str(shared("nsys", "h100x2_fsdp_emit_nvtx_nsys2026.2.sqlite")), workers=1)
    k = a.kernels[a.kernels["kind"].astype(str) == "kernel"].sort_values(["device", "stream", "start"])
    gemm = k["kernel_class"].astype(str) == "gemm"
    assert not (gemm & (k["block"].astype(str) == "other")).any()
    assert k.loc[k["block"].astype(str) == "other", "duration_ns"].sum() < 0.01 * k["duration_ns"].sum()  # was 93%
    for _, lane in k[k["op"] >= 0].groupby("device"):
        op = lane["op_name"].astype(str).to_numpy()
        sublayer = np.cumsum(op == "aten::rsqrt")
        seen = {"attention": 0, "ffn": 0}
        for s in np.unique(sublayer[sublayer > 0]):
            mine = sublayer == s
            blocks = set(lane["block"].astype(str).to_numpy()[mine & gemm[lane.index].to_numpy()])
            if "aten::_softmax" in op[mine]:
                assert blocks == {"attention"}
                seen["attention"] += 1
            elif "aten::tanh" in op[mine]:
                assert blocks == {"ffn"}
                seen["ffn"] += 1
        assert seen == {"attention": 13, "ffn": 13}
    # the same launch grid in two sub-layers: the position says the block, not the grid
    wide = k[gemm & (k["grid_y"] == 32) & (k["grid_z"] == 8)]
    assert set(wide["block"].astype(str)) == {"attention", "ffn"}
