"""The rules that decide where GPU time goes when activities overlap, and where a step runs
on the GPU: each on a synthetic trace that mirrors a real form (quoted) and on a real one."""

from __future__ import annotations

import numpy as np
import pytest

import tracekit
from conftest import shared
from synthetic import KinetoBuilder


def _union_ns(spans) -> int:
    total, cur = 0, None
    for s, e in sorted(spans):
        if cur is None or s > cur[1]:
            total += (cur[1] - cur[0]) if cur else 0
            cur = [s, e]
        else:
            cur[1] = max(cur[1], e)
    return total + ((cur[1] - cur[0]) if cur else 0)


def test_a_spinning_collective_keeps_only_its_exposed_time(tmp_path):
    # The form of a DDP/DeepEP trace: `ncclDevKernel_AllReduce_Sum_f32_RING_LL` on its own
    # stream starts first and spins 100 µs waiting for a late peer, while two GEMMs run
    # beside it on the compute stream ([10, 40) and [50, 90) µs). Compute covers 70 µs; the
    # collective is exposed for 100 - 70 = 30 µs. (Before: the earlier-starting collective
    # took all 100 µs and compute 0.)
    b = KinetoBuilder()
    b.range("ProfilerStep#1", 0.0, 200.0)
    b.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 1.0, 0.0, 100.0, stream=20)
    b.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 2.0, 10.0, 30.0)
    b.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 3.0, 50.0, 40.0)
    a = tracekit.analyze(b.write(tmp_path / "t.json"))
    k = a.kernels
    comm = (k["block"] == "collective").to_numpy()
    assert comm.sum() == 1
    assert int(k.loc[comm, "exclusive_ns"].sum()) == 30_000
    assert int(k.loc[~comm, "exclusive_ns"].sum()) == 70_000
    assert int(a.overlap["exposed_ns"].iloc[0]) == 30_000 and int(a.overlap["overlapped_ns"].iloc[0]) == 70_000
    # blocks + idle still equal the span of the device's activity: 100 µs busy, no idle
    assert a.blocks["gpu_time_ns"].sum() == a.devices["busy_ns"].sum() == 100_000
    assert int(a.devices["idle_ns"].iloc[0]) == 0


def test_copies_come_between_compute_and_communication(tmp_path):
    # a memset [0, 20) beside a compute kernel [10, 30) and a collective [0, 40): compute 20,
    # the memset keeps [0, 10) = 10, the collective keeps [30, 40) = 10.
    b = KinetoBuilder()
    b.kernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", 1.0, 0.0, 40.0, stream=20)
    b.kernel("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", 2.0, 10.0, 20.0)
    b.events.append({"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 9, "ts": 0.0, "dur": 20.0,
                     "args": {"device": 0, "stream": 9, "correlation": 999}})
    a = tracekit.analyze(b.write(tmp_path / "t.json"))
    k = a.kernels
    kind, block = k["kind"].astype(str).to_numpy(), k["block"].astype(str).to_numpy()
    assert int(k["exclusive_ns"].to_numpy()[kind == "memset"].sum()) == 10_000
    assert int(k["exclusive_ns"].to_numpy()[(kind == "kernel") & (block == "collective")].sum()) == 10_000
    assert a.kernels["exclusive_ns"].sum() == 40_000


def test_ddp_collective_block_is_its_exposed_time():
    # a100_ddp_nccl_rank0: 21 NCCL kernels, union 46.876 ms; the raw reader finds 39.559 ms of
    # it not covered by compute kernels. Copies take their share before communication, so the
    # collective blocks hold the comm time covered by neither compute nor copies, by hand.
    a = tracekit.analyze(shared("torch", "a100_ddp_nccl_rank0.json.gz"))
    k = a.kernels
    comm = (k["block"] == "collective").to_numpy() & (k["kind"] == "kernel").to_numpy()
    spans = lambda m: list(zip(k["start"].to_numpy()[m].tolist(), k["end"].to_numpy()[m].tolist()))
    everything, others = _union_ns(spans(np.ones(len(k), bool))), _union_ns(spans(~comm))
    comm_alone = everything - others  # comm time that nothing else covers
    assert a.blocks.loc[a.blocks["block"] == "collective", "gpu_time_ns"].sum() == comm_alone
    assert int(a.overlap["exposed_ns"].sum()) == pytest.approx(39.559e6, abs=1e3)
    assert 39.0e6 < comm_alone <= 39.559e6
    assert a.blocks["gpu_time_ns"].sum() + int(a.devices["idle_span_ns"].sum()) == int(a.devices["span_ns"].sum())
