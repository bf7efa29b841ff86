"""Collectives' bus bandwidth by hand from the traces' own fields; overlap; multi-rank."""

from __future__ import annotations

import gzip
import json
import math
import subprocess
import sys

import pandas as pd
import pytest

import tracekit
from conftest import shared
from tracekit.ranks import analyze_ranks

DLRM = shared("torch", "v100_dlrm_8ranks")


def _raw_events(path):
    with gzip.open(path, "rt") as f:
        return json.load(f)["traceEvents"]


def test_a100_allreduce_busbw_from_collective_metadata():
    path = shared("torch", "a100_ddp_nccl_rank0.json.gz")
    a = tracekit.analyze(path)
    raw = [e for e in _raw_events(path) if e.get("cat") == "kernel" and e["args"].get("Collective name") == "allreduce"]
    e = max(raw, key=lambda e: e["args"]["In msg nelems"])  # the largest all-reduce
    n, size = e["args"]["Group size"], e["args"]["In msg nelems"] * 4  # dtype Float
    busbw = size / (e["dur"] * 1e-6) * 2 * (n - 1) / n / 1e9  # GB/s, nccl-tests
    c = a.collectives
    row = c[(c["collective"] == "all_reduce") & (c["message_bytes"] == size)].iloc[0]
    assert row["group_size"] == 2 and row["size_source"] == "metadata"
    assert row["busbw_gbps"] == pytest.approx(busbw, rel=1e-3)  # ns rounding of the duration
    assert row["link_efficiency"] == pytest.approx(busbw / 300, rel=1e-3)  # A100 NVLink: 300 GB/s per direction
    assert len(c[c["collective"] == "broadcast"]) == 6 and len(c[c["collective"] == "all_reduce"]) == 15


def test_b200_all_gather_busbw_uses_the_gathered_size():
    path = shared("torch", "b200_vllm_tp8_rank0_eager.json.gz")
    e = next(e for e in _raw_events(path) if e.get("cat") == "kernel" and "Collective name" in e["args"])
    out_bytes = e["args"]["Out msg nelems"] * 2  # BFloat16
    busbw = out_bytes / (e["dur"] * 1e-6) * 7 / 8 / 1e9
    c = tracekit.analyze(path).collectives
    row = c[c["collective"] == "all_gather"].iloc[0]
    assert row["message_bytes"] == out_bytes == 201088 * 2
    assert row["busbw_gbps"] == pytest.approx(busbw, rel=1e-3)
    # the multimem all-reduces are recognised by name; their message is the op's tensor
    ar = c[c["collective"] == "all_reduce"]
    assert len(ar) == 73 and (ar["size_source"] == "op shapes").all() and (ar["group_size"] == 8).all()


def test_dlrm_all_to_all_from_op_shapes_and_world_size():
    path = DLRM / "rank0.json.gz"
    c = tracekit.analyze(path).collectives
    a2a = c[c["collective"] == "all_to_all"].sort_values("start")
    first = a2a.iloc[0]
    # record_param_comms input [[6144]] float; world size 8; all_to_all busbw factor 7/8
    assert first["message_bytes"] == 6144 * 4 and first["group_size"] == 8 and first["group_source"] == "world size"
    assert first["busbw_gbps"] == pytest.approx(6144 * 4 / (first["duration_ns"] * 1e-9) * 7 / 8 / 1e9)


def test_overlap_of_comm_and_compute_by_hand():
    a = tracekit.analyze(shared("torch", "a100_ddp_nccl_rank0.json.gz"))
    k = a.kernels[a.kernels["kind"] == "kernel"]
    comm = k[k["block"] == "collective"]
    compute = k[k["block"] != "collective"]

    def union(df):
        out = []
        for s, e in sorted(zip(df["start"], df["end"])):
            if out and s <= out[-1][1]:
                out[-1][1] = max(out[-1][1], e)
            else:
                out.append([s, e])
        return out

    cu, pu = union(comm), union(compute)
    overlapped = sum(max(0, min(e1, e2) - max(s1, s2)) for s1, e1 in cu for s2, e2 in pu)
    row = a.overlap.iloc[0]
    assert row["comm_ns"] == sum(e - s for s, e in cu)
    assert row["overlapped_ns"] == overlapped
    assert row["exposed_ns"] == row["comm_ns"] - overlapped


@pytest.fixture(scope="module")
def dlrm_ranks():
    return analyze_ranks([str(DLRM)], workers=2)


def test_dlrm_ranks_stragglers_and_skew(dlrm_ranks):
    m = dlrm_ranks
    assert [r.rank for r in m.ranks] == list(range(8))
    steps = m.per_rank["step_time_ns"]
    median = steps.median()
    assert m.summary["stragglers"] == [int(r) for r in m.per_rank.loc[steps > median * 1.05, "rank"]]
    # the first all_to_all: its start on each rank's wall clock, by hand from the raw traces
    starts = {}
    for rank in range(8):
        events = _raw_events(DLRM / f"rank{rank}.json.gz")
        launches = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}
        ranges = [e for e in events if e.get("cat") == "user_annotation" and e["name"] == "nccl:all_to_all"]
        first_range = min(ranges, key=lambda e: e["ts"])
        kernels = sorted((e for e in events if e.get("cat") == "kernel" and "SendRecv" in e["name"]), key=lambda e: e["ts"])
        k = next(e for e in kernels if first_range["ts"] <= launches[e["args"]["correlation"]]["ts"] <= first_range["ts"] + first_range["dur"])
        starts[rank] = k["ts"]
    skew = m.skew[(m.skew["collective"] == "all_to_all") & (m.skew["instance"] == 0)].iloc[0]
    assert skew["skew_ns"] == pytest.approx((max(starts.values()) - min(starts.values())) * 1000, abs=2)
    assert skew["first_rank"] == min(starts, key=starts.get) and skew["last_rank"] == max(starts, key=starts.get)
    compute = m.per_rank["compute_ns"]
    assert m.summary["load_imbalance"] == pytest.approx(compute.max() / compute.mean() - 1)


def test_parallel_workers_give_the_serial_result(dlrm_ranks):
    serial = analyze_ranks([str(DLRM)], workers=1)
    pd.testing.assert_frame_equal(serial.per_rank, dlrm_ranks.per_rank)
    pd.testing.assert_frame_equal(serial.skew, dlrm_ranks.skew)


def test_dask_local_cluster_gives_the_same_result(dlrm_ranks):
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        multi = analyze_ranks([str(DLRM)], scheduler=cluster.scheduler_address)
    pd.testing.assert_frame_equal(multi.per_rank, dlrm_ranks.per_rank)
    pd.testing.assert_frame_equal(multi.skew, dlrm_ranks.skew)
    assert multi.summary == dlrm_ranks.summary


def test_cli_directory_and_bundle(tmp_path):
    out = tmp_path / "bundle"
    proc = subprocess.run([sys.executable, "-m", "tracekit", "analyze", str(DLRM), "--workers", "2", "--format", "json", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["ranks"] == 8 and report["summary"]["stragglers"]
    assert (out / "ranks.json").exists() and (out / "ranks.md").exists() and (out / "rank7" / "summary.json").exists()
    bad = subprocess.run([sys.executable, "-m", "tracekit", "analyze", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "holds no" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_rank_from_file_name_when_the_trace_does_not_say(tmp_path):
    events = _raw_events(shared("torch", "h100_bert_small_hf_inference.json.gz"))
    for rank in (3, 5):
        (tmp_path / f"worker_rank{rank}.json").write_text(json.dumps({"traceEvents": events, "baseTimeNanoseconds": 1751410836000000000}))
    m = analyze_ranks([str(tmp_path)], workers=1, device="H100-SXM")
    assert [r.rank for r in m.ranks] == [3, 5]
    assert math.isfinite(m.summary["median_step_time_ns"])
