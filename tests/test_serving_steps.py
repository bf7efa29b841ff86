"""Serving traces as they come (issue 20): every engine's step annotation, partial knowledge
gives partial answers (never exit 1), graph-capture pairing, and a matrix over the serving fixtures.

The engines' format strings, quoted from their published source:
- vLLM `vllm/v1/worker/gpu_worker.py` (Worker.annotate_profile), first form (PR #22496):
      f"execute_new_{num_new}_cached_{num_cached}"
  native form (PR #31193):
      "".join(["execute_context_", str(num_ctx_requests), "(", str(num_ctx_tokens), ")_generation_",
               str(num_generation_requests), "(", str(num_generation_tokens), ")"])
  detailed form (PR #37524, opt-in `detailed_trace_annotation`):
      "".join(["execute_", str(total_scheduled_tokens), "_context_", str(num_ctx_requests), "(sq", str(num_ctx_tokens),
               "sk", str(ctx_seq_len_sum), "sqsq", str(ctx_qq_compute), "sqsk", str(ctx_qk_compute), ")_generation_", ...])
- SGLang `python/sglang/srt/model_executor/model_runner.py` `_build_step_span_name` (PR #23419):
      f"step[EXTEND bs={bs} toks={ext_toks}]"      f"step[{mode.name} bs={bs}]"
  with the roofline suffix (PR #24911): f"g_sqsq={sqsq} g_sqsk={sqsk} g_sk={sk}" (DECODE),
  f"c_sqsq={sqsq} c_sqsk={sqsk} c_sk={sk}" (EXTEND), MIXED f"c={..} g={..} " + f"c_sq=.. c_sk=.. c_sqsq=.. c_sqsk=.. "
  + f"g_sq=.. g_sk=.. g_sqsq=.. g_sqsk=.."; the PR's description lists lower-case forms
  (`step[decode bs=N]`, `step[prefill bs=N toks=T]`, `step[mixed bs=N ext=T dec=D]`, `step[idle]`).
- TensorRT-LLM `tensorrt_llm/_torch/pyexecutor/py_executor.py` (NVTX):
      f"[Executor] _forward_step {self.model_engine.iter_counter}: {len(scheduled_requests.context_requests)} ctx reqs, {len(scheduled_requests.generation_requests)} gen reqs"
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO
from synthetic import KinetoBuilder
from tracekit.model.batch import from_annotation

MODELS = REPO.parent / "shared" / "models"
GPT_OSS_20B = MODELS / "gpt-oss-20b.config.json"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracekit", *map(str, args)], capture_output=True, text=True, cwd=REPO, timeout=600)


def strict(text: str):
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))


def serving_trace(tmp_path, step_name: str, device: str = "NVIDIA H100 80GB HBM3") -> str:
    """One step range with 24 layers of kernels launched inside it (a GEMM, attention, a GEMM, a MoE GEMM)."""
    b = KinetoBuilder(device)
    b.range(step_name, 0.0, 1000.0)
    t = 10.0
    for _ in range(24):
        for name, dur in (("ampere_bf16_s16816gemm_bf16_64x64_ldg8_f2f_stages_64x6_tn", 8.0), ("kernel_unified_attention_3d", 4.0),
                          ("ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_ldg8_f2f_stages_64x5_tn", 8.0), ("fused_moe_kernel", 20.0)):
            b.kernel(name, t, t + 1, dur)
            t += dur + 1
    return b.write(tmp_path / "serving.json")


# -- 2. partial knowledge: partial answers, never exit 1 ----------------------------------------

@pytest.mark.parametrize("device", [[], ["--device", "h100"]])
def test_decode_without_kv_length_is_a_flagged_lower_bound(tmp_path, device):
    """`execute_context_0(0)_generation_4(4)`: 4 decode tokens, KV length unknown. It ended with
    exit 1 (TypeError in model/predict.py); now weights and activations are costed, the KV part is unknown."""
    path = serving_trace(tmp_path, "execute_context_0(0)_generation_4(4)")
    run = cli("analyze", path, "--model", GPT_OSS_20B, "--format", "json", *device)
    assert run.returncode == 0, run.stderr
    model = strict(run.stdout)["model"]
    (step,) = model["steps"]
    assert (step["requests"], step["tokens"], step["kv_tokens"], step["kv_bytes"]) == (4, 4, None, None)
    assert step["lower_bound"] and step["complete_with"] == "--context" and "--context" in step["missing"]
    assert step["weight_bytes"] > 0 and step["bytes"] > step["weight_bytes"] and step["flops"] > 0
    assert step["predicted_ns"] > 0 and step["error"] is None and model["mape"] is None
    assert model["steps_lower_bound"] == model["steps_predicted"] == 1
    assert "pass --context C" in run.stderr
    # --context completes it: 4 requests x (1000 cached + 1 new) KV tokens, a prediction above the bound
    full = strict(cli("analyze", path, "--model", GPT_OSS_20B, "--format", "json", "--context", "1000", *device).stdout)["model"]["steps"][0]
    assert full["kv_tokens"] == 4 * 1001 and not full["lower_bound"] and full["complete_with"] is None
    assert full["weight_bytes"] == step["weight_bytes"] and full["bytes"] > step["bytes"] and full["predicted_ns"] > step["predicted_ns"]
    assert full["error"] is not None


def test_unknown_batch_is_a_flagged_lower_bound(tmp_path):
    path = serving_trace(tmp_path, "ProfilerStep#3")
    run = cli("analyze", path, "--model", GPT_OSS_20B, "--format", "json")
    assert run.returncode == 0, run.stderr
    doc = strict(run.stdout)
    (step,) = doc["model"]["steps"]
    assert step["lower_bound"] and step["complete_with"] == "--batch --context" and step["requests"] is None
    assert step["batch"].startswith("unknown") and step["predicted_ns"] > 0 and step["weight_bytes"] > 0
    assert "pass --batch B --context C" in run.stderr
    assert any("pass --batch and --context" in s for s in doc["headline"])  # not "pass --model": it was given
    full = strict(cli("analyze", path, "--model", GPT_OSS_20B, "--format", "json", "--batch", "4", "--context", "1000").stdout)
    assert not full["model"]["steps"][0]["lower_bound"] and full["model"]["steps"][0]["kv_tokens"] == 4 * 1001


def test_unknown_device_still_costs_bytes_and_flops_and_the_headline_agrees(tmp_path):
    path = serving_trace(tmp_path, "execute_context_0(0)_generation_4(4)", device="Mystery GPU 9000")
    run = cli("analyze", path, "--model", GPT_OSS_20B, "--format", "json", "--context", "1000")
    assert run.returncode == 0, run.stderr
    doc = strict(run.stdout)
    (step,) = doc["model"]["steps"]
    assert step["bytes"] > 0 and step["flops"] > 0 and step["predicted_ns"] is None  # no device, no time
    assert not any("too little" in s for s in doc["headline"])
    assert any("not in the device table" in s and "pass --device" in s for s in doc["headline"])
    table = cli("analyze", path, "--model", GPT_OSS_20B, "--context", "1000")
    assert table.returncode == 0 and "too little" not in table.stdout
