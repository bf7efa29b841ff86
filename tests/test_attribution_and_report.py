"""Phase x block attribution, conservation of time, steps, and the report bundle."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import tracekit
from conftest import PROJECT_FIXTURES, shared, range_stack
from helpers import run_cli

MI300X = shared("torch", "mi300x_resnet_act_checkpoint_rank0.json.gz")


@pytest.fixture(scope="module")
def mi300x():
    return tracekit.analyze(MI300X)


def test_recompute_is_what_runs_under_checkpoint_recompute_fn(mi300x):
    trace, k = mi300x.trace, mi300x.kernels
    # independent reading: walk each kernel's Python frame stack by hand
    under_recompute = np.array([any("checkpoint.py" in f and ("recompute_fn" in f or "unpack_hook" in f)
                                    for f in range_stack(trace, i, "frame")) for i in range(len(k))])
    assert under_recompute.sum() > 100
    assert ((k["phase"] == "recompute").to_numpy() == under_recompute).all()
    # and the recomputed work is the forward's: convolutions and batch norms
    recomputed_ops = set(k.loc[k["phase"] == "recompute", "op_name"].dropna().astype(str))
    assert {"aten::miopen_convolution", "aten::native_batch_norm"} <= recomputed_ops


def test_training_phases_and_blocks(mi300x):
    k = mi300x.kernels
    assert {"forward", "backward", "recompute", "optimizer"} <= set(k["phase"].astype(str))
    assert set(k.loc[k["name"].str.startswith("ncclDevKernel"), "block"]) == {"collective"}
    bn = k[k["op_name"].astype(str) == "aten::native_batch_norm"]
    assert set(bn["block"]) == {"norm"}
    opt = k[k["phase"] == "optimizer"]
    seen = opt[opt["launch"] >= 0]
    assert len(seen) > 0 and all("Optimizer.step" in " ".join(range_stack(mi300x.trace, i)) or "Optimizer.zero_grad" in " ".join(range_stack(mi300x.trace, i)) for i in seen.index)
    # kernels issued before the capture are optimizer work only by their identical captured kernels
    blind = opt[opt["launch"] < 0]
    assert set(blind["name"].astype(str)) <= set(seen["name"].astype(str))


def test_serving_phases():
    vllm = tracekit.analyze(shared("torch", "b200_vllm_tp8_rank0_eager.json.gz"))
    assert set(vllm.kernels["phase"].astype(str)) == {"prefill"}  # execute_context_1(...)_generation_0(0)
    blocks = vllm.blocks.groupby("block")["gpu_time_ns"].sum()
    assert blocks.idxmax() == "ffn"  # the MoE layers (FusedMoE modules)
    moe = vllm.kernels[vllm.kernels["op_name"].astype(str) == "vllm::moe_forward"]
    assert set(moe["block"]) == {"ffn"}
    sglang = tracekit.analyze(shared("torch", "mi300x_sglang_qwen3-8b_decode_bs32.json.gz"))
    assert set(sglang.kernels["phase"].astype(str)) == {"decode"}  # step[DECODE bs=32]
    assert list(sglang.steps["step"]) == ["step[DECODE bs=32]"]


@pytest.mark.parametrize("name", ["mi300x_resnet_act_checkpoint_rank0.json.gz", "h100_qwen1.5-0.5b_hf_inference.json.gz", "a100_ddp_nccl_rank0.json.gz"])
def test_block_times_plus_idle_equal_the_span_per_device(name):
    a = tracekit.analyze(shared("torch", name))
    k = a.kernels
    for dev in a.devices.itertuples():
        on = k["device"] == dev.device
        busy = k.loc[on, "exclusive_ns"].sum()
        assert busy + dev.idle_span_ns == dev.span_ns
        # idle within the GPU-active window: first to last activity on the device
        assert dev.active_ns == k.loc[on, "end"].max() - k.loc[on, "start"].min()
        assert busy + dev.idle_ns == dev.active_ns
        # the union of busy intervals, computed the plain way
        iv = sorted(zip(k.loc[on, "start"], k.loc[on, "end"]))
        union, cur_s, cur_e = 0, None, None
        for s, e in iv:
            if cur_e is None or s > cur_e:
                union += (cur_e - cur_s) if cur_e is not None else 0
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        union += cur_e - cur_s
        assert busy == union
    assert a.blocks["gpu_time_ns"].sum() == k["exclusive_ns"].sum()


def _raw_step_kernels(path, step_name, blind: bool = False):
    """Independent reading: the GPU activities whose launch (runtime event with the same
    correlation id) starts inside the step range's window, on any thread of its process;
    with `blind`, also those with no launch at all that started running inside the window."""
    from kineto_reference import launch_of, read

    ref = read(path)
    step = next(e for e in ref["doc"]["traceEvents"] if e.get("ph") == "X" and e.get("name") == step_name)
    lo, hi = step["ts"], step["ts"] + step["dur"]
    return [g for g, launch in zip(ref["gpu"], launch_of(ref))
            if (launch is not None and launch["pid"] == step["pid"] and lo <= launch["ts"] <= hi)
            or (blind and launch is None and lo <= g["ts"] <= hi)]


def test_steps_bandwidth_by_hand(mi300x):
    # MI300X ResNet: the GPU runs about two steps behind the host. Form in the trace:
    # user_annotation `ProfilerStep#16` (host, ~16 ms) and gpu_user_annotation `ProfilerStep#16`
    # (~19 ms, starting ~32 ms after the host range ends); 757 kernels launched before the
    # capture (no launch event) run inside step 15/16's host ranges.
    steps = mi300x.steps
    assert list(steps["step"]) == ["ProfilerStep#15", "ProfilerStep#16", "ProfilerStep#17"]
    s = steps.iloc[1]
    owned = _raw_step_kernels(MI300X, "ProfilerStep#16")  # launched inside the host range
    assert s["kernels"] == sum(g["cat"] == "kernel" for g in owned) == 746
    assert s["copies"] == sum(g["cat"] != "kernel" for g in owned) == 149
    # the launch-less kernels are earlier steps' queued work: no step claims them by host time
    assert len(_raw_step_kernels(MI300X, "ProfilerStep#16", blind=True)) - len(owned) == 185
    # GPU window: the gpu_user_annotation, widened to the owned activities (µs -> ns)
    from kineto_reference import read

    doc = read(MI300X)["doc"]["traceEvents"]
    gpu_ann = next(e for e in doc if e.get("cat") == "gpu_user_annotation" and e["name"] == "ProfilerStep#16")
    host = next(e for e in doc if e.get("cat") == "user_annotation" and e["name"] == "ProfilerStep#16")
    lo = min([gpu_ann["ts"]] + [g["ts"] for g in owned])
    hi = max([gpu_ann["ts"] + gpu_ann["dur"]] + [g["ts"] + g["dur"] for g in owned])
    assert s["duration_ns"] == pytest.approx((hi - lo) * 1e3, abs=2)
    assert s["host_duration_ns"] == pytest.approx(host["dur"] * 1e3, abs=2)
    assert s["gpu_lag_ns"] == pytest.approx((hi - host["ts"] - host["dur"]) * 1e3, abs=2)
    assert s["gpu_lag_ns"] > 30e6  # the GPU finished this step > 30 ms after the host range ended
    k = mi300x.kernels
    mine = k[k["step"] >= 0]
    mine = mine[mi300x.trace.ranges["name"].astype(str).to_numpy()[mine["step"]] == "ProfilerStep#16"]
    moved = float((mine["bytes_read"] + mine["bytes_written"]).sum())
    assert s["coverage"] > 0.5 and s["bytes"] == pytest.approx(moved)
    # bandwidth over the GPU window, not over the host range
    assert s["achieved_tbps"] == pytest.approx(moved / s["duration_ns"] / 1e3)
    assert s["bandwidth_share_peak"] == pytest.approx(moved / (s["duration_ns"] * 1e-9) / 5.3e12)
    assert s["bandwidth_share_sustained"] == pytest.approx(s["bandwidth_share_peak"] / 0.8)


def test_kernels_before_the_capture_are_not_claimed_by_host_time():
    # h100_qwen ProfilerStep#6: 436 kernels have no launch (issued before the capture) and run
    # in the first 14.5 ms of the step's host range, before its gpu_user_annotation begins.
    # By launch correlation the step owns 1,029 kernels + 169 copies (1,198 activities); its
    # GPU window is the gpu_user_annotation ProfilerStep#6 (34.892 ms), 2.228 ms past the host end.
    path = shared("torch", "h100_qwen1.5-0.5b_hf_inference.json.gz")
    a = tracekit.analyze(path)
    s = a.steps.iloc[0]
    owned = _raw_step_kernels(path, "ProfilerStep#6")
    assert (s["kernels"], s["copies"]) == (sum(g["cat"] == "kernel" for g in owned), sum(g["cat"] != "kernel" for g in owned)) == (1029, 169)
    assert s["window_source"] == "gpu annotation"
    assert s["duration_ns"] == pytest.approx(34.892e6, abs=1e3) and s["gpu_lag_ns"] == pytest.approx(2.228e6, abs=1e3)
    assert s["busy_ns"] == pytest.approx(31.905e6, abs=1e3)
    assert s["host_duration_ns"] == pytest.approx(47.151e6, abs=1e3)


def test_vllm_v1_execute_new_cached_steps_run_on_the_gpu():
    # rtx3090 vLLM V1: steps are f"execute_new_{num_new}_cached_{num_cached}" user_annotations
    # with gpu_user_annotation copies; decode steps take ~1.2 ms on the host and ~10.5 ms on the GPU.
    a = tracekit.analyze(shared("torch", "rtx3090_vllm_gpt-oss-20b_decode_bs4_cudagraph.json.gz"))
    st = a.steps
    assert len(st) == 18 and st["step"].iloc[2] == "execute_new_0_cached_4"
    decode = st.iloc[2:16]
    assert (decode["window_source"] == "gpu annotation").all()
    assert decode["duration_ns"].between(10.0e6, 11.5e6).all() and decode["host_duration_ns"].lt(1.6e6).all()
    assert decode["gpu_lag_ns"].between(9.2e6, 10.4e6).all()
    assert (decode["kernels"] + decode["copies"] == 422).all()
    assert (st["busy_in_window_ns"] <= st["duration_ns"]).all()


def _union_length(spans: list[tuple[int, int]]) -> int:
    """Total length of the union of [start, end) spans, by hand (not tracekit's union)."""
    total, (cur_s, cur_e) = 0, min(spans)
    for s0, e0 in sorted(spans):
        if s0 > cur_e:
            total, cur_s, cur_e = total + cur_e - cur_s, s0, e0
        else:
            cur_e = max(cur_e, e0)
    return total + cur_e - cur_s


def test_a_step_owns_the_backward_launched_from_the_autograd_thread():
    # v100 ResNet-50 (2021 schema): the backward runs on autograd's thread, outside the
    # ProfilerStep range's call stack, but inside its time window.
    path = shared("torch", "v100_resnet50_train_legacy2021.json.gz")
    a = tracekit.analyze(path)
    raw = _raw_step_kernels(path, "ProfilerStep#5")
    from kineto_reference import read

    ref = read(path)
    raw_step = next(e for e in ref["doc"]["traceEvents"] if e.get("ph") == "X" and e.get("name") == "ProfilerStep#5")
    all_spans = [(round(g["ts"] * 1000), round((g["ts"] + g["dur"]) * 1000)) for g in ref["gpu"]]
    threads = {g["args"]["correlation"] for g in raw}
    assert len(raw) == 1516 and len(threads) == 1516
    step = a.steps.set_index("step").loc["ProfilerStep#5"]
    assert step["kernels"] + step["copies"] == len(raw)
    assert step["copies"] == sum(g["cat"].lower() != "kernel" for g in raw)
    # busy time: the union of those activities' intervals on the device, by hand (µs -> ns)
    spans = [(round(g["ts"] * 1000), round((g["ts"] + g["dur"]) * 1000)) for g in raw]
    assert abs(step["busy_ns"] - _union_length(spans)) <= 2 * len(raw)  # 1 ns rounding per edge at most
    assert step["busy_ns"] == pytest.approx(100.6e6, rel=0.005)
    # GPU window (the 2021 schema has no gpu_user_annotation): first start to last end of its activities
    assert step["window_source"] == "kernels"
    lo, hi = min(s0 for s0, _ in spans), max(e0 for _, e0 in spans)
    assert abs(step["duration_ns"] - (hi - lo)) <= 2
    assert step["host_duration_ns"] == pytest.approx(raw_step["dur"] * 1000, abs=2)
    # any GPU activity inside the GPU window (what the step's idle time is the rest of), by hand
    window = [(max(s0, lo), min(e0, hi)) for s0, e0 in all_spans]
    window = [(s0, e0) for s0, e0 in window if e0 > s0]
    assert abs(step["busy_in_window_ns"] - _union_length(window)) <= 2 * len(window)


def test_unknown_is_not_zero_when_costs_cover_under_half():
    # SGLang decode, graph-launched: 0.3% of the step's kernel time has a cost. The step's
    # bytes and bandwidth are unknown, not "3.2 kB at 0.0% of peak".
    a = tracekit.analyze(shared("torch", "mi300x_sglang_qwen3-8b_decode_bs32.json.gz"))
    step = a.steps.iloc[0]
    k = a.kernels[a.kernels["step"] >= 0]
    assert step["kernels"] + step["copies"] == len(k) == 551
    costed = k["flops"].notna()
    assert step["coverage"] == pytest.approx(k.loc[costed, "duration_ns"].sum() / k["duration_ns"].sum())
    assert step["coverage"] < 0.5
    assert np.isnan(step["bytes"]) and np.isnan(step["achieved_tbps"]) and np.isnan(step["bandwidth_share_peak"])
    assert a.coverage["efficiency"] is None and a.coverage["efficiency_sustained"] is None
    low = a.blocks[a.blocks["coverage"] < 0.5]
    assert len(low) and low[["flops", "bytes", "efficiency", "achieved_tbps"]].isna().all().all()
    assert low["bound"].isna().all()
    doc = json.loads(tracekit.summary_json(a))
    assert doc["steps"][0]["bytes"] is None and doc["coverage"]["efficiency"] is None


def test_user_rules_promote_a_range_and_bad_rules_are_one_line(tmp_path):
    rules = tmp_path / "rules.toml"
    rules.write_text('[[phase]]\nname = "warm_step"\nrange = "^ProfilerStep#15$"\n\n[[block]]\nname = "ffn"\nop = "^aten::miopen_convolution$"\n')
    a = tracekit.analyze(MI300X, rules=str(rules))
    k = a.kernels
    # A range rule sees the CPU-side ranges around the launch; GPU-side ranges only for
    # kernels whose launch was not captured.
    in_15 = [i for i in range(len(k)) if "ProfilerStep#15" in range_stack(a.trace, i)
             or (k["launch"].iat[i] < 0 and "ProfilerStep#15" in range_stack(a.trace, i, "gpu_range"))]
    assert len(in_15) > 100
    assert set(k.loc[in_15, "phase"].astype(str)) == {"warm_step"}
    assert "warm_step" not in set(k.drop(index=in_15)["phase"].astype(str))
    conv = k[k["op_name"].astype(str) == "aten::miopen_convolution"]
    assert set(conv["block"]) == {"ffn"}
    bad = tmp_path / "bad.toml"
    bad.write_text('[[block]]\nname = "gemm"\nop = "mm"\n')
    proc = run_cli("analyze", MI300X, "--rules", bad)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "is not one of" in proc.stderr


def test_bundle_files_and_contents(tmp_path):
    out = tmp_path / "bundle"
    proc = run_cli("analyze", MI300X, "--out", out, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    names = {p.name for p in out.iterdir()}
    assert names == {"summary.json", "report.md", "report.html", "kernels.parquet", "ops.parquet", "blocks.csv", "roofline.png", "breakdown.png",
                     "tracekit-manifest.json"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["schema_version"] == 2 and summary == json.loads(proc.stdout)
    kernels = pd.read_parquet(out / "kernels.parquet")
    assert len(kernels) == 3653 and {"phase", "block", "flops", "efficiency", "exclusive_ns"} <= set(kernels.columns)
    # a copy or fill whose size the trace does not record has unknown bytes, never -1
    from kineto_reference import read

    sizes = [g.get("args", {}).get("bytes") for g in read(MI300X)["gpu"] if g["cat"].lower() in ("gpu_memcpy", "gpu_memset")]
    unsized = sum(1 for b in sizes if b is None)
    copies = kernels[kernels["kind"].isin(["memcpy", "memset"])]
    assert unsized > 0 and copies["bytes"].isna().sum() == unsized and (copies["bytes"].dropna() >= 0).all()
    blocks = pd.read_csv(out / "blocks.csv")
    assert blocks["gpu_time_ns"].sum() == kernels["exclusive_ns"].sum()
    for png in ("roofline.png", "breakdown.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (out / "report.html").read_text()
    assert "http://" not in html.replace("http://www.w3.org", "") and "https://" not in html  # self-contained
    assert html.count("data:image/png;base64,") == 2
    md = (out / "report.md").read_text()
    assert "## Blocks (phase x block; share: of the GPU busy time, whole trace, overlap counted once)" in md and "| backward | collective |" in md


def test_names_from_the_trace_are_escaped_in_html(tmp_path):
    from tracekit.reports.bundle import write_bundle

    a = tracekit.analyze(shared("torch", "h100_bert_small_hf_inference.json.gz"))
    a.kernels["name"] = a.kernels["name"].cat.rename_categories(
        {a.kernels["name"].cat.categories[0]: "<script>alert(1)</script>"})
    a.coverage["top_unmodeled"] = [{"name": "<img src=x onerror=alert(2)>", "reason": "<b>r</b>", "time_ns": 1, "share": 0.1}]
    write_bundle(a, str(tmp_path), top=100)
    html = (tmp_path / "report.html").read_text()
    assert "<script>alert(1)" not in html and "<img src=x" not in html and "<b>r</b>" not in html
    assert "&lt;img src=x onerror=alert(2)&gt;" in html


def test_perfetto_export_annotates_every_kernel(tmp_path):
    out = tmp_path / "timeline.json"
    proc = run_cli("export", MI300X, "--perfetto", out)
    assert proc.returncode == 0, proc.stderr
    events = json.loads(out.read_text())["traceEvents"]
    gpu = [e for e in events if e["cat"] in ("kernel", "memcpy", "memset")]
    assert len(gpu) == 3653
    conv = next(e for e in gpu if e["args"]["op"] == "aten::miopen_convolution" and "igemm" in e["name"])
    assert conv["args"]["flops"] > 0 and conv["args"]["phase"] in ("forward", "recompute") and conv["args"]["bound"] in ("compute", "memory")


def test_cpu_only_fixture_analyzes_without_a_device():
    a = tracekit.analyze(PROJECT_FIXTURES / "cpu_tiny_llama_decode.json.gz")
    assert a.device is None and a.blocks.empty
    sdpa = a.ops[a.ops["op"] == "aten::scaled_dot_product_attention"]
    assert sdpa["calls"].sum() == 10
    # prefill: batch 2, 8 query heads, 32 tokens, head dim 16, causal: 4*B*H*D x the 32*33/2 pairs
    prefill = sdpa[sdpa["shapes"].str.startswith("[[2, 8, 32, 16]")]
    assert prefill["flops"].sum() == 2 * (4 * 2 * 8 * (32 * 33 / 2) * 16)  # 2 layers
    assert not a.ops["op"].isin(["aten::addmm", "aten::mm"]).any() or not a.ops["op"].isin(["aten::linear"]).any()
