"""Collectives' bus bandwidth by hand from the traces' own fields; overlap; multi-rank."""

from __future__ import annotations

import gzip
import json
import math

import numpy as np
import pandas as pd
import pytest

import tracekit
from conftest import shared
from helpers import run_cli
from tracekit.ranks.executor import analyze_ranks

DASK = 'starts a local Dask cluster (scheduler and workers in new processes)'

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


def _raw_dlrm():
    """Everything the cross-rank checks need, read from the raw JSON without tracekit: per
    rank the NCCL kernels in start order (type from the kernel name: SendRecv is all-to-all
    here, AllReduce all-reduce; the k-th of its type is instance k), their wall-clock starts
    and durations in ns, the message size of each all-to-all from its record_param_comms op,
    the compute kernels' intervals and the ProfilerStep duration."""
    out = {}
    sizes = {"float": 4, "long int": 8, "int": 4}
    for rank in range(8):
        events = _raw_events(DLRM / f"rank{rank}.json.gz")
        launches = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
        comm_ops = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == "record_param_comms"]
        kernels = [e for e in events if e.get("cat") == "kernel"]
        nccl = sorted((e for e in kernels if e["name"].startswith("ncclKernel")), key=lambda e: e["ts"])
        seen, coll = {}, {}
        for e in nccl:
            kind = "all_to_all" if "SendRecv" in e["name"] else "all_reduce"
            launch = launches[e["args"]["correlation"]]
            op = next(o for o in comm_ops if o["tid"] == launch["tid"] and o["ts"] <= launch["ts"] <= o["ts"] + o["dur"])
            dims, dtype = op["args"]["Input Dims"][0], op["args"]["Input type"][0]
            size = math.prod(dims) * sizes[dtype] if dims else None
            coll[(kind, seen.setdefault(kind, 0))] = (e["ts"] * 1000, e["dur"] * 1000, size)
            seen[kind] += 1
        compute = sorted((e["ts"] * 1000, (e["ts"] + e["dur"]) * 1000) for e in kernels if not e["name"].startswith("ncclKernel"))
        union = []
        for s, e in compute:
            if union and s <= union[-1][1]:
                union[-1][1] = max(union[-1][1], e)
            else:
                union.append([s, e])
        step = next(e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep"))
        out[rank] = {"coll": coll, "compute_ns": sum(e - s for s, e in union), "step_ns": step["dur"] * 1000}
    return out


@pytest.fixture(scope="module")
def raw_dlrm():
    return _raw_dlrm()


def test_dlrm_straggler_is_the_rank_the_others_wait_for(dlrm_ranks, raw_dlrm):
    m, raw = dlrm_ranks, raw_dlrm
    instances = raw[0]["coll"].keys()
    last, late, caused = {r: 0 for r in raw}, {r: 0.0 for r in raw}, {r: 0.0 for r in raw}
    for key in instances:
        first = min(raw[r]["coll"][key][0] for r in raw)
        starts = {r: raw[r]["coll"][key][0] - first for r in raw}  # small ints: the median is exact
        median = float(np.median(list(starts.values())))
        last_rank = max(starts, key=starts.get)
        last[last_rank] += 1
        caused[last_rank] += sum(starts[last_rank] - s for s in starts.values())
        for r, s in starts.items():
            late[r] += max(0.0, s - median)
    per = m.per_rank.set_index("rank")
    assert per["last_count"].to_dict() == last
    assert per["late_ns"].to_dict() == pytest.approx(late, abs=1)
    assert per["caused_wait_ns"].to_dict() == pytest.approx(caused, abs=1)
    # the straggler: the rank the others wait for most, and the one the skew table names
    # last most often; the ranks that wait (exposed comm) are its effect, not stragglers
    straggler = max(caused, key=caused.get)
    assert straggler == 7 and last[7] == 5
    assert m.summary["straggler"]["rank"] == straggler
    assert m.skew["last_rank"].value_counts().idxmax() == straggler
    assert per.loc[straggler, "exposed_comm_ns"] == per["exposed_comm_ns"].min()
    median_step = float(np.median([raw[r]["step_ns"] for r in raw]))
    assert m.summary["median_step_time_ns"] == median_step
    expected = sorted((r for r in raw if caused[r] / 7 / median_step > 0.05), key=lambda r: -caused[r])
    assert m.summary["stragglers"] == expected == [7, 5]
    assert m.summary["straggler"]["others_wait_share"] == pytest.approx(caused[7] / 7 / median_step)
    # the first all_to_all: its skew and its first and last rank
    starts = {r: raw[r]["coll"][("all_to_all", 0)][0] for r in raw}
    skew = m.skew[(m.skew["collective"] == "all_to_all") & (m.skew["instance"] == 0)].iloc[0]
    assert skew["skew_ns"] == max(starts.values()) - min(starts.values())
    assert skew["first_rank"] == min(starts, key=starts.get) and skew["last_rank"] == max(starts, key=starts.get) == 7


def test_dlrm_load_imbalance_on_the_union_of_compute_kernels(dlrm_ranks, raw_dlrm):
    m, raw = dlrm_ranks, raw_dlrm
    compute = {r: raw[r]["compute_ns"] for r in raw}
    assert m.per_rank.set_index("rank")["compute_ns"].to_dict() == compute
    mean = sum(compute.values()) / len(compute)
    assert m.summary["load_imbalance"] == pytest.approx(max(compute.values()) / mean - 1)
    assert m.summary["most_compute_rank"] == max(compute, key=compute.get) == 1
    assert m.summary["straggler"]["computes_most"] is False  # rank 7's delay is not its GPU work


def test_dlrm_busbw_over_ranks_per_collective_and_size(dlrm_ranks, raw_dlrm):
    m, raw = dlrm_ranks, raw_dlrm
    per_rank = {}
    for r in raw:  # all-to-alls of 6144 floats: bytes x (n-1)/n over their total kernel time
        mine = [(dur, size) for (kind, _), (_, dur, size) in raw[r]["coll"].items() if kind == "all_to_all" and size == 24576]
        per_rank[r] = sum(size for _, size in mine) * 7 / 8 / (sum(dur for dur, _ in mine) * 1e-9) / 1e9
    assert all(len([1 for (kind, _), v in raw[r]["coll"].items() if kind == "all_to_all" and v[2] == 24576]) == 2 for r in raw)
    row = m.busbw[(m.busbw["collective"] == "all_to_all") & (m.busbw["message_bytes"] == 24576)].iloc[0]
    assert row["ranks"] == 8 and row["instances"] == 2
    assert row["busbw_min_gbps"] == pytest.approx(min(per_rank.values()))
    assert row["busbw_median_gbps"] == pytest.approx(float(np.median(list(per_rank.values()))))
    assert row["busbw_max_gbps"] == pytest.approx(max(per_rank.values()))
    assert row["min_rank"] == min(per_rank, key=per_rank.get) and row["max_rank"] == max(per_rank, key=per_rank.get)
    # the all-reduces carry no message size (a TensorList without dims): no busbw row, not a 0
    assert set(m.busbw["collective"]) == {"all_to_all"}


def test_cross_rank_report_names_the_straggler_and_its_effect(dlrm_ranks):
    from tracekit.reports import ranks as render

    text = render.to_markdown(dlrm_ranks)
    line = next(l for l in text.splitlines() if "straggler" in l)
    assert "rank 7: last to reach 5 of 8 collectives" in line and "exposed communication is its effect" in line
    assert "## Collective bus bandwidth over ranks" in text
    out = json.loads(render.to_json(dlrm_ranks))
    assert out["summary"]["straggler"]["rank"] == 7 and len(out["collective_busbw"]) == 4


def test_parallel_workers_give_the_serial_result(dlrm_ranks):
    serial = analyze_ranks([str(DLRM)], workers=1)
    pd.testing.assert_frame_equal(serial.per_rank, dlrm_ranks.per_rank)
    pd.testing.assert_frame_equal(serial.skew, dlrm_ranks.skew)


@pytest.mark.slow(reason=DASK)
def test_dask_local_cluster_gives_the_same_result(dlrm_ranks):
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        multi = analyze_ranks([str(DLRM)], scheduler=cluster.scheduler_address)
    pd.testing.assert_frame_equal(multi.per_rank, dlrm_ranks.per_rank)
    pd.testing.assert_frame_equal(multi.skew, dlrm_ranks.skew)
    assert multi.summary == dlrm_ranks.summary


def test_cli_directory_and_bundle(tmp_path):
    out = tmp_path / "bundle"
    proc = run_cli("analyze", DLRM, "--workers", "2", "--format", "json", "--out", out)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["ranks"] == 8 and report["summary"]["stragglers"] == [7, 5]
    assert (out / "ranks.json").exists() and (out / "ranks.md").exists() and (out / "rank7" / "summary.json").exists()
    bad = run_cli("analyze", tmp_path)
    assert bad.returncode == 2 and "holds no" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_rank_from_file_name_when_the_trace_does_not_say(tmp_path):
    events = _raw_events(shared("torch", "h100_bert_small_hf_inference.json.gz"))
    for rank in (3, 5):
        (tmp_path / f"worker_rank{rank}.json").write_text(json.dumps({"traceEvents": events, "baseTimeNanoseconds": 1751410836000000000}))
    m = analyze_ranks([str(tmp_path)], workers=1, device="H100-SXM")
    assert [r.rank for r in m.ranks] == [3, 5]
    assert math.isfinite(m.summary["median_step_time_ns"])
    # no collectives: no straggler verdict, said as unknown rather than "none"
    from tracekit.reports.ranks import straggler_line, to_json

    assert m.summary["straggler"] is None and m.summary["stragglers"] == [] and m.skew.empty
    assert straggler_line(m).startswith("straggler   unknown")
    json.loads(to_json(m), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))  # strict: unknown is null


def test_ranks_with_different_collective_counts_are_flagged(dlrm_ranks):
    import copy
    import dataclasses

    from tracekit.ranks.executor import cross_rank

    results = copy.deepcopy(dlrm_ranks.ranks[:3])
    c = results[1].analysis.collectives
    first = c.sort_values("start")["row"].iloc[0]
    results[1].analysis = dataclasses.replace(results[1].analysis, collectives=c[c["row"] != first])  # rank 1 misses its first all_to_all
    assert cross_rank(copy.deepcopy(dlrm_ranks.ranks[:3])).summary["unequal_collective_counts"] == []
    assert cross_rank(results).summary["unequal_collective_counts"] == ["all_to_all: 4 to 5 per rank"]


ALLGATHER_KERNEL = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
RS_KERNEL = "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _collective_trace(tmp_path, op, dims, types, kernel, concrete=None, ranks=8):
    from synthetic import KinetoBuilder

    b = KinetoBuilder()
    b.header["distributedInfo"] = {"backend": "nccl", "rank": 0, "world_size": 8, "pg_config": [
        {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": 8, "ranks": list(range(8))},
        {"pg_name": "1", "pg_desc": "undefined", "backend_config": "cuda:nccl", "pg_size": ranks, "ranks": list(range(ranks))}]}
    extra = {"Concrete Inputs": concrete} if concrete else {}
    b.op(op, 0, 50, dims=dims, types=types, **extra)
    b.kernel(kernel, 5, 100, 1000)  # 1 ms on the GPU, no collective metadata on the kernel
    return tracekit.analyze(b.write(tmp_path / "coll.json")).collectives.iloc[0]


def test_allgather_base_is_sized_by_its_output_not_output_times_world(tmp_path):
    # Real form (a training trace): `c10d::_allgather_base_` Input Dims [[65536, 384], [8192, 384]],
    # float; signature _allgather_base_(Tensor output_tensor, Tensor input_tensor, ...): the
    # first tensor is already the gathered whole. 65536 x 384 x 4 B = 100,663,296 B (not x 8 = 805 MB).
    row = _collective_trace(tmp_path, "c10d::_allgather_base_", [[65536, 384], [8192, 384], [], [], []],
                            ["float", "float", "", "Scalar", "Scalar"], ALLGATHER_KERNEL)
    assert row["collective"] == "all_gather" and row["message_bytes"] == 65536 * 384 * 4
    assert row["group_size"] == 8 and row["size_source"] == "op shapes"
    # busbw = size / 1 ms x (n-1)/n = 100.66 GB/s x 7/8
    assert row["busbw_gbps"] == pytest.approx(65536 * 384 * 4 / 1e-3 * 7 / 8 / 1e9)


def test_reduce_scatter_base_is_sized_by_its_full_input(tmp_path):
    # _reduce_scatter_base_(Tensor output_tensor, Tensor input_tensor, ...): the input (second) is the full one
    row = _collective_trace(tmp_path, "c10d::_reduce_scatter_base_", [[8192, 384], [65536, 384], [], [], []],
                            ["float", "float", "", "", "Scalar"], RS_KERNEL)
    assert row["collective"] == "reduce_scatter" and row["message_bytes"] == 65536 * 384 * 4


def test_functional_all_gather_is_its_input_times_the_group_size_it_records(tmp_path):
    # _c10d_functional::all_gather_into_tensor(Tensor input, int group_size, str group_name):
    # the input is one rank's share; Concrete Inputs ['', '4', '1'] give the group of 4 (world 8)
    row = _collective_trace(tmp_path, "_c10d_functional::all_gather_into_tensor", [[8192, 384], [], []],
                            ["c10::BFloat16", "Scalar", ""], ALLGATHER_KERNEL, concrete=["", "4", "1"], ranks=4)
    assert row["group_size"] == 4 and row["group_source"] == "op"
    assert row["message_bytes"] == 8192 * 384 * 2 * 4


def test_b200_allgather_base_record_param_comms_and_group_from_pg_config():
    # b200 vLLM TP8: `c10d::_allgather_base_` Input Dims [[8, 25136], [1, 25136]] bf16 around
    # record_param_comms [[1, 25136]] ('Group size': 8); the NCCL kernel carries metadata
    # (Out msg nelems 201088 = 8 x 25136), which comes first: 201088 x 2 B = 402,176 B.
    c = tracekit.analyze(shared("torch", "b200_vllm_tp8_rank0_eager.json.gz")).collectives
    ag = c[c["collective"] == "all_gather"]
    assert len(ag) == 1 and ag["message_bytes"].iloc[0] == 8 * 25136 * 2 and ag["group_size"].iloc[0] == 8
