"""`tracekit analyze TRACE --ncu NCU.csv`: the project's own H100 recordings (fixtures/gpu/h100,
an eager prefill + decode step and a compiled decode step, each with its Nsight Compute CSV)
give the figures benchmarks/ncu_bytes.py prints; `--bytes measured` puts DRAM's bytes on the
roofline; bad or mismatched CSVs are one line and exit 2."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

import tracekit
from tracekit.costs.ncu_compare import base_name
from tracekit.costs.ncu_read import read_ncu

from helpers import run_cli

ROOT = pathlib.Path(__file__).resolve().parent.parent
H100 = ROOT / "fixtures" / "gpu" / "h100"
EAGER = (H100 / "h10080gbhbm3_llama3-8b_4layers_prefill1x512_decode_bs16_ncu_twin.json.gz", H100 / "ncu_step.csv")
COMPILED = (H100 / "h10080gbhbm3_llama3-8b_8layers_compiled_decode_bs16_ncu_twin.json.gz", H100 / "compiled_ncu.csv")


@pytest.fixture(scope="module")
def eager():
    return tracekit.analyze(EAGER[0], ncu=EAGER[1])


def test_the_eager_step_reproduces_the_benchmark(eager):
    # benchmarks/ncu_bytes.py on this pair: paired 395 (395 costed); compared 168 above 1 MB;
    # 167 kernels, 99.8% of their time within ±15%
    r = eager.coverage["ncu"]
    assert (r["paired"], r["costed"], r["ncu_kernels"], r["compared_strict"]) == (395, 395, 395, 168)
    assert round(r["share_strict"], 3) == 0.998
    assert r["share"] >= r["share_strict"]  # the small-kernel rule only adds
    # totals are the sums of the paired kernels' own figures
    ncu = read_ncu(EAGER[1])
    assert r["measured_bytes"] == float((ncu["read"] + ncu["written"]).sum())
    k = eager.kernels[eager.kernels["kind"].astype(str) == "kernel"]
    assert r["modeled_bytes"] == pytest.approx(float((k["bytes_read"] + k["bytes_written"]).sum()))


def test_families_add_up_and_name_the_functions(eager):
    r = eager.coverage["ncu"]
    families = r["families"]
    assert families[0]["time_ns"] >= families[-1]["time_ns"]
    gemm = next(f for f in families if f["family"] == "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT")
    ncu = read_ncu(EAGER[1])
    mine = ncu[[base_name(n) == gemm["family"] for n in ncu["name"]]]
    assert gemm["kernels"] == len(mine) and gemm["measured_bytes"] == float((mine["read"] + mine["written"]).sum())
    assert gemm["time_ns"] == float(mine["time_ns"].sum())


def test_the_compiled_step_reproduces_the_benchmark():
    # benchmarks/ncu_bytes.py: paired 184, compared 91, 26.7% of their time (Inductor's lumped bytes)
    r = tracekit.analyze(COMPILED[0], ncu=COMPILED[1]).coverage["ncu"]
    assert (r["paired"], r["compared_strict"]) == (184, 91)
    assert round(r["share_strict"], 3) == 0.267


def test_measured_bytes_go_on_the_roofline(eager):
    measured = tracekit.analyze(EAGER[0], ncu=EAGER[1], bytes_from="measured")
    k = measured.kernels[measured.kernels["kind"].astype(str) == "kernel"].sort_values("start")
    ncu = read_ncu(EAGER[1])
    assert measured.coverage["ncu"]["kernels_measured"] == 395
    assert (k["cost_source"].astype(str) == "Nsight Compute bytes").all()
    # every kernel paired in order here (395 = 395): the bytes are ncu's row by row
    assert np.array_equal(k["bytes_read"].to_numpy(), ncu["read"].to_numpy(float))
    assert np.array_equal(k["bytes_written"].to_numpy(), ncu["written"].to_numpy(float))
    # FLOPs are the model's still
    mine = eager.kernels.loc[k.index]
    assert np.array_equal(k["flops"].to_numpy(), mine["flops"].to_numpy())


def test_the_report_states_the_rule():
    out = run_cli("analyze", EAGER[0], "--ncu", EAGER[1])
    assert out.returncode == 0, out.stderr
    assert "within 1.00 MB where both are under 4.00 MB" in out.stdout and "99.8% of 168 kernels" in out.stdout
    js = run_cli("analyze", EAGER[0], "--ncu", EAGER[1], "--format", "json")
    assert json.loads(js.stdout)["coverage"]["ncu"]["paired"] == 395


@pytest.mark.parametrize("content, reason", [
    ("hello\n", 'no "Kernel Name" column'),
    ('"ID","Kernel Name","dram__bytes_read.sum"\n"0","k","1"\n', "lacks dram__bytes_write.sum, gpu__time_duration.sum"),
    ('"ID","Kernel Name","dram__bytes_read.sum","dram__bytes_write.sum","gpu__time_duration.sum"\n', "holds no kernel"),
])
def test_a_bad_csv_is_one_line_and_exit_2(tmp_path, content, reason):
    bad = tmp_path / "ncu.csv"
    bad.write_text(content)
    out = run_cli("analyze", EAGER[0], "--ncu", bad)
    assert out.returncode == 2 and reason in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert str(bad) in out.stderr and "Traceback" not in out.stderr


def test_a_csv_of_other_work_is_refused():
    out = run_cli("analyze", EAGER[0], "--ncu", COMPILED[1])
    assert out.returncode == 2 and "not a recording of the same work" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_measured_bytes_need_the_csv():
    out = run_cli("analyze", EAGER[0], "--bytes", "measured")
    assert out.returncode == 2 and "--bytes measured needs --ncu" in out.stderr
