"""Device lookup, roofline arithmetic and `tracekit analyze` on the shared traces."""

from __future__ import annotations

import tracekit

import gzip
import json

import numpy as np
import pytest

import tracekit.api as api
from conftest import shared
from helpers import run_cli
from tracekit.errors import TraceError
from tracekit.hardware import builtin_devices, closest, find_device, resolve


@pytest.mark.parametrize(
    "trace_name, key",
    [("NVIDIA H100 80GB HBM3", "H100-SXM"), ("Tesla V100-DGXS-32GB", "V100-SXM2"), ("NVIDIA A100-PG509-200", "A100-SXM4-40GB"),
     ("AMD Instinct MI300X", "MI300X"), ("NVIDIA B200", "B200"), ("NVIDIA GB200", "GB200"), ("NVIDIA H100 PCIe", "H100-PCIE"),
     ("NVIDIA H100 NVL", "H100-NVL"), ("NVIDIA H200", "H200"), ("NVIDIA A100 80GB PCIe", "A100-PCIE-80GB"), ("NVIDIA L40S", "L40S"),
     ("NVIDIA L4", "L4"), ("NVIDIA A10G", "A10G"), ("NVIDIA GeForce RTX 4090", "RTX-4090"), ("AMD Instinct MI250X", "MI250X"),
     ("AMD Instinct MI325X", "MI325X"),
     # GPUs people run today, as torch.cuda.get_device_name() spells them
     ("NVIDIA H800", "H800-SXM"), ("NVIDIA H800 PCIe", "H800-PCIE"), ("NVIDIA H20", "H20"), ("NVIDIA H200 NVL", "H200-NVL"),
     ("NVIDIA A800-SXM4-80GB", "A800-SXM4-80GB"), ("NVIDIA A800 80GB PCIe", "A800-PCIE-80GB"), ("NVIDIA L20", "L20"),
     ("NVIDIA B300 SXM6 AC", "B300"), ("NVIDIA GB300", "GB300"), ("NVIDIA GH200 480GB", "GH200"), ("NVIDIA GH200 144G HBM3e", "GH200-144G"),
     ("AMD Instinct MI355X", "MI355X"), ("AMD Instinct MI350X", "MI350X"), ("NVIDIA GeForce RTX 5090", "RTX-5090"),
     ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX-PRO-6000-BLACKWELL"),
     ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX-PRO-6000-BLACKWELL"), ("NVIDIA RTX 6000 Ada Generation", "RTX-6000-ADA"),
     ("NVIDIA RTX A6000", "RTX-A6000"), ("NVIDIA A40", "A40"), ("Tesla T4", "T4"),
     # case and aliases: what a user types after --device
     ("h100", "H100-SXM"), ("H100", "H100-SXM"), ("nvidia h100 80gb hbm3", "H100-SXM"), ("h800", "H800-SXM"), ("a800", "A800-SXM4-80GB"),
     ("amd instinct mi300x", "MI300X"), ("mi355x", "MI355X"), ("rtx pro 6000", "RTX-PRO-6000-BLACKWELL"), ("h20", "H20"), ("h200", "H200")],
)
def test_trace_device_names_select_the_right_spec(trace_name, key):
    assert find_device(trace_name, builtin_devices()).key == key


def test_every_device_has_peaks_bandwidth_and_a_source():
    for d in builtin_devices().values():
        assert d.memory_gbps > 0 and d.interconnect_gbps > 0 and d.sm_count and d.memory_gb and d.l2_mb
        assert d.matrix_tflops.get("bf16") or d.matrix_tflops.get("fp16")
        assert d.vector_tflops.get("fp32") and d.source
    h100 = builtin_devices()["H100-SXM"]
    assert h100.peak_flops("matrix", "bf16") == 989.4e12 and h100.bandwidth == 3.35e12


def test_unknown_device_names_the_closest_and_how_to_choose():
    with pytest.raises(TraceError) as err:
        resolve(None, "NVIDIA H300 Ultra", source="t.json")
    assert "closest known" in err.value.reason and "--device" in err.value.reason
    known = builtin_devices()
    # suggestions stay in the product line: a Hopper-like name gets H-series parts only
    assert closest("NVIDIA H300 Ultra", known) and all(k.startswith("H") for k in closest("NVIDIA H300 Ultra", known))
    assert all(k.startswith("MI") for k in closest("AMD Instinct MI400X", known))
    # a GTX 1060 is not "close" to any data-center GPU: nothing is suggested
    assert closest("GeForce GTX 1060 with Max-Q Design", known) == []
    with pytest.raises(TraceError) as err:
        resolve(None, "GTX 1060", source="t.json")
    assert "no known device of the same product line" in err.value.reason and "A100" not in err.value.reason


def test_unknown_or_unnamed_trace_gpu_is_a_warning_not_an_error():
    device, warning = resolve("GeForce GTX 1060 with Max-Q Design")
    assert device is None and "not in the device table" in warning and "--device" in warning
    device, warning = resolve(None)
    assert device is None and "does not name its GPU" in warning and "--device" in warning
    # the Max-Q edition runs lower clocks: not silently given the full card's peaks
    assert find_device("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", builtin_devices()) is None
    device, warning = resolve("NVIDIA H800")
    assert device.key == "H800-SXM" and warning is None


def test_new_devices_derive_from_their_published_figures():
    d = builtin_devices()
    h100, h800, h20, a100, a800 = d["H100-SXM"], d["H800-SXM"], d["H20"], d["A100-SXM4-80GB"], d["A800-SXM4-80GB"]
    # H800 = H100 SXM compute and memory, NVLink 400 GB/s bidirectional (200 per direction), FP64 cut to 1 TFLOPS
    assert h800.matrix_tflops["bf16"] == h100.matrix_tflops["bf16"] and h800.memory_gbps == h100.memory_gbps
    assert h800.interconnect_gbps == 400 / 2 and h800.matrix_tflops["fp64"] == 1.0
    assert a800.matrix_tflops == a100.matrix_tflops and a800.interconnect_gbps == 400 / 2
    assert h20.peak_flops("matrix", "bf16") == 148e12 and h20.bandwidth == 4.0e12
    assert d["MI355X"].matrix_tflops["bf16"] == pytest.approx(256 * 4096 * 2.4e9 / 1e12, rel=1e-4)  # CUs x FLOP/clk x GHz
    assert d["B300"].matrix_tflops["fp8"] == 72e3 / 2 / 8  # HGX B300: 72 PF sparse over 8 GPUs
    assert d["GB300"].matrix_tflops["bf16"] == 360e3 / 2 / 72  # GB300 NVL72: 360 PF sparse over 72 GPUs


def test_devices_command_lists_the_new_gpus_with_sources():
    import io

    from rich.console import Console

    from tracekit.reports.devices import render_devices

    out = io.StringIO()
    render_devices(builtin_devices(), Console(file=out, width=2000))
    lines = out.getvalue().splitlines()
    for key, source in (("H800-SXM", "H800 SXM5 datasheet"), ("H20", "H20 product specification"), ("A800-SXM4-80GB", "A800 datasheet"),
                        ("L20", "L20 product specification"), ("B300", "HGX B300 datasheet"), ("GB300", "GB300 NVL72 datasheet"),
                        ("MI355X", "MI355X datasheet"), ("RTX-5090", "RTX Blackwell GPU architecture whitepaper"),
                        ("RTX-PRO-6000-BLACKWELL", "RTX PRO 6000 Blackwell")):
        assert any(f" {key} " in line and source in line for line in lines), key


def test_bert_gemm_roofline_by_hand():
    a = api.analyze(shared("torch", "h100_bert_small_hf_inference.json.gz"))
    k = a.kernels
    row = k[k["name"].str.contains("cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128")].iloc[0]
    op = a.kernels.loc[row.name, "op"]
    m, kk = 141, 512
    dims = api.load(shared("torch", "h100_bert_small_hf_inference.json.gz")).ops["input_dims"].iat[op]
    n = dims[2][1]
    flops = 2 * m * n * kk + m * n
    nbytes = 2 * (m * kk + kk * n + m * n + n)
    t_min = max(flops / 989.4e12, nbytes / 3.35e12) * 1e9
    assert row["flops"] == pytest.approx(flops) and row["bytes_read"] + row["bytes_written"] == pytest.approx(nbytes)
    assert row["t_min_ns"] == pytest.approx(t_min)
    assert row["efficiency"] == pytest.approx(t_min / (row["end"] - row["start"]))
    assert row["t_min_sustained_ns"] == pytest.approx(max(flops / 989.4e12, nbytes / (0.8 * 3.35e12)) * 1e9)
    assert row["bound"] == ("compute" if flops / 989.4e12 > nbytes / 3.35e12 else "memory")


def test_coverage_on_shared_traces():
    cov = {}
    for name in ("h100_bert_small_hf_inference.json.gz", "v100_dlrm_8ranks/rank0.json.gz", "v100_resnet50_train_legacy2021.json.gz"):
        cov[name] = api.analyze(shared("torch", *name.split("/"))).coverage
    assert cov["h100_bert_small_hf_inference.json.gz"]["modeled_share"] == 1.0
    assert cov["v100_dlrm_8ranks/rank0.json.gz"]["modeled_share"] > 0.95
    # 2021 schema: convolutions are costed through their autograd partners
    assert cov["v100_resnet50_train_legacy2021.json.gz"]["modeled_share"] > 0.95


def test_efficiency_above_peak_is_flagged_not_clipped():
    a = api.analyze(shared("torch", "v100_resnet50_train_legacy2021.json.gz"))
    k = a.kernels
    over = k[k["over_peak"] & (k["kind"] == "kernel")]
    assert len(over) > 0 and over["efficiency"].min() > 1.05  # reported as measured, above 100%
    # Nearly all of it is convolution: cuDNN's Winograd kernels do fewer multiplies than the
    # direct-convolution FLOPs torch and tracekit count.
    conv_time = over.loc[over["kernel_class"] == "gemm", "duration_ns"].sum()
    assert conv_time / over["duration_ns"].sum() > 0.95
    assert over["name"].str.contains("winograd").any()


def test_analyze_cli_json_and_device_override():
    path = str(shared("torch", "h100_bert_small_hf_inference.json.gz"))
    proc = run_cli("analyze", path, "--format", "json", "--device", "A100-SXM4-80GB")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["device"]["key"] == "A100-SXM4-80GB"
    assert out["coverage"]["modeled_share"] == 1.0
    assert out["top_kernels"][0]["time_ns"] > 0
    bad = run_cli("analyze", path, "--device", "H300")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "closest known" in bad.stderr


def test_device_file_override(tmp_path):
    spec = tmp_path / "lab.toml"
    spec.write_text('[LAB-GPU]\nname = "Lab GPU"\nmatrix_tflops = { bf16 = 100.0 }\nvector_tflops = { fp32 = 10.0 }\n'
                    'memory_gbps = 1000\ninterconnect_gbps = 100\n')
    a = api.analyze(shared("torch", "h100_bert_small_hf_inference.json.gz"), device_file=str(spec))
    assert a.device.key == "LAB-GPU"
    gemm = a.kernels[a.kernels["cost_kind"] == "matrix"].iloc[0]
    flops, nbytes = gemm["flops"], gemm["bytes_read"] + gemm["bytes_written"]
    assert gemm["t_min_ns"] == pytest.approx(max(flops / 100e12, nbytes / 1000e9) * 1e9)


def test_nsys_export_without_gpu_name_is_analysed_without_the_roofline():
    path = shared("nsys", "h100x2_fsdp_emit_nvtx_nsys2026.2.sqlite")
    a = api.analyze(path)
    assert a.device is None
    # one warning, saying what is missing and how to get it
    about_device = [w for w in a.warnings if "--device" in w]
    assert len(about_device) == 1 and "roofline" in about_device[0]
    # time, blocks and overlap are all there; the kernel count and busy time from the trace
    assert a.coverage["kernels"] == 3442
    k = a.kernels
    assert a.blocks["gpu_time_ns"].sum() == k["exclusive_ns"].sum() > 0
    assert len(a.overlap) == 2 and len(a.devices) == 2
    # roofline figures are unknown, never 0
    assert k["t_min_ns"].isna().all() and k["efficiency"].isna().all() and k["bound"].isna().all()
    blocks = a.to_dict()["blocks"]
    assert all(b["efficiency"] is None and b["bound"] is None for b in blocks)
    named = api.analyze(path, device="h100")
    assert named.device.key == "H100-SXM" and not [w for w in named.warnings if "--device" in w]
    assert named.coverage["kernels"] == 3442


def test_cli_analyses_unknown_and_unnamed_gpus_with_one_warning(tmp_path):
    for path in (shared("nsys", "h100x2_fsdp_emit_nvtx_nsys2026.2.sqlite"), shared("bad", "gtx1060_non_utf8_strings.sqlite")):
        proc = run_cli("analyze", path, "--format", "markdown", "--out", tmp_path / path.stem)
        assert proc.returncode == 0, proc.stderr
        assert len([l for l in proc.stderr.splitlines() if "--device" in l]) == 1
        assert all(l.startswith("tracekit: ") for l in proc.stderr.splitlines()), proc.stderr  # no library warnings (empty plot legend)
        assert "device: unknown" in proc.stdout and "## Blocks" in proc.stdout
    assert "no known device of the same product line" in proc.stderr  # the GTX 1060: nothing suggested
    # a trace recorded on an H800 (the bert trace with its device renamed) is put on the H800
    events = json.loads(gzip.open(shared("torch", "h100_bert_small_hf_inference.json.gz"), "rt").read())
    events["deviceProperties"][0]["name"] = "NVIDIA H800"
    h800 = tmp_path / "h800.json"
    h800.write_text(json.dumps(events))
    proc = run_cli("analyze", h800, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["device"]["key"] == "H800-SXM"
    proc = run_cli("analyze", h800, "--format", "json", "--device", "h100")
    assert proc.returncode == 0 and json.loads(proc.stdout)["device"]["key"] == "H100-SXM"


def test_labels_collectives_are_comm_bound_and_zero_time_has_no_rate_or_bound():
    import json

    import numpy as np

    import tracekit
    from conftest import shared

    a = tracekit.analyze(shared("torch", "a100_ddp_nccl_rank0.json.gz"))
    coll = a.blocks[a.blocks["block"] == "collective"]
    assert len(coll) and (coll["bound"] == "comm").all()
    k = a.kernels
    assert (k.loc[k["cost_kind"].astype(str) == "comm", "bound"].astype(str) == "comm").all()
    # The 2021 schema has whole-microsecond times: 0 ns activities exist and have no rate.
    legacy = tracekit.analyze(shared("torch", "v100_resnet50_train_legacy2021.json.gz"))
    zero = legacy.kernels[legacy.kernels["duration_ns"] == 0]
    assert len(zero) > 0
    assert zero["achieved_tbps"].isna().all() and zero["achieved_tflops"].isna().all()
    assert np.isfinite(legacy.kernels["achieved_tbps"].dropna()).all()
    # a group with no time has no bound (it is not "compute")
    from tracekit.costs.unknown import majority_bound
    import pandas as pd

    none = majority_bound({"compute": pd.Series([0.0]), "memory": pd.Series([0.0]), "comm": pd.Series([0.0])}, pd.Series([0.0]))
    assert none[0] is None
    json.loads(tracekit.summary_json(a), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))


def test_the_plotted_roof_is_the_peak_of_the_dtype_the_work_ran_in():
    import tracekit
    from conftest import shared
    from tracekit.analysis.roofline import roof_flops

    a = tracekit.analyze(shared("torch", "h100_qwen1.5-0.5b_hf_inference.json.gz"))
    peak, label = roof_flops(a.device, a.kernels)
    # bf16 HF inference on an H100 SXM: the dense bf16 peak (989.4 TFLOP/s), ridge ~295 FLOP/B
    assert label == "matrix bf16" and peak == pytest.approx(989.4e12)
    assert peak / a.device.bandwidth == pytest.approx(989.4e12 / 3.35e12)
