"""The report a performance engineer acts on: headline, what to fix first, GPU idle split,
names, terminal width, hostile names through every renderer, Perfetto structure."""

from __future__ import annotations

import gzip
import io
import json
import re
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

import tracekit
from tracekit.reports.headline import headline as headline_words
from conftest import SHARED, shared, sweep
from helpers import run_cli
from tracekit.analysis.findings import compute
from tracekit.analysis.rollup import kernel_summary
from tracekit.trace.kernel_names import MAX_LABEL, label, labels
from tracekit.trace.readable_names import demangle, readable
from tracekit.reports import analyze as console_report
from tracekit.reports import html, markdown
from tracekit.reports.renderer import RenderOptions
from tracekit.trace.timeline import idle_gaps

BERT = shared("torch", "h100_bert_small_hf_inference.json.gz")
QWEN = shared("torch", "h100_qwen1.5-0.5b_hf_inference.json.gz")
SGLANG = shared("torch", "mi300x_sglang_qwen3-8b_decode_bs32.json.gz")

HOSTILE = ("x [/nope] y [link=https://evil.example]click me[/link] \x1b]0;owned\x07\x1b[2J\x9b31m "
           "<script>alert(1)</script> <img src=x onerror=alert(2)> ![](https://evil.example/a.png) a|b\r\nc `code` :smile:")


def _run(args, columns="100"):
    """The command as a terminal of `columns` columns runs it (piped)."""
    return run_cli(*args, env={"COLUMNS": columns})


# -- terminal width ------------------------------------------------------------------------

def _all_shared_inputs():
    traces = sorted(SHARED.glob("torch/*.json.gz")) + sorted(SHARED.glob("nsys/*.sqlite"))
    return traces + [SHARED / "torch" / "v100_dlrm_8ranks"]  # the 8 ranks, as one job


@pytest.mark.parametrize("path", sweep(_all_shared_inputs()), ids=lambda p: p.name)
def test_columns_100_fits_every_shared_trace(path):
    args = ["analyze", str(path), "--full"] + (["--device", "H100-SXM"] if "h100x2_fsdp" in path.name else []) + (
        ["--workers", "1"] if path.is_dir() else [])
    proc = _run(args)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) > 10
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)
    assert "\x1b" not in proc.stdout  # piped: plain text, no colour codes
    assert "_ZN" not in proc.stdout  # every mangled name is demangled


def test_narrow_terminal_drops_columns_before_the_kernel_name():
    wide, narrow = _run(["analyze", str(QWEN), "--full"], columns="160"), _run(["analyze", str(QWEN), "--full"], columns="80")
    assert max(map(len, narrow.stdout.splitlines())) <= 80 and max(map(len, wide.stdout.splitlines())) <= 160
    head = lambda out: next(l for l in out.splitlines() if l.startswith("| kernel"))  # noqa: E731
    assert "TFLOP/s" in head(wide.stdout) and "TFLOP/s" not in head(narrow.stdout)
    assert "time" in head(narrow.stdout)  # time is never dropped


# -- hostile names through every renderer ---------------------------------------------------

def _hostile_analysis():
    a = tracekit.analyze(BERT)
    top = a.kernels["duration_ns"].groupby(a.kernels["name"], observed=True).sum().idxmax()
    a.kernels["name"] = a.kernels["name"].cat.rename_categories({top: HOSTILE})
    first_op = a.kernels["op_name"].cat.categories[0]
    a.kernels["op_name"] = a.kernels["op_name"].cat.rename_categories({first_op: HOSTILE})
    a.ops.loc[0, "op"] = HOSTILE
    a = replace(a, meta={**a.meta, "path": HOSTILE}, warnings=[HOSTILE],
                coverage={**a.coverage, "top_unmodeled": [{"name": HOSTILE, "reason": HOSTILE, "time_ns": 1.0, "share": 0.5}]})
    # built once in build(): again for the renamed kernel
    return replace(a, findings=compute(a), kernel_summary=kernel_summary(a.kernels))


def test_hostile_names_in_the_terminal():
    a = _hostile_analysis()
    buf = io.StringIO()
    con = Console(file=buf, width=100, force_terminal=True, markup=False, emoji=False, highlight=False)
    console_report.render_console(a, con, 15)
    out = buf.getvalue()
    # rich's own styling is CSI ...m; nothing else from the name reaches the terminal
    assert not re.search(r"\x1b(?!\[[0-9;]*m)", out)
    assert "\x9b" not in out and "\x07" not in out and "\r" not in out
    assert "\x1b]8;" not in out  # no live hyperlink from [link=...]
    assert "[/nope]" in out and "[link=https://evil.example]" in out  # markup shown as text
    assert "\\x1b]0;owned\\x07" in out  # the escape sequence shown, escaped


def test_hostile_names_in_markdown():
    a = _hostile_analysis()
    text = markdown.render(a, RenderOptions(top=15, images={"roofline": b"", "breakdown": b""}))
    assert "<script" not in text and "<img" not in text and "![](" not in text and "\r" not in text
    assert "https://evil" not in text  # no autolink
    assert "&lt;script&gt;" in text
    pipes = lambda line: len(re.findall(r"(?<!\\)\|", line))  # noqa: E731  unescaped cell borders
    lines = text.splitlines()
    checked = 0
    for i, line in enumerate(lines):  # every row of every table has its header's column count
        if line.startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|--"):
            j = i + 2
            while j < len(lines) and lines[j].startswith("|"):
                assert pipes(lines[j]) == pipes(line), lines[j]
                checked += "x \\[/nope\\] y" in lines[j]
                j += 1
    assert checked >= 3  # the hostile kernel and op rows were among them


def test_hostile_names_in_html():
    a = _hostile_analysis()
    page = html.render(a, RenderOptions(top=15))
    assert "<script>alert" not in page and "<img src=x" not in page and "\x1b" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert 'title="x [/nope]' in page  # the full name in the cell's title, escaped


def test_hostile_kernel_name_end_to_end(tmp_path):
    """A trace whose kernel name holds markup and escape sequences: exit 0, nothing raw."""
    with gzip.open(BERT, "rt") as f:
        doc = json.load(f)
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and e.get("name") == kernel["name"]:
            e["name"] = HOSTILE
    path = tmp_path / "hostile.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    proc = _run(["analyze", str(path), "--out", str(tmp_path / "out"), "--top", "100"])
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout + proc.stderr and "\x9b" not in proc.stdout
    md = (tmp_path / "out" / "report.md").read_text()
    assert "<script" not in md and "&lt;script&gt;" in md  # the kernel's label, shown as text
    page = (tmp_path / "out" / "report.html").read_text()
    assert "<script>alert" not in page and 'title="x [/nope] y [link=https://evil.example]' in page


# -- names ----------------------------------------------------------------------------------

def test_demangle_and_labels():
    aiter = "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb0ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib"
    assert demangle(aiter).startswith("void aiter::add_rmsnorm_quant_kernel<std::bfloat16_t, std::bfloat16_t, 256, 16, false")
    # a C++20 mangling the demangler rejects still yields its qualified name, never _ZN
    sgl = "_ZN7sgl_hip10activation18act_and_mul_kernelI14__hip_bfloat16TnPFT_RKS3_EXadL_Z4siluIS2_ES3_S5_EEEEvPS3_PS4_i"
    assert label(sgl) == "sgl_hip::act_and_mul_kernel<…>"  # the library's namespace stays
    # the return type with a `>` inside parentheses, and nsys casts
    assert readable("std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
                    "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long)") == "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>"
    assert label("void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, "
                 "unsigned int, float, (int)4, (int)4>>(T3)") == "reduce_kernel<512, 1, MeanOps>"
    mul = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, float, "
           "at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, {0} const&)::{{lambda(int)#1}}>(int, {0})")
    add = mul.replace("BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >", "CUDAFunctor_add<float>")
    got = labels([mul, add])
    assert got == {mul: "elementwise_kernel<128, 4, MulFunctor>", add: "elementwise_kernel<128, 4, CUDAFunctor_add>"}
    # same template, different dtypes: detail grows until they differ
    half, single = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::Half>, std::array<char*, 3> >(int, T2, T3)",
                    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3> >(int, T2, T3)")
    assert set(labels([half, single]).values()) == {"vectorized_elementwise_kernel<4, CUDAFunctor_add<Half>>",
                                                   "vectorized_elementwise_kernel<4, CUDAFunctor_add<float>>"}


def test_labels_keep_what_identifies_a_kernel_and_fit_60_characters():
    # FlashAttention-3 backward as Kineto names it: the launcher cutlass::device_kernel wraps
    # flash::FlashAttnBwdSm90<mainloop, epilogue, flash::SingleTileSchedulerBwd<...>>; the label
    # was "SingleTileSchedulerBwd" (the scheduler, not the kernel)
    fa3 = ("void cutlass::device_kernel<flash::FlashAttnBwdSm90<flash::CollectiveMainloopBwdSm90<2, cute::tuple<cute::C<1>, "
           "cute::C<1>, cute::C<1> >, cute::tuple<cute::C<64>, cute::C<128>, cute::C<128> >, cutlass::bfloat16_t, float, "
           "cutlass::arch::Sm90, true, false>, flash::CollectiveEpilogueBwd<cute::tuple<cute::C<64>>, cutlass::bfloat16_t>, "
           "flash::SingleTileSchedulerBwd<false> > >(flash::FlashAttnBwdSm90<int>::Params)")
    assert label(fa3).startswith("flash::FlashAttnBwdSm90<")
    # a templated GEMM of an extension keeps its namespace (it was "GemmKernel #3")
    gemm = "void fp8_blockwise::GemmKernel<128, 128, 64, 4, (bool)1>(float*)"
    assert label(gemm) == "fp8_blockwise::GemmKernel<128, 128, 64, 4, true>"
    # AMD Tensile: layouts, types, macro tile and matrix instruction of a 200+ character name
    tensile = ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x32x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_"
               "DTLA0_DTLB0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA8_GRVWB8_GSUAMBSK_GLS0_ISA942_IU1_K1_LDSTI0_WS64_WG64_4_1")
    assert label(tensile) == "Cijk_Alik_Bljk_BBS_BH_MT256x32x64_MI16x16x1"


@pytest.mark.parametrize("path", sorted(SHARED.glob("torch/*.json.gz")) + sorted(SHARED.glob("nsys/*.sqlite")), ids=lambda p: p.name)
def test_labels_are_unique_and_demangled_on_shared_traces(path, load_cached):
    names = load_cached(path).kernels["name"].astype(str).unique()
    got = labels(names)
    assert len(set(got.values())) == len(names)
    assert not any(v.startswith("_Z") for v in got.values())
    # (a trace whose kernels all lost their times, trace health, has no kernel and no label)
    assert max((len(v) for v in got.values()), default=0) <= MAX_LABEL + len(" #999")  # numbered only where all else is equal


# -- what to fix first ----------------------------------------------------------------------

def _raw_events(path):
    with gzip.open(path, "rt") as f:
        return json.load(f)["traceEvents"]


def test_recoverable_time_of_an_op_by_hand():
    """aten::addmm [[512], [141, 512], [512, 512]] (bf16) on H100: the bytes of one call are
    (512 + 141*512 + 512*512 + 141*512) * 2, its roofline minimum bytes / (3.35 TB/s * 0.8);
    its time is the sum of its kernels' durations in the raw trace."""
    a = tracekit.analyze(BERT)
    row = a.findings.fix_ops.iloc[0]
    assert (row["what"], row["detail"]) == ("aten::addmm", "[[512], [141, 512], [512, 512]]")
    events = _raw_events(BERT)
    ops = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::addmm"
           and e.get("args", {}).get("Input Dims", [])[:3] == [[512], [141, 512], [512, 512]]]
    runtime = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver") and "Launch" in e["name"]]
    kernels = {e["args"]["correlation"]: e for e in events if e.get("cat") == "kernel"}
    durations = []
    for op in ops:
        for r in runtime:
            if r["tid"] == op["tid"] and op["ts"] <= r["ts"] <= op["ts"] + op["dur"] and r["args"]["correlation"] in kernels:
                durations.append(kernels[r["args"]["correlation"]]["dur"])
    assert len(durations) == len(ops) == row["count"] == 17
    assert row["time_ns"] == pytest.approx(sum(durations) * 1e3, abs=len(durations))
    t_min_call = (512 + 141 * 512 + 512 * 512 + 141 * 512) * 2 / (3350e9 * 0.8) * 1e9
    assert row["t_min_ns"] == pytest.approx(17 * t_min_call, rel=1e-6)
    assert row["recoverable_ns"] == pytest.approx(row["time_ns"] - row["t_min_ns"], rel=1e-9)
    # the step's time on the GPU: its gpu_user_annotation (its kernels all run inside it)
    step = sum(e["dur"] for e in events if e.get("cat") == "gpu_user_annotation" and e["name"].startswith("ProfilerStep#")) * 1e3
    # shares are of the step time: the step's GPU window and the GPU idle inside its host range outside it
    assert a.findings.basis_ns == a.findings.denominator_ns == pytest.approx(step + a.findings.outside["idle_ns"], rel=1e-3)
    assert row["share"] == pytest.approx(row["recoverable_ns"] / a.findings.denominator_ns, rel=1e-9)
    f = a.findings
    assert f.fix_ops["cumulative_share"].iloc[-1] == pytest.approx(f.fix_ops["share"].sum())
    # kernels and blocks rank the same recoverable time, cut differently
    assert f.fix_kernels["recoverable_ns"].sum() == pytest.approx(f.fix_blocks["recoverable_ns"].sum())


def test_headline_states_efficiency_only_with_enough_coverage():
    qwen, sglang = tracekit.analyze(QWEN), tracekit.analyze(SGLANG)
    assert qwen.coverage["modeled_share"] > 0.5 and sglang.coverage["modeled_share"] < 0.5
    text = " ".join(headline_words(qwen.findings))
    assert f"{100 * qwen.coverage['efficiency_sustained']:.0f}% of the sustained roofline" in text
    low = " ".join(headline_words(sglang.findings))
    assert "sustained roofline (" not in low and "too little to state an efficiency" in low and "--model" in low
    assert 3 <= len(headline_words(qwen.findings)) <= 5 and 3 <= len(headline_words(sglang.findings)) <= 5
    summary = json.loads(tracekit.summary_json(qwen))
    assert list(summary)[:2] == ["schema_version", "headline"] and summary["headline"] == headline_words(qwen.findings)


# -- idle split ------------------------------------------------------------------------------

def test_idle_gaps_by_cause_on_a_hand_made_timeline():
    # one device; kernels [0,10) [20,30) [50,60) [61,70); the second's launch at 15 (after the
    # GPU went idle at 10: host wait); the third's at 46, after the host sat in a
    # cudaDeviceSynchronize over [25, 45): 15 of the 20 ns gap (sync); the fourth's at 40,
    # before the 1 ns gap at 60 (other: too short to be queued). Window [0, 80).
    k = pd.DataFrame({"device": [0] * 4, "start": [0, 20, 50, 61], "end": [10, 30, 60, 70]})
    k["pid"] = 7
    launches = np.array([-1, 15, 46, 40])
    gaps = idle_gaps(k, launches, np.array([[25, 45, 7]]), {0: np.array([[0, 80]])})
    assert gaps[["start", "end", "idle_ns", "category"]].values.tolist() == [
        [10, 20, 10, "host_wait"], [30, 50, 20, "sync"], [60, 61, 1, "other"], [70, 80, 10, "other"]]
    # a synchronisation in another process says nothing of this GPU's gaps: the late launch is host wait
    other = idle_gaps(k, launches, np.array([[25, 45, 8]]), {0: np.array([[0, 80]])})
    assert other["category"].tolist() == ["host_wait", "host_wait", "other", "other"]
    # a sync call that merely returns 1 ns into the gap does not claim it
    brief = idle_gaps(k, launches, np.array([[25, 31, 7]]), {0: np.array([[0, 80]])})
    assert brief["category"].tolist() == ["host_wait", "host_wait", "other", "other"]
    # the third kernel submitted at 5, before the gap: the host's sync did not hold it up
    # (it waited on something else; 20 ns is too short to call queued)
    early = idle_gaps(k, np.array([-1, 15, 5, 40]), np.array([[25, 45, 7]]), {0: np.array([[0, 80]])})
    assert early["category"].tolist() == ["host_wait", "other", "other", "other"]
    # a launch call that began before the gap but returned inside it (lazy module loading
    # makes cudaLaunchKernel take milliseconds): the host was late, not the queue
    slow_call = idle_gaps(k, np.array([-1, 15, 5, 40]), np.zeros((0, 3)), {0: np.array([[0, 80]])}, np.array([-1, 16, 48, 41]))
    assert slow_call["category"].tolist() == ["host_wait", "host_wait", "other", "other"]


def test_a_gap_the_host_spends_in_a_sync_copy_is_sync_even_with_work_queued():
    # mi300x_sglang decode: the 463.295 ms gap on device 9 opens at +0.085 ms; the kernel that
    # ends it (correlation 92158) was launched 38 us after the gap opened and sat queued behind
    # hipStreamWaitEvent while the host was blocked in hipMemcpyWithStream (a sync copy, open
    # from +0.362 ms to +463.425 ms: more than half the gap). Nothing ran on the GPU, so the
    # kernel was queued behind nothing there: the host's blocking copy holds the gap (issue 30).
    from tracekit.analysis.findings import gaps_of
    from tracekit.trace.launch_api import SYNC_API

    assert SYNC_API.search("hipMemcpyWithStream") and SYNC_API.search("cudaMemcpy") and SYNC_API.search("hipStreamSynchronize")
    assert not SYNC_API.search("hipMemcpyAsync") and not SYNC_API.search("cudaMemcpyAsync")
    a = tracekit.analyze(SGLANG)
    k = a.kernels
    window = np.array([[int(k["start"].min()), int(k["end"].max())]])
    gaps = gaps_of(a, {int(d): window for d in k["device"].unique()})
    big = gaps.sort_values("idle_ns").iloc[-1]
    assert big["idle_ns"] == pytest.approx(463.295e6, abs=2e3)
    assert big["category"] == "sync"
    nxt = int(big["next_row"])
    launch = a.trace.launches.iloc[int(k["launch"].iat[nxt])]
    assert int(launch["start"]) - int(big["start"]) == pytest.approx(38e3, abs=2e3)


def test_host_code_behind_idle_names_the_range(tmp_path):
    # DDP rank 0: 488.6 ms of idle inside steps waits for the host; the innermost user range
    # open across most of it on the launching thread is `DistributedDataParallel.forward`.
    a = tracekit.analyze(shared("torch", "a100_ddp_nccl_rank0.json.gz"))
    h = a.findings.idle_host
    top = h.iloc[0]
    assert (top["kind"], top["name"]) == ("range", "DistributedDataParallel.forward")
    assert 0 < top["idle_ns"] <= a.findings.idle["idle_ns"].sum()
    assert (h["share_of_idle"] <= 1.0).all()
    doc = json.loads(tracekit.summary_json(a))
    assert doc["what_to_fix_first"]["idle_host"][0]["name"] == "DistributedDataParallel.forward"
    assert "DistributedDataParallel.forward" in " ".join(headline_words(a.findings))


def test_idle_split_adds_up_to_the_idle_time_inside_steps():
    """The categories add up to the step's GPU window (its gpu_user_annotation) minus the
    union of GPU activity in it, computed here from the raw trace."""
    a = tracekit.analyze(QWEN)
    events = _raw_events(QWEN)
    step = next(e for e in events if e.get("cat") == "gpu_user_annotation" and e["name"].startswith("ProfilerStep#"))
    lo, hi = step["ts"], step["ts"] + step["dur"]
    gpu = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    busy, reach = 0.0, lo
    for s, e in gpu:
        s, e = max(s, reach), min(e, hi)
        if e > s:
            busy += e - s
            reach = e
    idle_raw_ns = (hi - lo - busy) * 1e3
    got = a.findings.idle["idle_ns"].sum()
    assert got == pytest.approx(idle_raw_ns, abs=0.002 * (hi - lo) * 1e3)
    assert set(a.findings.idle["category"]) == {"host_wait", "sync", "queued", "other"}


# -- Perfetto ---------------------------------------------------------------------------------

def test_perfetto_has_numeric_ids_names_and_flows(tmp_path):
    out = tmp_path / "t.json"
    proc = _run(["export", str(BERT), "--perfetto", str(out)])
    assert proc.returncode == 0, proc.stderr
    events = json.loads(out.read_text())["traceEvents"]
    assert all(isinstance(e["pid"], int) and isinstance(e["tid"], int) for e in events)
    named_pids = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    named_tids = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    slices = [e for e in events if e["ph"] == "X"]
    assert {e["pid"] for e in slices} <= named_pids and {(e["pid"], e["tid"]) for e in slices} <= named_tids
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = [e for e in events if e["ph"] == "f"]
    a = tracekit.analyze(BERT)
    launched = a.kernels[(a.kernels["op"] >= 0) & (a.kernels["launch"] >= 0)]
    assert len(starts) == launched["launch"].nunique() and len(ends) == len(launched)
    kernel_at = {(e["pid"], e["tid"], e["ts"]) for e in slices if e["cat"] in ("kernel", "memcpy", "memset")}
    op_threads = {(e["pid"], e["tid"]) for e in slices if e["cat"] == "cpu_op"}
    for f in ends:
        assert f["bp"] == "e" and f["id"] in starts and (f["pid"], f["tid"], f["ts"]) in kernel_at
        s = starts[f["id"]]
        assert (s["pid"], s["tid"]) in op_threads and s["ts"] <= f["ts"]


@pytest.mark.parametrize("name", ["mi300x_sglang_qwen3-8b_decode_bs32.json.gz", "mi300x_resnet_act_checkpoint_rank0.json.gz"])
def test_bundle_has_no_mangled_label_and_keeps_the_full_name(tmp_path, name):
    from tracekit.reports.bundle import write_bundle

    a = tracekit.analyze(shared("torch", name))
    write_bundle(a, str(tmp_path), top=100)
    for report in ("report.md", "report.html"):
        text = (tmp_path / report).read_text()
        assert "_ZN" not in text
        # the headline comes first, then the ranked list, before the device, coverage and tables
        assert text.lstrip("# ").index("GPU time went to") < text.index("What to fix first") < text.index("coverage: ")
    kernels = pd.read_parquet(tmp_path / "kernels.parquet")
    mangled = kernels[kernels["name"].str.startswith("_Z")]
    assert len(mangled) > 0 and not mangled["label"].str.startswith("_Z").any()
    assert (kernels["name"].astype(str) == a.kernels["name"].astype(str)).all()  # the raw name stays as recorded
    assert mangled["demangled"].str.contains("::").all()


def test_devices_command_prints_without_citations_in_width():
    proc = _run(["devices"], columns="100")
    assert proc.returncode == 0 and max(map(len, proc.stdout.splitlines())) <= 100
