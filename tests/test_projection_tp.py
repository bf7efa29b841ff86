"""tracekit project --tp: the same run at another tensor-parallel degree (tracekit.projection.tp)."""

from __future__ import annotations

import json
import pathlib

import pytest

from tests.synthetic import KinetoBuilder
from tracekit.api import project_tp
from tracekit.hardware import builtin_devices
from tracekit.projection.tp import ring_factor

SHARED = pathlib.Path(__file__).resolve().parents[2] / "shared"
if not SHARED.exists():
    SHARED = pathlib.Path("/work/shared")
TORCH = SHARED / "fixtures" / "torch"
GPT_OSS_120B = SHARED / "models" / "gpt-oss-120b.config.json"

LEAD, TAIL = 5.0, 5.0  # µs: step start -> first kernel, last kernel -> step end (the host waits for the GPU)
M, H, F = 128, 1024, 4096  # tokens, hidden, FFN width; at TP 2 a rank holds F / 2 = 2048 of it
# (name, op, dims, µs): one TP-2 layer on one rank
LAYER = [
    ("layer_norm_kernel", "aten::layer_norm", [[M, H], [H], [H]], 10.0),  # replicated: [M, H]
    ("gemm_up", "aten::mm", [[M, H], [H, F // 2]], 40.0),  # column-parallel: weight [H, F/2], 2048 x 2 >= H
    ("gemm_down", "aten::mm", [[M, F // 2], [F // 2, H]], 40.0),  # row-parallel: weight [F/2, H]
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "c10d::allreduce_", [[M, H]], 20.0),  # TP all-reduce of [M, H] fp32
    ("gemm_router", "aten::mm", [[M, H], [H, 8]], 5.0),  # replicated: 8 x 2 < H
]


def tp2_rank(tmp_path, name="tp2.json"):
    b = KinetoBuilder("NVIDIA H100 80GB HBM3")
    total = sum(d for *_, d in LAYER)
    b.range("ProfilerStep#1", 0.0, LEAD + total + TAIL)
    t = LEAD
    for i, (kernel, op, dims, dur) in enumerate(LAYER):  # launched ahead of the GPU: queued back to back
        b.op(op, 1.0 + i * 0.2, 0.1, dims=dims, types=["float"] * len(dims))
        b.kernel(kernel, 1.0 + i * 0.2 + 0.05, t, dur)
        t += dur
    return b.write(tmp_path / name)


def test_ring_factors():
    assert ring_factor("all_reduce", 4) == pytest.approx(2 * 3 / 4)
    assert ring_factor("all_gather", 8) == ring_factor("reduce_scatter", 8) == pytest.approx(7 / 8)
    assert ring_factor("all_reduce", 1) == 0.0


def test_tp2_to_tp4_hand_formula(tmp_path):
    p = project_tp(tp2_rank(tmp_path), 4, run_tp=2)
    t = p.totals
    assert (p.current_tp, p.target_tp) == (2, 4) and t["hidden"] == H  # hidden = last dim of the layer_norm input
    assert t["sharded_ns"] == pytest.approx(80e3) and t["replicated_ns"] == pytest.approx(15e3)
    assert t["collective_ns"] == pytest.approx(20e3)
    # sharded 80 x 2/4 + replicated 15 + all-reduce 20 x (2*3/4) / (2*1/2) = 40 + 15 + 30 = 85 µs
    assert t["busy_projected_ns"] == pytest.approx((80 * 2 / 4 + 15 + 20 * 1.5 / 1.0) * 1e3)
    assert t["replicated_share_busy"] == pytest.approx(15 / 115)
    # the step is its GPU window (the kernels' span, 115 µs), not its host range (LEAD + 115 + TAIL)
    assert t["replicated_share_step"] == pytest.approx(15 / 115)
    # queued kernels chain from the first start: step' = 85 µs
    assert t["step_measured_ns"] == pytest.approx(115e3) and t["step_projected_ns"] == pytest.approx(85e3)
    # the ring time at the H100's link: message 128 x 1024 x 4 B, x 2(N-1)/N at TP 2 and 4
    link = builtin_devices()["H100-SXM"].interconnect_gbps * 1e9
    c = p.collectives.set_index("collective").loc["all_reduce"]
    assert c["message_bytes"] == M * H * 4
    assert c["ring_now_ns"] == pytest.approx(1.0 * M * H * 4 / link * 1e9)
    assert c["ring_target_ns"] == pytest.approx(1.5 * M * H * 4 / link * 1e9)
    roles = p.signatures.set_index("op")
    assert roles.loc["aten::layer_norm", "role"] == "replicated"


def test_tp2_to_tp1_drops_the_all_reduce(tmp_path):
    t = project_tp(tp2_rank(tmp_path), 1, run_tp=2).totals
    # sharded 80 x 2/1 + replicated 15 + no collective at TP 1
    assert t["busy_projected_ns"] == pytest.approx((160 + 15) * 1e3)


def test_model_config_names_the_shards(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": H, "num_hidden_layers": 1, "num_attention_heads": 16,
                                  "num_key_value_heads": 16, "intermediate_size": F, "vocab_size": 32000}))
    p = project_tp(tp2_rank(tmp_path), 4, run_tp=2, model=config)
    why = p.signatures.set_index("shapes")["reason"]
    assert why.loc[str([[M, H], [H, F // 2]])] == "width 2048 = config width / 2"  # intermediate 4096 / 2
    assert p.totals["sharded_ns"] == pytest.approx(80e3) and p.totals["replicated_ns"] == pytest.approx(15e3)


def test_gpt_oss_tp8_rank0_with_config():
    path = TORCH / "b200_vllm_tp8_rank0_eager.json.gz"
    p4 = project_tp(path, 4, model=GPT_OSS_120B)
    assert p4.current_tp == 8 and p4.tp_source == "per-rank qkv weight shape"  # [2880, 640]: (64 + 2*8) / 8 x 64
    t = p4.totals
    assert {"prefill/ffn", "prefill/attention"} <= {"/".join(b) for b in t["sharded_blocks"]}  # MoE experts, heads / 8
    assert {"prefill/norm", "prefill/embedding"} <= {"/".join(b) for b in t["replicated_blocks"]}
    sig = p4.signatures.set_index(["op", "shapes"])
    assert sig.loc[("aten::addmm", str([[640], [888, 2880], [2880, 640]])), "role"] == "sharded"  # fused qkv / 8
    assert sig.loc[("aten::addmm", str([[2880], [888, 512], [512, 2880]])), "role"] == "sharded"  # o_proj input 4096 / 8
    assert sig.loc[("aten::addmm", str([[128], [888, 2880], [2880, 128]])), "role"] == "replicated"  # the router
    assert sig.loc[("_C::fused_add_rms_norm", str([[888, 2880], [888, 2880], [2880]])), "role"] == "replicated"
    blocks = p4.blocks.set_index(["phase", "block"])
    norm = blocks.loc[("prefill", "norm")]
    assert norm["projected_ns"] == norm["measured_ns"] == 456644  # replicated: as measured (72 + 1 rms_norm kernels)
    # busy at TP 4 = sharded x 8/4 + replicated + unknown (middle of 1 .. 2) + all-reduce x 1.5/1.75 + all-gather x 0.75/0.875
    coll = p4.collectives.set_index("collective")
    expected = (t["sharded_ns"] * 2 + t["replicated_ns"] + t["unknown_ns"] * 1.5
                + coll.loc["all_reduce", "measured_ns"] * 1.5 / 1.75 + coll.loc["all_gather", "measured_ns"] * 0.75 / 0.875)
    assert t["busy_projected_ns"] == pytest.approx(expected)
    assert coll.loc["all_reduce", "kernels"] == 73 and coll.loc["all_reduce", "message_bytes"] == pytest.approx(
        (37 * 2557440 + 36 * 2727936) * 2)  # bf16 messages of [888 x 2880] and [888 x 3072]
    p16 = project_tp(path, 16, model=GPT_OSS_120B)
    assert p16.totals["busy_projected_ns"] < t["busy_ns"] < t["busy_projected_ns"]


def test_b200_tp8_to_h200_tp4_composes():
    """`project --to H200 --tp 4` on the B200 TP8 rank: each kernel's time is its TP ratio (sharded x 8/4,
    replicated x 1, all-reduce x f(4)/f(8) = 1.5/1.75) times its device ratio (what bounds it on the B200,
    tracekit.projection.device), so busy' = sum of t x tp_ratio x device_ratio, and the range likewise."""
    import numpy as np

    from helpers import run_cli
    from tracekit.api import analyze, project

    path = TORCH / "b200_vllm_tp8_rank0_eager.json.gz"
    both = project_tp(path, 4, model=GPT_OSS_120B, to="H200")
    a = both.analysis
    tp_only = project_tp(path, 4, model=GPT_OSS_120B)
    dev_only = project(path, "H200", analysis=a)
    assert both.target.key == "H200" and both.device.key == "B200" and both.current_tp == 8
    excl = a.kernels["exclusive_ns"].to_numpy(dtype=np.float64)
    for col, total in (("ratio", "busy_projected_ns"), ("low", "busy_low_ns"), ("high", "busy_high_ns")):
        composed = tp_only.kernels[col].to_numpy() * dev_only.kernels[col].to_numpy()
        assert both.kernels[col].to_numpy() == pytest.approx(composed)
        assert both.totals[total] == pytest.approx(float((excl * composed).sum()))
    # a replicated kernel moves by its device ratio alone; a sharded one by 2 x its device ratio
    role = both.kernels["role"].to_numpy()
    for name, tp_ratio in (("replicated", 1.0), ("sharded", 2.0)):
        mine = role == name
        assert both.kernels["ratio"].to_numpy()[mine] == pytest.approx(tp_ratio * dev_only.kernels["ratio"].to_numpy()[mine])
    # the time by rule is the device projection's, and the step is replayed once with the composed durations
    assert both.totals["rules"] == pytest.approx(dev_only.totals["rules"])
    assert both.totals["steps"] == 1 and both.totals["step_low_ns"] <= both.totals["step_projected_ns"] <= both.totals["step_high_ns"]
    assert analyze(path).device.key == "B200"
    # the command: both flags together, JSON with the target named
    run = run_cli("project", path, "--to", "H200", "--tp", "4", "--model", GPT_OSS_120B, "--format", "json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["target"]["key"] == "H200" and out["tp"] == {"current": 8, "source": "per-rank qkv weight shape", "target": 4}
    assert out["totals"]["busy_projected_ns"] == pytest.approx(both.totals["busy_projected_ns"])


def test_dlrm_8_ranks_no_tp_sharding():
    from helpers import run_cli
    from tracekit.ranks.tp import project_tp_job

    p = project_tp_job(TORCH / "v100_dlrm_8ranks", 4)
    t = p.totals
    assert not t["sharded_found"] and t["sharded_ns"] == 0 and t["collective_ns"] == 0
    assert len(t["per_rank"]) == 8
    # nothing is TP-sharded: every rank's step stays as measured
    assert all(r["step_projected_ns"] == r["step_measured_ns"] for r in t["per_rank"])
    assert t["job_step_projected_ns"] == t["job_step_measured_ns"] == max(r["step_measured_ns"] for r in t["per_rank"])
    assert {"forward/other", "backward/other", "optimizer/optimizer"} <= {"/".join(b) for b in t["replicated_blocks"]}
    # the embedding lookups (fbgemm split tables) differ across ranks: model-parallel tables, not TP
    differs = p.ranks[~p.ranks["alike"]]
    assert differs["op"].str.contains("split_embedding_codegen_lookup").any()
    # world size 8 is not a TP degree, and with no norm op with shapes nothing could show one: the degree is
    # unknown, said once, not "TP 8" followed by "no TP sharding found"
    assert p.current_tp is None and "world size (8) is not a TP degree" in p.tp_source
    run = run_cli("project", TORCH / "v100_dlrm_8ranks", "--tp", "4")
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert out.startswith("TP ? (unknown: the world size (8) is not a TP degree") and "TP 8" not in out
    assert "no TP sharding found (the TP degree is unknown)" in out
    # the replicated blocks are listed by time; which order is the trace's business
    listed = next(line for line in out.splitlines() if line.startswith("replicated blocks: "))
    assert {"forward/other", "backward/other", "optimizer/optimizer"} <= set(listed.removeprefix("replicated blocks: ").split(", "))


def test_guessed_degree_without_sharded_shapes_is_tp_1():
    """ResNet DDP with activation checkpointing, rank 0 of 8 (MI300X): the RCCL collectives have group
    size 8, but with the hidden size known (the norms' input) no GEMM has per-rank shapes at TP 8: the run
    has no TP (TP 1), the group is data parallelism."""
    p = project_tp(TORCH / "mi300x_resnet_act_checkpoint_rank0.json.gz", 4)
    assert p.current_tp == 1 and p.tp_source.startswith("no TP: no kernel has per-rank shapes at TP 8")
    assert not p.totals["sharded_found"] and p.totals["busy_projected_ns"] == p.totals["busy_ns"]


def test_neither_to_nor_tp_is_one_line_exit_2(tmp_path):
    from helpers import run_cli

    code, _, err = run_cli("project", tp2_rank(tmp_path))
    assert code == 2 and err.count("\n") == 1
