"""Devices users serve on (issue 20 item 7): found from the names traces and drivers report,
listed by `tracekit devices`, dense peaks with a source that says what is derived."""

from __future__ import annotations


import pytest

from helpers import run_cli
from tracekit.hardware import builtin_devices, find_device

NAMES = [  # as torch.cuda.get_device_name / nvidia-smi / rocm-smi report them
    ("NVIDIA GeForce RTX 5090", "RTX-5090"), ("NVIDIA GeForce RTX 5080", "RTX-5080"),
    ("NVIDIA GeForce RTX 5070 Ti", "RTX-5070-TI"), ("NVIDIA GeForce RTX 5070", "RTX-5070"),
    ("NVIDIA GeForce RTX 5060 Ti", "RTX-5060-TI"), ("NVIDIA GB10", "GB10"), ("NVIDIA Thor", "JETSON-AGX-THOR"),
    ("NVIDIA Jetson AGX Thor Developer Kit", "JETSON-AGX-THOR"), ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX-PRO-6000-BLACKWELL"),
    ("NVIDIA H20", "H20"), ("NVIDIA L20", "L20"), ("NVIDIA B300 SXM6 AC", "B300"), ("NVIDIA GB300", "GB300"),
    ("AMD Instinct MI355X", "MI355X"), ("NVIDIA L40", "L40"), ("NVIDIA L40S", "L40S"), ("NVIDIA A30", "A30"),
    ("NVIDIA GB200", "GB200"),
]


@pytest.mark.parametrize("name, key", NAMES)
def test_trace_device_names_find_the_device(name, key):
    assert find_device(name, builtin_devices()).key == key


def test_similar_names_do_not_match_the_wrong_card():
    d = builtin_devices()
    assert find_device("NVIDIA GeForce RTX 5060", d) is None  # the non-Ti card is not in the table
    assert find_device("NVIDIA RTX A3000 Laptop GPU", d) is None  # not the A30
    assert find_device("NVIDIA GB100", d) is None  # not the GB10


def test_geforce_blackwell_dense_peaks_follow_the_5090_ratios():
    # RTX 5090: 3,352 AI TOPS (sparse FP4) -> FP4 1,676, FP8 419, BF16 209.5, TF32 104.8 dense (whitepaper);
    # the other cards' peaks are derived from their AI TOPS with the same ratios
    d = builtin_devices()
    for key, tops in (("RTX-5090", 3352), ("RTX-5080", 1801), ("RTX-5070-TI", 1406), ("RTX-5070", 988), ("RTX-5060-TI", 759)):
        m = d[key].matrix_tflops
        assert (m["fp4"], m["fp8"], m["bf16"], m["tf32"]) == pytest.approx((tops / 2, tops / 8, tops / 16, tops / 32), abs=0.06), key
    assert d["GB10"].memory_gbps == 273 and d["GB10"].matrix_tflops["fp4"] == 1000 / 2  # 1 PFLOP FP4 sparse
    assert d["JETSON-AGX-THOR"].matrix_tflops["fp4"] == pytest.approx(2070 / 2)


def test_every_new_device_says_where_its_figures_come_from():
    d = builtin_devices()
    for key in ("RTX-5080", "RTX-5070-TI", "RTX-5070", "RTX-5060-TI", "GB10", "JETSON-AGX-THOR", "L40", "A30"):
        assert d[key].source and ("derived" in d[key].source.lower()), key
    run = run_cli("devices", env={"COLUMNS": "300"})
    assert run.returncode == 0
    for key in ("RTX-5080", "RTX-5060-TI", "GB10", "JETSON-AGX-THOR", "L40", "A30"):
        assert key in run.stdout, key
