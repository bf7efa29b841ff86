"""Every torch.profiler trace we have, parsed and linked, checked against a plain reading."""

from __future__ import annotations

import numpy as np
import pytest

import kineto_reference as ref_reader
from conftest import range_stack, sweep, torch_traces


@pytest.fixture(scope="module")
def reference_cache():
    return {}


def _ref(cache, path):
    if path not in cache:
        cache[path] = ref_reader.read(path)
    return cache[path]


@pytest.mark.parametrize("path", sweep(torch_traces()), ids=lambda p: p.name if p.parent.name != "v100_dlrm_8ranks" else f"dlrm/{p.name}")
def test_counts_and_links_match_a_plain_reading(path, load_cached, reference_cache):
    trace = load_cached(path)
    ref = _ref(reference_cache, path)
    k = trace.kernels
    if any(p["problem"].startswith("have ts 0 and dur 0") for p in trace.meta["health"]):
        # the profiler lost these events' times (trace health): they are dropped, and counted
        lost = lambda e: e["ts"] == 0 and e["dur"] == 0  # noqa: E731
        dropped = {p["kind"]: p["count"] for p in trace.meta["health"] if p["problem"].startswith("have ts 0 and dur 0")}
        gpu = [e for e in ref["gpu"] if not lost(e)]
        assert sum(dropped.get(kind, 0) for kind in ("kernel", "memcpy", "memset")) == len(ref["gpu"]) - len(gpu)
        assert dropped.get("runtime call", 0) == sum(map(lost, ref["runtime"]))
        ref = {**ref, "gpu": gpu, "runtime": [e for e in ref["runtime"] if not lost(e)]}

    # Every GPU activity of the file is a row, with its kind (but those whose times were lost).
    assert len(k) == len(ref["gpu"])
    for kind in ("kernel", "memcpy", "memset"):
        expected = sum(ref_reader.GPU[e["cat"].lower()] == kind for e in ref["gpu"])
        assert int((k["kind"] == kind).sum()) == expected
    assert len(trace.ops) == len(ref["ops"])

    # Kernel -> launch by correlation id: the same count as a dict lookup finds.
    launches = ref_reader.launch_of(ref)
    assert int((k["launch"] >= 0).sum()) == sum(l is not None for l in launches)

    # Total GPU time is conserved through the ns conversion (within 1 ns per event).
    ref_total_ns = sum(e["dur"] for e in ref["gpu"]) * 1000
    assert abs(int((k["end"] - k["start"]).sum()) - ref_total_ns) <= len(k) + 1

    # Kernel -> innermost op, on an even sample of launched activities.
    by_corr_row = {}
    for row, corr in enumerate(k["correlation"].tolist()):
        by_corr_row.setdefault(corr, row)
    sample = [(g, l) for g, l in zip(ref["gpu"], launches) if l is not None][:: max(1, len(ref["gpu"]) // 300)]
    op_names = trace.ops["name"].astype(str).to_numpy()
    op_dims = trace.ops["input_dims"].to_numpy()
    for g, launch in sample:
        row = by_corr_row[g["args"]["correlation"]]
        expected = ref_reader.innermost_ops(ref, launch)
        op = int(k["op"].iat[row])
        if not expected:
            assert op == -1, g["name"]
        else:
            assert op >= 0, g["name"]
            assert (op_names[op], op_dims[op]) in [(e["name"], e["args"].get("Input Dims")) for e in expected]


def test_bert_flash_attention_kernel_links_to_its_op_with_shapes(load_cached):
    from conftest import shared

    trace = load_cached(shared("torch", "h100_bert_small_hf_inference.json.gz"))
    k = trace.kernels
    flash = k[k["name"].str.contains("flash_fwd_kernel")]
    assert len(flash) == 4  # 4 encoder layers
    op = trace.ops.iloc[int(flash["op"].iat[0])]
    assert op["name"] == "aten::_flash_attention_forward"
    assert op["input_dims"][:3] == [[1, 141, 8, 64]] * 3  # q, k, v: batch 1, 141 tokens, 8 heads of 64
    assert op["input_types"][:3] == ["c10::BFloat16"] * 3
    assert range_stack(trace, flash.index[0]) == ["ProfilerStep#6"]
    assert range_stack(trace, flash.index[0], "gpu_range") == ["ProfilerStep#6"]
    frames = range_stack(trace, flash.index[0], "frame")
    assert frames[-1] == "<built-in function scaled_dot_product_attention>"
    assert trace.meta["devices"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert trace.meta["devices"][0]["sm_count"] == 132


def test_qwen_kernels_launched_before_the_window_are_kept_and_flagged(load_cached):
    from conftest import shared

    trace = load_cached(shared("torch", "h100_qwen1.5-0.5b_hf_inference.json.gz"))
    k = trace.kernels
    early = k[k["launched_before_capture"]]
    # fixtures/README: 436 kernels started before the capture window (plus 73 memsets).
    assert int((early["kind"] == "kernel").sum()) == 436
    assert int((early["kind"] == "memset").sum()) == 73
    assert (early["launch"] == -1).all() and (early["op"] == -1).all()
    assert not k.loc[~k["launched_before_capture"], "launch"].eq(-1).any()


def test_hip_graph_kernels_link_to_their_one_graph_launch(load_cached):
    from conftest import shared

    trace = load_cached(shared("torch", "mi300x_sglang_qwen3-8b_decode_bs32.json.gz"))
    k = trace.kernels
    graph = k[k["graph_launch"]]
    assert len(graph) == 544
    assert graph["launch"].nunique() == 1
    launch = trace.launches.iloc[int(graph["launch"].iat[0])]
    assert launch["name"] == "hipGraphLaunch"
    assert (graph["correlation"] == launch["correlation"]).all()
    assert trace.meta["devices"][0]["name"] == "AMD Instinct MI300X"


def test_legacy_2021_schema(load_cached):
    from conftest import shared

    trace = load_cached(shared("torch", "v100_resnet50_train_legacy2021.json.gz"))
    assert trace.meta["schema"] == "kineto-2021"
    k = trace.kernels
    assert int((k["kind"] == "kernel").sum()) == 8772
    assert (k["launch"] >= 0).all()
    assert set(k["stream"].unique()) <= {7, 20, 24, 28}  # from "stream 7"-style tids
    # The FC layer: addmm of a 32x2048 batch by a 2048x1000 weight.
    addmm = trace.ops[trace.ops["name"] == "aten::addmm"].iloc[0]
    assert addmm["input_dims"][:3] == [[1000], [32, 2048], [2048, 1000]]
    steps = trace.ranges[trace.ranges["name"].str.startswith("ProfilerStep#")]
    assert sorted(steps["name"], key=lambda n: int(n.split("#")[1])) == [f"ProfilerStep#{i}" for i in range(5, 11)]
    # Every kernel ran inside a ProfilerStep range on its launching thread or the main one.
    conv = k[k["name"].str.startswith("void implicit_convolve_sgemm")].index[0]
    assert range_stack(trace, conv)[0].startswith("ProfilerStep#")


def test_collective_metadata_of_the_b200_all_gather(load_cached):
    from conftest import shared

    trace = load_cached(shared("torch", "b200_vllm_tp8_rank0_eager.json.gz"))
    k = trace.kernels
    ag = k[k["collective"].notna()]
    assert len(ag) == 1
    row = ag.iloc[0]
    assert row["collective"] == "_allgather_base"
    assert (row["coll_in_elems"], row["coll_out_elems"], row["coll_group_size"]) == (25136, 201088, 8)
    assert row["coll_dtype"] == "BFloat16"
    assert trace.meta["rank"] == 0 and trace.meta["world_size"] == 8
    assert (k["rank"] == 0).all()


@pytest.mark.parametrize("rank", range(8))
def test_dlrm_ranks_come_from_distributed_info(rank, load_cached):
    from conftest import shared

    trace = load_cached(shared("torch", "v100_dlrm_8ranks", f"rank{rank}.json.gz"))
    assert (trace.meta["rank"], trace.meta["world_size"]) == (rank, 8)
    sendrecv = trace.kernels[trace.kernels["name"].str.startswith("ncclKernel_SendRecv")]
    assert len(sendrecv) > 0
    for row in sendrecv.index:
        assert "nccl:all_to_all" in range_stack(trace, row)


def test_project_cpu_decode_fixture_nests_ops_in_named_ranges(load_cached):
    from conftest import PROJECT_FIXTURES

    trace = load_cached(PROJECT_FIXTURES / "cpu_tiny_llama_decode.json.gz")
    r = trace.ranges
    counts = r["name"].value_counts()
    assert counts["prefill"] == 1 and counts["decode_step"] == 4
    assert counts["attention"] == 10 and counts["mlp"] == 10  # 2 layers x 5 forward passes
    # attention and mlp ranges nest inside prefill or a decode step.
    parents = r.loc[r["name"].isin(["attention", "mlp"]), "parent"]
    assert set(r["name"].iloc[parents.to_numpy()]) == {"prefill", "decode_step"}
    # SDPA in a decode step: one query token against the cache, GQA 8 query / 2 KV heads.
    sdpa = trace.ops[trace.ops["name"] == "aten::scaled_dot_product_attention"]
    assert len(sdpa) == 10
    dims = sdpa["input_dims"].iloc[-1]
    assert dims[0] == [2, 8, 1, 16] and dims[1] == [2, 2, 36, 16]
    # The span is the capture; nested ops sit within their parents.
    ops = trace.ops
    has_parent = ops["parent"] >= 0
    parent_rows = ops["parent"][has_parent].to_numpy()
    assert (ops["start"][has_parent].to_numpy() >= ops["start"].to_numpy()[parent_rows]).all()
    assert (ops["end"][has_parent].to_numpy() <= ops["end"].to_numpy()[parent_rows]).all()
    assert np.all(ops["depth"].to_numpy()[has_parent.to_numpy()] >= 1)
