"""Kernels launched before the capture began (no op, often no grid) costed from the same place
in a later iteration of their stream (tracekit.costs.repeated)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from conftest import shared


def _kernels(rows):
    names = [r[0] for r in rows]
    return pd.DataFrame({
        "name": pd.Categorical(names), "stream": [r[1] for r in rows], "start": [r[2] for r in rows],
        "end": [r[2] + 5 for r in rows], "grid_x": [r[3] for r in rows], "grid_y": 1, "grid_z": 1, "block_x": 128,
        "launched_before_capture": [r[4] for r in rows]})


def _out(costs):
    n = len(costs)
    out = {f: np.array([c if c is None else float(c) for c in costs], dtype=np.float64) for f in ("flops", "bytes_read", "bytes_written")}
    out.update({c: np.full(n, None, dtype=object) for c in ("cost_kind", "dtype", "cost_source", "unknown_reason", "cost_estimate")})
    return out


def test_head_kernels_take_the_cost_of_their_position_not_of_identical_kernels():
    from tracekit.costs.repeated import REPEATED, from_repeated_sequence

    # one layer = gemm (q), norm, gemm (o): the two GEMMs share a kernel and a grid but not a
    # shape (costs 100 and 200), so "identical kernels" cannot tell them apart. The trace
    # starts with the layer's last two kernels (norm, o), launched before the capture.
    layer = [("gemm", 30), ("norm", 8), ("gemm", 30)]
    head = [("norm", -1, 0, -1, True), ("gemm", -1, 10, -1, True)]  # no grid recorded before the capture
    rows = head + [(n, -1, 20 + 10 * i, g, False) for i, (n, g) in enumerate(layer * 3)]
    k = _kernels(rows)
    costs = [None, None] + [100, 7, 200] * 3
    out = _out(costs)
    from_repeated_sequence(k, out)
    assert out["flops"][0] == 7 and out["flops"][1] == 200  # the o GEMM, not the q GEMM
    assert out["cost_source"][1] == REPEATED
    # a position whose later occurrences disagree (a cache read that grows) stays unknown
    costs = [None, None] + [100, 7, 200, 100, 7, 250, 100, 7, 200]
    out = _out(costs)
    from_repeated_sequence(k, out)
    assert out["flops"][0] == 7 and np.isnan(out["flops"][1])


def test_pre_capture_nccl_kernels_placed_by_the_compute_streams_iteration():
    """ResNet DDP on MI300X: the trace starts inside an iteration. Stream 4 runs one NCCL
    kernel name for every collective: an iteration is broadcast 9,600 bf16, broadcast 20 int64
    (the record_param_comms metadata of the later ones), all-reduce 2,873,320 and all-reduce
    8,816,192 bf16 elements over 8 ranks. Its first 5
    kernels were launched before the capture (no collective metadata): placed by the compute
    stream's head, which repeats twice later, they are the last all-reduce of one iteration
    and the whole next one. Ring all-reduce reads 2·(g-1)/g · elements · 2 B; a broadcast its
    message."""
    import tracekit

    a = tracekit.analyze(shared("torch", "mi300x_resnet_act_checkpoint_rank0.json.gz"))
    k = a.kernels
    nccl = k[k["name"].astype(str).str.startswith("ncclDevKernel")].sort_values("start")
    head = nccl[nccl["launched_before_capture"]]
    assert len(head) == 5

    def allreduce(n):
        return 2 * 7 / 8 * n * 2

    assert np.allclose(head["bytes_read"], [allreduce(8816192), 9600 * 2, 20 * 8, allreduce(2873320), allreduce(8816192)])
    assert (head["cost_source"].astype(str) == "inferred from the same place in a later iteration").all()
    assert a.coverage["modeled_share"] >= 0.85  # 63.1% before: the head's NCCL kernels are 25% of kernel time


def test_pre_capture_gemms_of_a_repeated_forward_costed():
    import tracekit

    a = tracekit.analyze(shared("torch", "h100_qwen1.5-0.5b_hf_inference.json.gz"))
    k = a.kernels
    pre = k[k["launched_before_capture"] & (k["kind"].astype(str) == "kernel")]
    assert len(pre) > 400 and pre["flops"].notna().all()
    assert a.coverage["modeled_share"] >= 0.95  # 91.7% before


def test_a_stream_is_one_devices_stream():
    """Two GPUs in one trace both number a stream 7: each device's stream repeats on its own.
    GPU 1's kernels, interleaved in time with GPU 0's head, do not break GPU 0's head."""
    from tracekit.costs.repeated import from_repeated_sequence

    layer = [("gemm", 30), ("norm", 8), ("gemm", 30)]
    gpu0 = [("norm", 7, 0, -1, True), ("gemm", 7, 10, -1, True)] + \
        [(n, 7, 20 + 10 * i, g, False) for i, (n, g) in enumerate(layer * 3)]
    gpu1 = [("copy", 7, 5 + 10 * i, 4, False) for i in range(11)]
    k = _kernels(gpu0 + gpu1)
    k["device"] = [0] * len(gpu0) + [1] * len(gpu1)
    out = _out([None, None] + [100, 7, 200] * 3 + [1] * len(gpu1))
    from_repeated_sequence(k, out)
    assert out["flops"][0] == 7 and out["flops"][1] == 200
