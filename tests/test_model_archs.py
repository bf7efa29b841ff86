"""Architectures served today (hybrid Gated DeltaNet, Mamba hybrids, MLA, shared experts) and
quantised checkpoints (NVFP4, MXFP4, FP8 tensor / block, compressed-tensors, GPTQ, AWQ, KV
dtype): hand counts of bytes per matrix and per layer, from the formats' published tensor
layouts (vLLM create_weights) and the configs' numbers written out below."""

from __future__ import annotations

import json

import pytest

from conftest import REPO, shared
from helpers import run_cli
from tracekit.errors import TraceError
from tracekit.model import load_config
from tracekit.model.batch import Requests, StepBatch
from tracekit.model.blocks import step_blocks

MODELS = REPO.parent / "shared" / "models"
QWEN35 = MODELS / "qwen3.5-27b.config.json"
# hidden 512, 2 layers, 4 query / 2 KV heads x 128, FFN 256
BASE = {"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 128, "intermediate_size": 256, "vocab_size": 1000, "torch_dtype": "bfloat16"}


def config(tmp_path, **fields):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**BASE, **fields}))
    return path


def block(frame, name, layer, column):
    rows = frame[(frame["block"] == name) & (frame["layer"] == layer)]
    assert len(rows) == 1, (name, layer)
    return float(rows[column].iloc[0])


# -- Qwen3.5-27B (hybrid Gated DeltaNet) with NVFP4 weights: per-layer hand count ---------

def test_qwen35_nvfp4_per_layer_costs_differ_by_layer_type():
    a = load_config(QWEN35, weight_dtype="nvfp4")
    # config: 64 layers, layer_types 3x linear_attention then full_attention; hidden 5120;
    # GDN 16 key heads x 128, 48 value heads x 128, conv 4; attention 24/4 heads x 256 with output gate
    assert a.mixers[:4] == ("linear_attention",) * 3 + ("attention",) and a.mixers.count("attention") == 16
    batch = StepBatch((Requests(8, 8, 8000),), "test")  # 8 decode requests, 1,000 KV tokens each
    f = step_blocks(a, batch).frame()
    # NVFP4: 0.5 B per weight + one FP8 scale per 16 weights along K + 8 B (fp32 global + input scale) per matrix
    # GDN layer 0, Qwen3.5 projections: in_proj_qkv [2*16*128 + 48*128 = 10240, 5120], in_proj_z [6144, 5120],
    # in_proj_b and in_proj_a [48, 5120], out_proj [5120, 6144]: 115,834,880 weights
    gdn_params = 10240 * 5120 + 6144 * 5120 + 2 * 48 * 5120 + 5120 * 6144
    assert gdn_params == 115_834_880
    assert block(f, "linear attention projections", 0, "weight_bytes") == gdn_params * 0.5 + gdn_params / 16 + 5 * 8 == 65_157_160
    # conv1d [10240, 4] bf16 + A_log and dt_bias [48] fp32 + gated norm [128] bf16
    assert block(f, "linear attention core", 0, "weight_bytes") == 10240 * 4 * 2 + 2 * 48 * 4 + 128 * 2 == 82_560
    # state per request: conv (kernel-1 = 3) x 10240 bf16 + 48 x 128 x 128 fp32 (mamba_ssm_dtype float32) = 3,207,168 B,
    # read and written once per step by each of the 8 requests
    per_request = 3 * 10240 * 2 + 48 * 128 * 128 * 4
    assert per_request == 3_207_168
    assert block(f, "linear attention core", 0, "state_bytes") == 2 * 8 * per_request == 51_314_688
    assert "attention core" not in set(f[f["layer"] == 0]["block"])  # no KV cache in a GDN layer
    # full attention layer 3: q_proj [2 * 24*256 = 12288 (query + output gate), 5120], k and v [4*256, 5120], o [5120, 6144]
    attn_params = 12288 * 5120 + 2 * 1024 * 5120 + 5120 * 6144
    assert attn_params == 104_857_600
    assert block(f, "attention projections", 3, "weight_bytes") == attn_params * 0.5625 + 4 * 8 == 58_982_432
    # KV: 8,000 keys x 2 (K, V) x 4 heads x 256 x 2 B (bf16)
    assert block(f, "attention core", 3, "kv_bytes") == 8000 * 2 * 4 * 256 * 2 == 32_768_000
    assert block(f, "attention core", 3, "state_bytes") == 0
    assert "linear attention core" not in set(f[f["layer"] == 3]["block"])
    # FFN (same in every layer): gate, up [17408, 5120], down [5120, 17408]
    ffn = 3 * 17408 * 5120
    assert block(f, "ffn", 0, "weight_bytes") == block(f, "ffn", 3, "weight_bytes") == ffn * 0.5625 + 3 * 8
    # norms: two RMSNorms of 5120 bf16, plus q_norm and k_norm [256] in the attention layer
    assert block(f, "norm", 0, "weight_bytes") == 2 * 5120 * 2
    assert block(f, "norm", 3, "weight_bytes") == 2 * 5120 * 2 + 2 * 256 * 2
    # the whole layer: GDN layer reads 6.3 MB more weights than the attention layer, and its state
    # (51.3 MB) outweighs the attention layer's KV (32.8 MB) at this context
    weights = f.groupby("layer")["weight_bytes"].sum()
    assert weights[0] - weights[3] == (65_157_160 + 82_560) - (58_982_432 + 2 * 256 * 2)
    # --kv-dtype fp8 halves the KV read and leaves the state alone
    f8 = step_blocks(load_config(QWEN35, weight_dtype="nvfp4", kv_dtype="fp8"), batch).frame()
    assert block(f8, "attention core", 3, "kv_bytes") == 8000 * 2 * 4 * 256 * 1
    assert block(f8, "linear attention core", 0, "state_bytes") == 51_314_688


def test_qwen35_architecture_line_and_cli_run():
    a = load_config(QWEN35, weight_dtype="nvfp4")
    line = a.describe()
    for words in ("48 Gated DeltaNet linear attention (16/48 key/value heads x 128/128, conv 4, state 3.06 MiB",
                  "16 attention (24/4 heads x 256, KV cache bf16, output gate, q/k norm)", "nvfp4 (FP8 scale per 16"):
        assert words in line, line
    trace = shared("torch", "mi300x_sglang_qwen3-8b_decode_bs32.json.gz")
    run = run_cli("analyze", trace, "--model", QWEN35, "--weight-dtype", "nvfp4", "--kv-dtype", "fp8", "--format", "json")
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout)
    assert "Gated DeltaNet" in json.dumps(out)


# -- other architectures ------------------------------------------------------------------

def test_nemotron_h_pattern_mamba2_state(tmp_path):
    # M: Mamba-2 only, *: attention only, -: MLP only, E: MoE only
    path = config(tmp_path, model_type="nemotron_h", num_hidden_layers=4, hybrid_override_pattern="M*-E", mamba_num_heads=8,
                  mamba_head_dim=64, ssm_state_size=16, n_groups=2, conv_kernel=4, n_routed_experts=4, num_experts_per_tok=2,
                  moe_intermediate_size=128, moe_shared_expert_intermediate_size=64, mamba_ssm_cache_dtype="float32")
    a = load_config(path)
    assert a.mixers == ("mamba2", "attention", "none", "none") and a.ffn_kinds == ("none", "none", "dense", "moe")
    assert not a.gated_ffn and (a.shared_experts, a.shared_intermediate) == (1, 64)
    f = step_blocks(a, StepBatch((Requests(2, 2, 200),), "test")).frame()
    # Mamba-2: inner 8 x 64 = 512; conv over 512 + 2*2*16 = 576 channels; state 8 heads x 64 x 16 fp32
    per_request = 576 * 3 * 2 + 512 * 16 * 4
    assert block(f, "mamba core", 0, "state_bytes") == 2 * 2 * per_request
    # in_proj [2*512 + 2*2*16 + 8 = 1096, 512], out_proj [512, 512], bf16
    assert block(f, "mamba projections", 0, "weight_bytes") == (1096 * 512 + 512 * 512) * 2
    assert set(f[f["layer"] == 0]["block"]) == {"mamba projections", "mamba core", "norm"}  # no FFN, one norm
    assert block(f, "norm", 0, "weight_bytes") == 512 * 2
    assert block(f, "ffn", 2, "weight_bytes") == 2 * 256 * 512 * 2  # relu2 MLP: up and down only
    assert "Mamba-2 (8 heads x 64, state 16, 2 groups, conv 4" in a.describe()


def test_jamba_mamba1_and_falcon_h1_parallel(tmp_path):
    path = config(tmp_path, model_type="jamba", num_hidden_layers=4, attn_layer_period=4, attn_layer_offset=2, mamba_d_state=16,
                  mamba_d_conv=4, mamba_expand=2, num_experts=4, num_experts_per_tok=2, expert_layer_period=2, expert_layer_offset=1)
    a = load_config(path)
    assert a.mixers == ("mamba", "mamba", "attention", "mamba") and a.ffn_kinds == ("dense", "moe", "dense", "moe")
    # Mamba-1: inner 2 x 512 = 1024, dt_rank ceil(512/16) = 32; state conv 1024 x 3 bf16 + 1024 x 16 (model dtype)
    assert a.ssm.dt_rank == 32 and a.state_bytes_per_request(0) == 1024 * 3 * 2 + 1024 * 16 * 2
    f = step_blocks(a, StepBatch((Requests(1, 1, 10),), "test")).frame()
    assert block(f, "mamba projections", 0, "weight_bytes") == (2048 * 512 + (32 + 32) * 1024 + 1024 * 32 + 512 * 1024) * 2
    falcon = load_config(config(tmp_path, model_type="falcon_h1", mamba_d_ssm=1024, mamba_n_heads=16, mamba_d_head=64,
                                mamba_n_groups=1, mamba_d_state=32, mamba_d_conv=4))
    assert falcon.mixers == ("attention+mamba2",) * 2
    ff = step_blocks(falcon, StepBatch((Requests(1, 1, 10),), "test")).frame()
    assert {"attention core", "mamba core"} <= set(ff[ff["layer"] == 0]["block"])  # both mixers in every layer


def test_mla_latent_kv_fp8_and_shared_experts(tmp_path):
    path = config(tmp_path, model_type="deepseek_v3", num_attention_heads=4, num_key_value_heads=4, q_lora_rank=64, kv_lora_rank=128,
                  qk_rope_head_dim=32, qk_nope_head_dim=64, v_head_dim=64, n_routed_experts=8, num_experts_per_tok=2,
                  n_shared_experts=2, moe_intermediate_size=64, first_k_dense_replace=1)
    a = load_config(path, kv_dtype="fp8")
    f = step_blocks(a, StepBatch((Requests(1, 1, 100),), "test")).frame()
    assert block(f, "attention core", 0, "kv_bytes") == 100 * (128 + 32) * 1  # latent 128 + rope 32, fp8
    # q_b [4 x 96, 64], q_a [64, 512], kv_a [160, 512], kv_b [4 x 128, 128], o [512, 256]
    assert block(f, "attention projections", 0, "weight_bytes") == (384 * 64 + 64 * 512 + 160 * 512 + 512 * 128 + 512 * 256) * 2
    # layer 1 MoE: one token reads 2 routed experts + the shared ones (2 x 64 wide) + the router [8, 512]
    assert block(f, "ffn", 1, "weight_bytes") == (2 * 3 * 64 * 512 + 3 * 128 * 512 + 8 * 512) * 2


# -- quantised checkpoints: bytes of one [256, 512] matrix (N = 256 rows, K = 512) ---------

N, K = 256, 512


@pytest.mark.parametrize("quant, module, expected, dtype", [
    # ModelOpt NVFP4: 0.5 B/weight + FP8 scale per 16 + fp32 global and input scale
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}, "attention", N * K // 2 + N * K // 16 + 8, "nvfp4"),
    # MXFP4: 0.5 B/weight + E8M0 scale per 32
    ({"quant_method": "mxfp4"}, "attention", N * K // 2 + N * K // 32, "mxfp4"),
    # FP8 per tensor (dynamic activations): 1 B/weight + one fp32 scale
    ({"quant_method": "fp8", "activation_scheme": "dynamic"}, "attention", N * K + 4, "fp8"),
    # FP8 block 128x128: fp32 scale per block: 2 x 4 blocks
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "attention", N * K + 2 * 4 * 4, "fp8"),
    # compressed-tensors W4A16 (pack-quantized, group 128, symmetric): bf16 scale per 128
    ({"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"group_0": {"targets": ["Linear"],
      "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 128}}}},
     "attention", N * K // 2 + N * 4 * 2, "int4"),
    # ... asymmetric with act-order: + packed 4-bit zero per group + int32 g_idx per input column
    ({"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"group_0": {"targets": ["Linear"],
      "weights": {"num_bits": 4, "type": "int", "symmetric": False, "strategy": "group", "group_size": 128, "actorder": "group"}}}},
     "attention", N * K // 2 + N * 4 * (2 + 0.5) + K * 4, "int4"),
    # compressed-tensors W8A8 int8, per channel: bf16 scale per output row
    ({"quant_method": "compressed-tensors", "format": "int-quantized", "config_groups": {"group_0": {"targets": ["Linear"],
      "weights": {"num_bits": 8, "type": "int", "strategy": "channel"}}}}, "attention", N * K + N * 2, "int8"),
    # compressed-tensors W8A8 FP8 per channel
    ({"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"group_0": {"targets": ["Linear"],
      "weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}}}, "attention", N * K + N * 2, "fp8"),
    # compressed-tensors nvfp4-pack-quantized: as ModelOpt NVFP4
    ({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized", "config_groups": {"group_0": {"targets": ["Linear"],
      "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}}}}, "attention", N * K // 2 + N * K // 16 + 8, "nvfp4"),
    # GPTQ 4-bit group 128: packed values, fp16 scale + packed zero per group and column, int32 g_idx per input
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True}, "attention",
     N * K // 2 + N * 4 * (2 + 0.5) + K * 4, "int4"),
    # GPTQ 8-bit, group -1 (one group over K)
    ({"quant_method": "gptq", "bits": 8, "group_size": -1}, "attention", N * K + N * (2 + 1) + K * 4, "int8"),
    # AWQ 4-bit group 128 with zero points: fp16 scale + packed zero per group
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}, "attention", N * K // 2 + N * 4 * 2.5, "int4"),
])
def test_quantised_matrix_bytes_by_hand(tmp_path, quant, module, expected, dtype):
    a = load_config(config(tmp_path, quantization_config=quant))
    fmt = a.format(module, 0)
    assert fmt.dtype == dtype and fmt.matrix_bytes(N, K) == expected


def test_unquantised_modules_come_from_the_config(tmp_path):
    # compressed-tensors: `ignore` with a regex; ModelOpt: `exclude_modules` wildcards per layer; mxfp4: modules_to_not_convert
    ct = load_config(config(tmp_path, quantization_config={"quant_method": "compressed-tensors", "ignore": ["lm_head", "re:.*self_attn.*"],
                                                           "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float"}}}}))
    assert ct.format("attention", 0).dtype == "bf16" and ct.format("ffn", 0).dtype == "fp8"
    mo = load_config(config(tmp_path, quantization_config={"quant_method": "modelopt", "quant_algo": "NVFP4", "exclude_modules": ["model.layers.0.*", "lm_head"]}))
    assert [mo.format("ffn", i).dtype for i in (0, 1)] == ["bf16", "nvfp4"]
    # per-group targets: experts in MXFP4, other linears in FP8
    groups = {"experts": {"targets": ["re:.*experts.*"], "weights": {"num_bits": 4, "type": "float", "group_size": 32}},
              "rest": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float"}}}
    moe = load_config(config(tmp_path, num_local_experts=4, num_experts_per_tok=2,
                             quantization_config={"quant_method": "compressed-tensors", "format": "mixed-precision", "config_groups": groups}))
    assert moe.format("experts", 0).dtype == "mxfp4" and moe.format("attention", 0).dtype == "fp8"
    # --weight-dtype overrides the format, and the config still says what stays unquantised
    assert load_config(config(tmp_path, quantization_config={"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]}),
                       weight_dtype="nvfp4").format("attention", 1).dtype == "bf16"


def test_kv_cache_dtype_from_the_checkpoint_and_the_option(tmp_path):
    assert load_config(config(tmp_path, quantization_config={"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8"})).kv_dtype == "fp8"
    ct = {"quant_method": "compressed-tensors", "kv_cache_scheme": {"type": "float", "num_bits": 8},
          "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float"}}}}
    a = load_config(config(tmp_path, quantization_config=ct))
    assert a.kv_dtype == "fp8"
    f = step_blocks(a, StepBatch((Requests(1, 1, 100),), "test")).frame()
    assert block(f, "attention core", 0, "kv_bytes") == 100 * 2 * 2 * 128 * 1
    assert load_config(config(tmp_path), kv_dtype="fp8").kv_bytes == 1.0 and load_config(config(tmp_path)).kv_dtype == "bf16"
    with pytest.raises(TraceError, match="unknown KV-cache dtype"):
        load_config(config(tmp_path), kv_dtype="int3")
