"""Modeled bytes against the hardware: Nsight Compute's DRAM counters per kernel on an H100,
recorded with fixtures/gpu/device_checks.sh (one 512-token prefill and one batch-16 decode
step of a 4-layer Llama-3.1-8B shape), and the two cost rules that recording corrected."""

from __future__ import annotations

import importlib.util
import pathlib

import pandas as pd
import pytest

from tracekit.costs import Cost, op_cost

ROOT = pathlib.Path(__file__).resolve().parent.parent
RECORDING = ROOT / "fixtures" / "gpu" / "h100"
NCU_CSV = RECORDING / "ncu_step.csv"
TWIN = RECORDING / "h10080gbhbm3_llama3-8b_4layers_prefill1x512_decode_bs16_ncu_twin.json.gz"
BF16 = "c10::BFloat16"


def _benchmark():
    spec = importlib.util.spec_from_file_location("ncu_bytes", ROOT / "benchmarks" / "ncu_bytes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def judged() -> pd.DataFrame:
    nb = _benchmark()
    return nb.judge(nb.pair(nb.read_ncu(str(NCU_CSV)), nb.twin_kernels(str(TWIN))), 0.15, 1e6)


def test_ncu_csv_reads_numbers_with_thousands_separators():
    ncu = _benchmark().read_ncu(str(NCU_CSV))
    assert len(ncu) == 395  # every kernel between cudaProfilerStart and Stop
    gather = ncu[ncu["name"].str.contains("vectorized_gather_kernel")].iloc[0]
    assert gather["read"] == 4210176  # printed "4,210,176": the embedding rows of 512 tokens, 4096 wide, bf16
    assert abs(gather["read"] / (512 * 4096 * 2) - 1) < 0.01


def test_modeled_reads_agree_with_dram_on_the_h100(judged):
    big = judged[~judged["small"]]
    assert len(judged) == 395 and judged["costed"].all()  # every kernel paired, every one costed
    assert len(big) >= 150
    share = big.loc[big["agrees"], "time_ns"].sum() / big["time_ns"].sum()
    assert share >= 0.85, f"only {share:.1%} of the compared kernels' time is within ±15% of DRAM reads"


def test_the_gemms_weights_are_what_dram_reads(judged):
    mm = judged[judged["name"].str.startswith("nvjet")]
    assert len(mm) >= 50
    # a GEMM reads A and B once: the measured DRAM reads agree within 5% in total
    assert abs(mm["model_read"].sum() / mm["read"].sum() - 1) < 0.05


def test_a_strided_view_reads_every_sector_of_its_span():
    # rotary embedding's `a * cos` on a = x[..., ::2] (x: [1, 32, 512, 128] bf16): the view's
    # smallest stride is 2, so DRAM moves the whole of x (ncu: 4.29 MB), not a's 2.1 MB
    dims = [[1, 32, 512, 64], [512, 64]]
    strides = [[2097152, 128, 4096, 2], [64, 1]]
    cost = op_cost("aten::mul", dims, [BF16, BF16], ["", ""], None, strides)
    assert isinstance(cost, Cost)
    a, cos = 32 * 512 * 64 * 2, 512 * 64 * 2
    assert cost.bytes_read == 2 * a + cos
    assert cost.bytes_written == a
    # a permuted (transposed) tensor is dense: no waste
    dense = op_cost("aten::mul", dims, [BF16, BF16], ["", ""], None, [[2097152, 64, 4096, 1], [64, 1]])
    assert dense.bytes_read == a + cos
    # fp32 with stride 16: one element per 32-byte sector, 8x (not 16x)
    wide = op_cost("aten::neg", [[1024]], ["float"], [""], None, [[16]])
    assert wide.bytes_read == 1024 * 4 * 8


def test_a_tensor_lists_dtype_comes_from_the_op_that_made_its_tensors():
    import tracekit

    k = tracekit.analyze(TWIN).kernels
    cat = k[k["op_name"].astype(str) == "aten::cat"]
    # torch.stack of the two rotated halves of q: [1, 32, 512, 64, 1] x 2 in bf16, made by
    # `sub` and `add` just before; the generic copy kernels name no element type
    assert len(cat) > 0 and set(cat["dtype"].astype(str)) == {"bf16"}
    per_call = cat.groupby("op")["bytes_read"].sum()
    assert per_call.max() == 2 * 32 * 512 * 64 * 2
