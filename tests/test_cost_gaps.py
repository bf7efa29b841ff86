"""Costs left on the table (issue 19, item 9): kernels launched before the capture whose
grid Kineto did not record, Inductor kernels without kernel_num_gb, graph replays under
a compiled autograd op."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tracekit
from conftest import shared
from synthetic import KinetoBuilder

MUL = ("void at::native::vectorized_elementwise_kernel<8, at::native::AUnaryFunctor<c10::BFloat16, c10::BFloat16, "
       "c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int, ...)")


def _precapture(b: KinetoBuilder, name: str, ts: float, dur: float, correlation: int) -> None:
    # The real form (mi300x_resnet_act_checkpoint_rank0): a kernel launched before the
    # capture has no runtime event, an older correlation id, and no grid / block:
    # {'cat': 'kernel', 'name': 'void at::native::vectorized_elementwise_kernel<8, ...MulFunctor...>',
    #  'args': {'device': 2, 'stream': 0, 'correlation': 4066, 'kind': 'Dispatch Kernel'}}
    b.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
                     "args": {"device": 0, "stream": 7, "correlation": correlation, "kind": "Dispatch Kernel"}})


def test_kernels_without_a_recorded_grid_borrow_by_name_when_all_donors_agree(tmp_path):
    b = KinetoBuilder()
    b.corr = 100  # captured launches have correlation ids above the pre-capture ones
    _precapture(b, MUL, 1, 4, correlation=7)
    _precapture(b, "other_kernel_mul", 6, 4, correlation=8)
    # two donors of MUL with different grids but the same cost: aten::mul of two [1024, 1024] bf16
    # -> 1024*1024 FLOPs, 2 x 2 MiB read, 2 MiB written
    for ts, grid in ((20, [512, 1, 1]), (40, [1024, 1, 1])):
        b.op("aten::mul", ts, 10, dims=[[1024, 1024], [1024, 1024]], types=["c10::BFloat16", "c10::BFloat16"])
        b.kernel(MUL, ts + 1, ts + 100, 5)
        b.events[-1]["args"]["grid"] = grid
    # donors of other_kernel_mul disagree ([1024, 1024] and [2048, 1024]): no borrowing
    for ts, rows in ((60, 1024), (80, 2048)):
        b.op("aten::mul", ts, 10, dims=[[rows, 1024], [rows, 1024]], types=["c10::BFloat16", "c10::BFloat16"])
        b.kernel("other_kernel_mul", ts + 1, ts + 100, 5)
    k = tracekit.analyze(b.write(tmp_path / "precap.json")).kernels
    borrowed = k[(k["name"] == MUL) & (k["launch"] < 0)].iloc[0]
    assert borrowed["cost_source"] == "inferred from kernels of the same name"
    assert borrowed["flops"] == 1024 * 1024 and borrowed["bytes_read"] == 2 * 1024 * 1024 * 2
    assert borrowed["bytes_written"] == 1024 * 1024 * 2
    other = k[(k["name"] == "other_kernel_mul") & (k["launch"] < 0)].iloc[0]
    assert np.isnan(other["flops"]) and "before the capture" in other["unknown_reason"]


def test_resnet_precapture_kernels_borrow_only_unanimous_costs():
    # mi300x ResNet rank 0: 31.8 ms of kernels were launched before the capture, none with a
    # grid. Every kernel costed by name must have donors (same name, op shapes) that all agree.
    # The place in a later iteration (tracekit.costs.repeated) comes first: a kernel costed so
    # has the cost of a kernel of its name.
    k = tracekit.analyze(shared("torch", "mi300x_resnet_act_checkpoint_rank0.json.gz")).kernels
    by_name = k[k["cost_source"] == "inferred from kernels of the same name"]
    by_place = k[k["cost_source"] == "inferred from the same place in a later iteration"]
    assert len(by_name) + len(by_place) and (by_name["grid_x"] < 0).all() and by_place["launched_before_capture"].all()
    later = k[~k["launched_before_capture"] & k["flops"].notna()]
    for (name, flops), _ in by_place.groupby([by_place["name"].astype(str), "flops"]):
        assert ((later["name"].astype(str) == name) & (later["flops"] == flops)).any()
    donors = k[k["cost_source"] == "op shapes"]
    for name, group in by_name.groupby(by_name["name"].astype(str)):
        d = donors[donors["name"].astype(str) == name]
        assert len(d) and d["flops"].nunique() == 1 and d["bytes_read"].nunique() == 1
        assert (group["flops"] == d["flops"].iloc[0]).all()


INDUCTOR_ARGS = {"Input Dims": [[1, 256], [1, 256], []], "Input type": ["float", "c10::BFloat16", "Scalar"],
                 "Concrete Inputs": ["", "", "256"], "kernel_backend": "triton",
                 "kernel_name": "triton_poi_fused__to_copy_cat_slice_1"}


def _graph_launch(b: KinetoBuilder, name: str, launch_ts: float, gpu_ts: float, dur: float) -> None:
    b.corr += 1
    b.events.append({"ph": "X", "cat": "cuda_runtime", "name": "hipGraphLaunch", "pid": 1, "tid": 1,
                     "ts": launch_ts, "dur": 5.0, "args": {"correlation": b.corr}})
    b.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": gpu_ts, "dur": dur,
                     "args": {"correlation": b.corr, "device": 0, "stream": 7, "kind": "Dispatch Task"}})


def test_inductor_kernels_without_kernel_num_gb_cost_from_their_launcher_record(tmp_path):
    # Real form (mi300x_xdit_flux1_capture_rank0): at capture time Inductor's launcher is a
    # cpu_op named after the kernel, {'Input Dims': [[1, 256], [1, 256], []], 'Input type':
    # ['float', 'c10::BFloat16', 'Scalar'], 'Concrete Inputs': ['', '', '256'], 'kernel_backend':
    # 'triton', ...} and no kernel_num_gb; the kernel then runs from a hipGraphLaunch under
    # `Torch-Compiled Region: 0/0`, a cpu_op without shapes.
    name = "triton_poi_fused__to_copy_cat_slice_1"
    b = KinetoBuilder()
    b.op(name, 0, 10, dims=INDUCTOR_ARGS["Input Dims"], types=INDUCTOR_ARGS["Input type"],
         **{k: v for k, v in INDUCTOR_ARGS.items() if k not in ("Input Dims", "Input type")})
    b.op("Torch-Compiled Region: 0/0", 50, 20)
    _graph_launch(b, name, 55, 100, 3)
    b.kernel(name, 1, 200, 3)  # and one launched directly under its launcher record (eager Inductor)
    k = tracekit.analyze(b.write(tmp_path / "inductor.json")).kernels
    # every tensor argument once: [1, 256] fp32 + [1, 256] bf16 = 1024 + 512 B; 256 FLOPs (one per element)
    assert (k["cost_source"] == "Inductor kernel arguments").all()
    assert (k["bytes_read"] + k["bytes_written"] == 256 * 4 + 256 * 2).all() and (k["flops"] == 256).all()


def test_graph_replays_under_a_compiled_backward_keep_the_graph_reason(tmp_path):
    # A CUDA graph replayed inside `CompiledFunctionBackward` (torch.compile + cudagraphs in
    # training): the op around cudaGraphLaunch did not launch these kernels one by one, so
    # "no cost model for CompiledFunctionBackward" was the wrong reason.
    b = KinetoBuilder()
    b.op("CompiledFunctionBackward", 0, 100)
    _graph_launch(b, "Cijk_Alik_Bljk_BBS_BH_MT128x128x64_MI16x16x1", 10, 200, 30)
    k = tracekit.analyze(b.write(tmp_path / "graph_bwd.json")).kernels
    row = k.iloc[0]
    assert np.isnan(row["flops"]) and row["unknown_reason"].startswith("launched by a CUDA/HIP graph")


def test_xdit_flux_inductor_kernels_are_costed():
    # 433 graph-replayed triton_poi/red/per kernels (7.8% of kernel time) had no cost.
    k = tracekit.analyze(shared("torch", "mi300x_xdit_flux1_capture_rank0.json.gz")).kernels
    inductor = k[k["name"].astype(str).str.match(r"triton_(poi|red|per)_")]
    assert len(inductor) == 433 and inductor["flops"].notna().all()
    one = k[k["name"] == "triton_poi_fused__to_copy_cat_slice_1"]
    assert len(one) and (one["bytes_read"] == 256 * 4 + 256 * 2).all()
