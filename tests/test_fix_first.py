"""What to fix first (issue 30): one ranked list of every cause, each in time and as a share
of ONE denominator (the step time: the steps' GPU windows and the GPU idle inside their host
ranges outside them; or first to last GPU activity), leading the
terminal, Markdown and HTML reports; its first row names the real biggest cause."""

from __future__ import annotations

import io

import pytest

import tracekit
from tracekit.reports.headline import headline as headline_words
from conftest import shared

BERT = ("torch", "h100_bert_small_hf_inference.json.gz")
DDP = ("torch", "a100_ddp_nccl_rank0.json.gz")
SGLANG = ("torch", "mi300x_sglang_qwen3-8b_decode_bs32.json.gz")
FSDP = ("nsys", "h100x2_fsdp_emit_nvtx_nsys2026.2.sqlite")


@pytest.fixture(scope="module")
def runs():
    return {"bert": tracekit.analyze(shared(*BERT), workers=1), "ddp": tracekit.analyze(shared(*DDP), workers=1),
            "sglang": tracekit.analyze(shared(*SGLANG), workers=1),
            "fsdp": tracekit.analyze(shared(*FSDP), device="H100-SXM", workers=1)}


def _step_wall(a) -> int:
    """Sum of each step's wall time: from the earlier of its host range and GPU window to the
    later end (the steps of these traces do not overlap)."""
    s = a.steps
    lo = s[["start_ns", "host_start_ns"]].min(axis=1)
    hi = (s[["start_ns", "duration_ns"]].sum(axis=1)).combine((s["host_start_ns"] + s["host_duration_ns"]), max)
    return int((hi - lo).sum())


def _step_time(a) -> float:
    """The steps' GPU windows and the GPU idle inside their host ranges outside them: the wall
    time where the GPU ran no other work there (analysis.causes.denominator)."""
    return float(a.steps["duration_ns"].sum()) + float(a.findings.outside["idle_ns"])


def test_bert_first_row_is_the_host_late_to_launch(runs):
    """BERT inference: the GPU is idle 3.598 ms of the 3.9 ms inside its step, waiting for
    Python to launch the next kernel; the top op at the roofline (aten::addmm) recovers 94 us."""
    a = runs["bert"]
    f = a.findings
    assert f.denominator == "step time" and f.denominator_ns == _step_time(a) == pytest.approx(_step_wall(a))
    first = f.causes[0]
    assert first["cause"] == "idle_host_wait" and first["time_ns"] == pytest.approx(3.598e6, rel=1e-3)
    assert first["share"] == pytest.approx(first["time_ns"] / f.denominator_ns)
    assert first["where"].startswith("frame ")  # the host code behind it
    recoverable = next(c for c in f.causes if c["cause"] == "recoverable")
    assert recoverable["time_ns"] < 0.1 * first["time_ns"]


def test_ddp_first_row_is_idle_waiting_for_the_host(runs):
    """DDP rank 0: 489 ms of the steps' GPU time idle waiting for the host (inside
    DistributedDataParallel.forward), far above the exposed all-reduce (39 ms) and any copy."""
    f = runs["ddp"].findings
    first = f.causes[0]
    assert first["cause"] == "idle_host_wait" and first["time_ns"] == pytest.approx(489.4e6, rel=1e-2)
    assert first["where"] == "range DistributedDataParallel.forward"
    comm = next(c for c in f.causes if c["cause"] == "exposed_communication")
    assert comm["time_ns"] == pytest.approx(39.19e6, rel=1e-2) and f.causes.index(comm) == 1


def test_sglang_first_row_is_the_blocking_copy_before_the_step(runs):
    """SGLang decode: the step's host range is 465 ms against a 10.4 ms GPU window; the GPU
    sits idle 463 ms before its kernels while the host is blocked in hipMemcpyWithStream
    (Tensor.copy_): the first row, 463.2 / 473.6 ms = 97.8% of the step's wall time."""
    a = runs["sglang"]
    f = a.findings
    first = f.causes[0]
    assert first["cause"] == "idle_outside_sync"
    assert first["time_ns"] == pytest.approx(463.18e6, rel=1e-3)
    # the wall time less 12 us of GPU work no step owns inside the host range
    assert f.denominator_ns == _step_time(a) == pytest.approx(473.543e6, rel=1e-5)
    assert _step_wall(a) - f.denominator_ns == pytest.approx(12.2e3, rel=0.01)
    assert "copy_ of Tensor object" in first["where"] and "0x" not in first["where"]  # the address is dropped
    assert any("463.176 ms" in s and "synchronising call" in s for s in headline_words(f))


def test_fsdp_nsys_first_row_is_the_host_to_device_copies(runs):
    """nsys FSDP export: 1.88 s of the 1.94 s of GPU-active time (two GPUs) is memcpy, most
    of it Memcpy HtoD; before, the report said "What to fix first: (none)"."""
    f = runs["fsdp"].findings
    assert f.denominator.startswith("time from first to last GPU activity, summed over 2 GPUs")
    first = f.causes[0]
    assert first["cause"] == "copies" and first["evidence"]["copy"].startswith("Memcpy HtoD")
    assert first["share"] > 0.9


@pytest.mark.parametrize("name", ["bert", "ddp", "sglang", "fsdp"])
def test_gpu_time_rows_are_disjoint_slices_of_one_denominator(runs, name):
    """Idle, copies, exposed communication and recoverable kernel time never overlap: their
    running total stays within 100% of the denominator; host-time rows carry none."""
    f = runs[name].findings
    gpu = [c for c in f.causes if c["cumulative_share"] is not None]
    assert sum(c["time_ns"] for c in gpu) <= f.denominator_ns * (1 + 1e-9)
    assert gpu[-1]["cumulative_share"] == pytest.approx(sum(c["time_ns"] for c in gpu) / f.denominator_ns)
    for c in f.causes:
        assert c["share"] == pytest.approx(c["time_ns"] / f.denominator_ns)
        if c["cause"] in ("launch_overhead", "profiler_overhead"):
            assert c["cumulative_share"] is None


def test_every_report_leads_with_the_ranked_list(runs, tmp_path):
    """The terminal, report.md and report.html: headline, then the ranked list, then the rest."""
    from rich.console import Console

    from tracekit.reports import analyze as terminal_report, html, markdown
    from tracekit.reports.renderer import RenderOptions

    a = runs["bert"]
    out = io.StringIO()
    terminal_report.render_console(a, Console(file=out, width=120), top=15)
    for text in (out.getvalue(), markdown.render(a, RenderOptions()), html.render(a, RenderOptions())):
        first = text.index("What to fix first: every cause")
        assert first < text.index("coverage") < text.index("Recoverable kernel time by op")
        assert text.index("GPU time went to") < first
        assert "GPU idle: host late to" in text[first:first + 2000]  # (the terminal may wrap the cause)


def test_vllm_graph_delay_is_not_called_queued_behind_other_work():
    """vLLM piecewise execution: 151 ms of GPU idle before the step's kernels, whose work had
    been submitted (hipGraphLaunch returned) while nothing ran on the GPU. It is reported as
    submitted but not started, never as "queued behind other work"."""
    import io

    from rich.console import Console

    from tracekit.reports import analyze as terminal_report

    a = tracekit.analyze(shared("torch", "mi300x_vllm_gpt-oss-20b_prefilldecode_piecewise_execution.json.gz"), workers=1)
    first = a.findings.causes[0]
    assert first["cause"] == "idle_outside_queued" and first["time_ns"] == pytest.approx(151.23e6, rel=1e-3)
    assert "submitted, not started" in first["what"]
    out = io.StringIO()
    terminal_report.render_console(a, Console(file=out, width=120), top=15)
    assert "behind other work" not in out.getvalue() and "nothing ran on the GPU" in out.getvalue()


def _first_launch_calls(a):
    """The launch rows that started each kernel function's first run (lazy module loading makes
    that call long for the load): by pandas here, from the kernels' names and starts."""
    k = a.kernels[(a.kernels["kind"] == "kernel") & (a.kernels["launch"] >= 0)]
    first = k.loc[k.groupby(k["name"].astype(str), observed=True)["start"].idxmin(), "launch"]
    return set(first.tolist())


def test_host_bound_verdict_says_how_much_launch_time_the_profiler_may_own(runs):
    """BERT is host-bound (81% of its step idle, waiting for launches). The verdict adds the
    launch-call time above each call's fastest 10% (per call name: sum of max(0, duration -
    10th-percentile duration)) over the calls that launched GPU work inside the step's host
    range, sync calls apart, and each kernel's first launch apart (it loads the kernel's module):
    what the profiler's instrumentation can have added."""
    import numpy as np

    from tracekit.trace.launch_api import SYNC_API

    a = runs["bert"]
    p = next(c for c in a.findings.causes if c["cause"] == "profiler_overhead")
    lt = a.trace.launches
    launched = np.zeros(len(lt), dtype=bool)
    rows = a.kernels["launch"].to_numpy()
    launched[rows[rows >= 0]] = True
    s = a.steps.iloc[0]
    inside = (lt["start"] >= s["host_start_ns"]) & (lt["start"] < s["host_start_ns"] + s["host_duration_ns"])
    sync = lt["name"].astype(str).map(lambda n: bool(SYNC_API.search(n)))
    first = np.isin(np.arange(len(lt)), list(_first_launch_calls(a)))
    assert first.sum() == a.kernels.loc[a.kernels["kind"] == "kernel", "name"].nunique()  # one per kernel function
    mine = lt[launched & inside.to_numpy() & ~sync.to_numpy() & ~first & ((lt["end"] - lt["start"]) > 0).to_numpy()]
    d = (mine["end"] - mine["start"]).astype(float)
    excess = sum(float(np.clip(g - np.quantile(g, 0.1), 0, None).sum()) for _, g in d.groupby(mine["name"].astype(str)))
    assert p["time_ns"] == pytest.approx(excess) and p["evidence"]["launch_ns"] == pytest.approx(float(d.sum()))
    assert p["cumulative_share"] is None  # host time: part of the host-wait idle, not added to it
    sentence = next(s for s in headline_words(a.findings) if "waiting for the host" in s)
    assert f"{p['evidence']['launch_ns'] / 1e3:,.3f} us the host spent in launch calls" in sentence
    assert "the profiler's own share at most" in sentence


def test_launch_calls_behind_a_full_queue_are_not_the_profilers_share():
    """h200 eager decode: the first step's kernels started ~245 ms after their launch calls
    returned (the GPU still ran work from before the capture), and those calls took up to 2.6 ms
    each, blocked by the full launch queue. Recomputed here from the launch table: per call
    name, sum of max(0, duration - its 10th-percentile duration) over the calls that launched
    work inside a step's host range, sync calls apart, and calls whose first activity started
    1 ms or more after the call returned left out (the queue's time, not the profiler's)."""
    import numpy as np

    from tracekit.trace.launch_api import SYNC_API

    a = tracekit.analyze(shared("torch", "h200_llama3-8b_eager_decode_bs16.json.gz"), workers=1)
    p = next(c for c in a.findings.causes if c["cause"] == "profiler_overhead")
    lt, k = a.trace.launches, a.kernels
    rows = k["launch"].to_numpy()
    first = np.full(len(lt), np.iinfo(np.int64).max)
    np.minimum.at(first, rows[rows >= 0], k["start"].to_numpy()[rows >= 0])
    start, end = lt["start"].to_numpy(), lt["end"].to_numpy()
    steps = a.steps
    inside = np.zeros(len(lt), dtype=bool)
    for lo, d in zip(steps["host_start_ns"], steps["host_duration_ns"]):
        inside |= (start >= lo) & (start < lo + d)
    sync = lt["name"].astype(str).map(lambda n: bool(SYNC_API.search(n))).to_numpy()
    queued = first - end >= 1_000_000
    keep = (first < np.iinfo(np.int64).max) & inside & ~sync & (end > start)
    assert (keep & queued).sum() > 100  # the back-pressured calls of the first step
    keep &= ~queued & ~np.isin(np.arange(len(lt)), list(_first_launch_calls(a)))  # and each kernel's first launch
    dur = (end - start).astype(float)
    names = lt["name"].astype(str).to_numpy()
    excess = sum(np.clip(dur[keep & (names == n)] - np.quantile(dur[keep & (names == n)], 0.1), 0, None).sum()
                 for n in set(names[keep]))
    assert p["time_ns"] == pytest.approx(excess, rel=1e-6)
    assert p["time_ns"] < 0.2 * 219.4e6  # the 219 ms it was included ~217 ms of queue back-pressure


def test_a_cause_whose_activities_all_lack_a_name_is_still_a_row():
    import numpy as np
    import pandas as pd

    from tracekit.analysis.causes import UNNAMED, _largest_by_name

    k = pd.DataFrame({"name": pd.Categorical([None, None, None])})
    rows = np.array([True, True, False])
    name, ns, count = _largest_by_name(k, rows, np.array([5.0, 7.0, 100.0]))
    assert (name, ns, count) == (UNNAMED, 0.0, 2)
    named = pd.DataFrame({"name": pd.Categorical(["a", None, "b"])})
    assert _largest_by_name(named, np.array([True, True, True]), np.array([5.0, 70.0, 6.0])) == ("b", 6.0, 1)


def test_a_kernels_first_launch_is_its_module_load_not_profiler_or_launch_overhead(tmp_path):
    """nvFuser's and Triton's kernels, and any kernel under CUDA's lazy loading, load their module
    on their first launch: there the call takes milliseconds (the shared nvFuser export: 1.4-13 ms
    per first launch). Each of two kernels runs 5 times in a ProfilerStep; each first launch call
    takes 3 ms, the others 5 or 7 us. The profiler's row is the later calls' excess over their
    fastest 10% only, and no first launch counts as a launch longer than its kernel."""
    import numpy as np

    from synthetic import KinetoBuilder

    b = KinetoBuilder()
    b.range("ProfilerStep#1", 0.0, 20_000.0)
    t, durations = 10.0, {}
    for i in range(5):
        for name in ("void kernel_a<float>(float*)", "void kernel_b<float>(float*)"):
            call = 3000.0 if i == 0 else (5.0 if i % 2 else 7.0)
            b.kernel(name, t, t + call + 1.0, 2.0)
            b.events[-2]["dur"] = call  # the launch call's duration
            durations.setdefault(name, []).append(call)
            t += call + 10.0
    a = tracekit.analyze(b.write(tmp_path / "first_launches.json"), workers=1)
    later = np.array([d for calls in durations.values() for d in calls[1:]]) * 1e3
    excess = np.clip(later - np.quantile(later, 0.1), 0, None).sum()  # one call name: cudaLaunchKernel
    p = next(c for c in a.findings.causes if c["cause"] == "profiler_overhead")
    assert p["time_ns"] == pytest.approx(excess) and p["evidence"]["first_launches_left_out"] == 2
    assert p["evidence"]["launch_ns"] == pytest.approx(later.sum())
    s = a.findings.short_kernels
    assert s["count"] == 8 and s["launch_ns"] == pytest.approx(later.sum())  # 2 us kernels behind 5-7 us calls; the 3 ms calls apart
