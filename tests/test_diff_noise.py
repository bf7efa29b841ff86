"""diff compares like with like, and tells a change from noise: synthetic captures of one
workload (tests/synthetic.py), where every duration is written by hand, so each expected
figure is a formula over those durations."""

from __future__ import annotations

import random

import pytest

from synthetic import KinetoBuilder

GEMM, ADD = "ampere_sgemm_128x64_nn", "vectorized_elementwise_kernel_add"
GEMM_US, ADD_US, STEP_US = 100.0, 20.0, 500.0


def capture(tmp_path, name, steps, gemm_scale=1.0, jitter=0.0, seed=0, calls=3):
    """`steps` ProfilerStep#N ranges of STEP_US each; per step `calls` pairs of aten::mm ->
    GEMM (GEMM_US × gemm_scale) and aten::add -> ADD (ADD_US), every kernel duration
    multiplied by (1 + u), u uniform in [-jitter, +jitter] (seeded)."""
    rng = random.Random(seed)
    b = KinetoBuilder()
    t = 1000.0
    for s in range(steps):
        b.range(f"ProfilerStep#{s + 1}", t, STEP_US)
        gpu = t + 5
        for c in range(calls):
            launch = t + 1 + 20 * c
            for op, kernel, dur, dims in (("aten::mm", GEMM, GEMM_US * gemm_scale, [[512, 512], [512, 512]]),
                                          ("aten::add", ADD, ADD_US, [[512, 512], [512, 512]])):
                d = dur * (1 + rng.uniform(-jitter, jitter))
                b.op(op, launch, 5, dims=dims, types=["float", "float"])
                b.kernel(kernel, launch + 1, gpu, d)
                gpu += d + 0.5
                launch += 8
        assert gpu < t + STEP_US  # the kernels fit in the step: its duration stays STEP_US
        t += STEP_US + 10
    return b.write(tmp_path / f"{name}.json")


def rows(d, table):
    return {tuple(r["key"].values()): r for r in d[table]}


def test_different_numbers_of_steps_compare_per_step_and_per_call_not_totals(tmp_path):
    from tracekit.compare import diff

    d = diff(capture(tmp_path, "four", 4), capture(tmp_path, "six", 6))
    assert d["same_steps"] is False and "4 ProfilerStep vs 6 ProfilerStep" in d["same_steps_reason"]
    assert d["normalisation"]["kernels"] == d["normalisation"]["ops"] == "per call"
    # per call: GEMM_US each side; calls = 3 per step × 4 and × 6
    gemm = rows(d, "kernels")[(GEMM,)]
    assert (gemm["base"]["calls"], gemm["new"]["calls"]) == (12, 18)
    assert gemm["base"]["per_call_ns"] == gemm["new"]["per_call_ns"] == GEMM_US * 1000
    assert gemm["delta_ns"] == 0 and gemm["ratio"] == 1.0 and gemm["verdict"] == "within noise"
    assert gemm["total_ratio"] == pytest.approx(18 / 12)  # what the old diff called a 1.5x slowdown
    mm = rows(d, "ops")[("aten::mm", "[[512, 512], [512, 512]]")]
    assert (mm["base"]["calls"], mm["new"]["calls"], mm["ratio"]) == (12, 18, 1.0)
    # per step: steps 1-4 match with STEP_US each; 5 and 6 are the new capture's only
    steps = d["steps"]
    assert [(r["key"]["index"], r["delta_ns"]) for r in steps[:4]] == [(i, 0.0) for i in range(4)]
    assert [r["only"] for r in steps[4:]] == ["new", "new"]
    totals = {r["metric"]: r for r in d["totals"]}
    assert totals["step_time_ns"]["ratio"] == 1.0 and totals["step_time_ns"]["verdict"] == "within noise"
    # totals over different steps are shown, not compared
    busy = totals["gpu_busy_ns"]
    assert busy["compared"] is False and busy["delta"] is None and busy["ratio"] is None
    assert busy["new"] / busy["base"] == pytest.approx(6 / 4)
    # blocks: per step, time / steps, unchanged
    assert d["normalisation"]["blocks"].startswith("per step")
    assert all(r["delta_ns"] == pytest.approx(0, abs=1e-6) for r in d["blocks"])


def test_same_steps_compare_totals(tmp_path):
    from tracekit.compare import diff

    d = diff(capture(tmp_path, "a", 4), capture(tmp_path, "b", 4, gemm_scale=1.1))
    totals = {r["metric"]: r for r in d["totals"]}
    assert d["same_steps"] and totals["gpu_busy_ns"]["compared"]
    # busy grows by the GEMMs' 10%: 12 calls × 10 µs
    assert totals["gpu_busy_ns"]["delta"] == pytest.approx(12 * 0.1 * GEMM_US * 1000)


def test_a_ten_percent_slowdown_is_slower_and_one_percent_jitter_is_noise(tmp_path):
    from tracekit.compare import diff

    base = capture(tmp_path, "base", 20, jitter=0.01, seed=1)
    slow = diff(base, capture(tmp_path, "slow", 20, gemm_scale=1.10, jitter=0.01, seed=2))
    gemm, add = rows(slow, "kernels")[(GEMM,)], rows(slow, "kernels")[(ADD,)]
    assert gemm["verdict"] == "slower" and gemm["interval"][0] > 1.05 and gemm["ratio"] == pytest.approx(1.10, abs=0.01)
    assert add["verdict"] == "within noise" and add["interval"][0] < 1 < add["interval"][1]
    assert rows(slow, "ops")[("aten::mm", "[[512, 512], [512, 512]]")]["verdict"] == "slower"
    jitter = diff(base, capture(tmp_path, "jitter", 20, jitter=0.01, seed=3))
    assert {r["verdict"] for r in jitter["kernels"]} == {"within noise"}
    assert {r["verdict"] for r in jitter["ops"]} == {"within noise"}


def test_noise_verdicts_from_a_stored_summary_match_the_trace(tmp_path):
    """summary.json keeps a sketch of each kernel's calls: the verdict survives storage."""
    import json

    import tracekit
    from tracekit.compare import diff

    base = tracekit.analyze(capture(tmp_path, "base", 20, jitter=0.01, seed=1))
    new = tracekit.analyze(capture(tmp_path, "slow", 20, gemm_scale=1.10, jitter=0.01, seed=2))
    stored = [json.loads(tracekit.summary_json(a, 5)) for a in (base, new)]
    sketch = stored[0]["top_kernels"][0]["duration_sketch_ns"]
    assert len(sketch) == 20 and sketch == sorted(sketch)  # 60 calls in 20 quantiles
    d = diff(*stored)
    assert rows(d, "kernels")[(GEMM,)]["verdict"] == "slower" and rows(d, "kernels")[(ADD,)]["verdict"] == "within noise"


def test_check_baseline_gate_fails_a_real_regression_and_passes_noise(tmp_path):
    from tracekit.compare import as_summary, check

    base = as_summary(capture(tmp_path, "base", 20, jitter=0.01, seed=1))
    slow = as_summary(capture(tmp_path, "slow", 20, gemm_scale=1.10, jitter=0.01, seed=2))
    jitter = as_summary(capture(tmp_path, "jitter", 20, jitter=0.01, seed=3))
    expect = [{"kernel": GEMM, "max_regression": 0.05}]
    (v,) = check(slow, expect, base)
    assert not v.ok and v.measured == pytest.approx(0.10, abs=0.01) and "slower" in v.reason
    (v,) = check(jitter, expect, base)
    assert v.ok
    # a regression below its limit passes even when beyond noise
    (v,) = check(slow, [{"kernel": GEMM, "max_regression": 0.2}], base)
    assert v.ok


def test_diff_device_option_puts_an_unnamed_export_on_a_gpu():
    """An export that does not name its GPU gets a roofline in a diff with --device, as in analyze."""
    import json

    from conftest import shared
    from helpers import run_cli

    export = shared("nsys", "h100x2_fsdp_emit_nvtx_nsys2026.2.sqlite")
    run = run_cli("diff", export, export, "--device", "H100-SXM", "--format", "json")
    assert run.returncode == 0, run.stderr
    d = json.loads(run.stdout)
    assert d["base"]["device_key"] == d["new"]["device_key"] == "H100-SXM"
    from tracekit.compare.summary import as_summary

    assert as_summary(export)["device"] is None  # without --device: no GPU, so no roofline
    # the same capture on both sides: every kernel unchanged per call, within noise
    assert {r["verdict"] for r in d["kernels"] if r["samples"] and min(r["samples"]) > 1} == {"within noise"}


def test_diff_of_two_rank_directories(tmp_path):
    from conftest import shared
    from tracekit.compare.diff_ranks import diff_ranks

    for side in ("a", "b"):
        (tmp_path / side).mkdir()
        for rank in (0, 1):
            (tmp_path / side / f"rank{rank}.json.gz").symlink_to(shared("torch", "v100_dlrm_8ranks", f"rank{rank}.json.gz"))
    d = diff_ranks([str(tmp_path / "a")], [str(tmp_path / "b")])
    assert d["ranks_matched_by"] == "rank number" and [r["rank"] for r in d["ranks"]] == [0, 1]
    # the same traces on both sides: each rank's step unchanged; the cross-rank step time is
    # the median over every rank's steps (one ProfilerStep#10 per rank: the mean of the two)
    steps = [r["diff"]["totals"][0] for r in d["ranks"]]
    assert all(s["base"] == s["new"] and s["ratio"] == 1.0 for s in steps)
    per_rank = [r["diff"]["steps"] for r in d["ranks"]]
    assert [len(p) for p in per_rank] == [1, 1]
    cross = {r["metric"]: r for r in d["cross_rank"]}
    assert cross["step_time_ns"]["base"] == sum(p[0]["base"]["time_ns"] for p in per_rank) / 2
    assert cross["step_time_ns"]["ratio"] == 1.0


def _readme_story() -> str:
    """The test file of docs/compare.md "A regression story, end to end", as the page prints it."""
    from conftest import REPO

    text = (REPO / "docs" / "compare.md").read_text()
    story = text[text.index("### A regression story, end to end"):]
    return story[story.index("```python\n") + len("```python\n"):story.index("\n```", story.index("```python\n"))] + "\n"


def test_the_readme_regression_story_runs_as_written(tmp_path):
    """README's story, verbatim, through pytest and tracekit's plugin: record the baseline,
    pass on 1% jitter, fail on a GEMM 10% slower per call with the printed verdict."""
    import os
    import subprocess
    import sys

    from conftest import REPO, _plugin_installed

    (tmp_path / "test_perf.py").write_text(_readme_story())
    plugin = [] if _plugin_installed() else ["-p", "tracekit.integrations.pytest_plugin"]
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def pytest_run(*args):
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin, *args, "test_perf.py"],
                              capture_output=True, text=True, cwd=tmp_path, env=env)

    def train(**kw):
        os.replace(capture(tmp_path, "capture", 20, **kw), tmp_path / "train.json")

    train(jitter=0.01, seed=1)
    recorded = pytest_run("--tracekit-update-goldens")  # step 1: the baseline
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    assert (tmp_path / "baseline" / "train.summary.json").is_file()
    train(jitter=0.01, seed=3)  # step 2: run-to-run jitter only
    jitter = pytest_run()
    assert jitter.returncode == 0, jitter.stdout
    train(gemm_scale=1.10, jitter=0.01, seed=2)  # step 3: the GEMM 10% slower on every call
    slow = pytest_run()
    assert slow.returncode == 1
    assert "2 of 2 tracekit expectations failed" in slow.stdout
    line = next(x for x in slow.stdout.splitlines() if x.startswith(f"{GEMM} time_per_call regression"))
    assert "| <= 0.05 |" in line and "| FAIL |" in line and "slower beyond noise" in line
    measured = float(line.split("|")[2])
    assert measured == pytest.approx(0.10, abs=0.005)
    # the step's GPU window: 3 x (100 + 20) us of kernels, 0.5 us apart = 362.5 us; the GEMMs 30 us longer
    step = next(x for x in slow.stdout.splitlines() if x.startswith("run step_time regression"))
    assert float(step.split("|")[2]) == pytest.approx(30 / 362.5, abs=0.005) and "| FAIL |" in step


def test_diff_device_file_and_model_options_apply_to_both_sides(tmp_path):
    """diff takes --device-file and --model as analyze does. A lab GPU of 1,000 GB/s from a
    file: every costed kernel's roofline minimum is bytes / 1e12 s per byte (or FLOPs / peak).
    --model on the SGLang decode trace: the graph-replayed kernels get the model's costs, so
    coverage goes from under 1% to most of the kernel time, on both sides alike."""
    import json

    from conftest import shared, shared_model
    from helpers import run_cli

    spec = tmp_path / "lab.toml"
    spec.write_text('[LAB-GPU]\nname = "Lab GPU"\nmatrix_tflops = { bf16 = 100.0 }\nvector_tflops = { fp32 = 10.0, bf16 = 10.0 }\n'
                    'memory_gbps = 1000\ninterconnect_gbps = 100\n')
    bert = shared("torch", "h100_bert_small_hf_inference.json.gz")

    def diff_json(*args):
        run = run_cli("diff", *args, "--format", "json")
        assert run.returncode == 0, run.stderr
        return json.loads(run.stdout)

    d = diff_json(str(bert), str(bert), "--device-file", str(spec), "--device", "LAB-GPU")
    assert d["base"]["device_key"] == d["new"]["device_key"] == "LAB-GPU"
    import tracekit

    a = tracekit.analyze(bert, device="LAB-GPU", device_file=str(spec))
    k = a.kernels[a.kernels["t_min_ns"].notna() & (a.kernels["cost_kind"] == "vector")].iloc[0]
    assert k["t_min_ns"] == pytest.approx(max(k["flops"] / 10e12, (k["bytes_read"] + k["bytes_written"]) / 1000e9) * 1e9)

    sglang = shared("torch", "mi300x_sglang_qwen3-8b_decode_bs32.json.gz")
    config = shared_model("qwen3-8b.config.json")
    plain, modelled = diff_json(str(sglang), str(sglang)), diff_json(str(sglang), str(sglang), "--model", str(config))
    coverage = {r["metric"]: r for r in modelled["totals"]}["coverage"]
    plain_coverage = {r["metric"]: r for r in plain["totals"]}["coverage"]
    assert plain_coverage["base"] < 0.01 and coverage["base"] == coverage["new"] > 0.9


def test_noise_of_a_mean_over_more_calls_than_numpy_can_draw():
    """A sketch standing for 10**30 calls (a summary.json validates counts, but noise.py is
    reached from the API too): numpy's multinomial took it as a 64-bit count (OverflowError,
    exit 1). Past 2**40 calls the interval is the mean itself to a millionth."""
    from tracekit.compare.noise import Samples, compare, interval

    points = [float(v) for v in range(90, 110)]
    for n in (10 ** 30, 2 ** 63, 2 ** 53):
        base, new = Samples.sketched(points, n), Samples.sketched([p * 1.1 for p in points], n)
        lo, hi = interval(base, new)
        assert lo == pytest.approx(1.1, rel=1e-5) and hi == pytest.approx(1.1, rel=1e-5)
        assert compare(base, new, 1.1)["verdict"] == "slower"
        merged = Samples.merged([base, Samples.sketched(points, 5)])
        assert interval(merged, merged) == pytest.approx((1.0, 1.0), rel=1e-5)  # a merge of huge counts: no overflow
