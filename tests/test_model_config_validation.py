"""Issue 22: hostile or odd `--model` config.json files are one line and exit 2 naming the
file, the key and the reason (tracekit.model.validate), never a crash, a hang or a negative
size used in a sum. Each reproduction of the issue has a case here."""

from __future__ import annotations

import json
import time

import pytest

from conftest import REPO, shared
from helpers import run_cli
from tracekit.errors import TraceError
from tracekit.model import load_config

BASE = {"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 256, "vocab_size": 1000, "sliding_window": 64}
CT = {"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int"}}}}


def write(tmp_path, text: str):
    path = tmp_path / "config.json"
    path.write_text(text)
    return path


def fields(**changes) -> str:
    return json.dumps({**BASE, **changes})


CASES = [
    # (name, config text, expected words in the reason)
    ("huge num_hidden_layers", fields(num_hidden_layers=10**15), "`num_hidden_layers` must be between 1 and 4,096"),
    ("num_hidden_layers 1e7 (a float)", fields(num_hidden_layers=1e7), "`num_hidden_layers` must be between 1 and 4,096"),
    ("1,000 levels of nesting", '{"a": ' * 1000 + "1" + "}" * 1000, "nests 1000 levels deep (at most 32)"),
    ("infinite intermediate_size", fields().replace('"intermediate_size": 256', '"intermediate_size": Infinity'), "`intermediate_size` must be finite"),
    ("1e999 intermediate_size", fields().replace('"intermediate_size": 256', '"intermediate_size": 1e999'), "`intermediate_size` must be finite"),
    ("infinite num_local_experts", fields().replace('"vocab_size"', '"num_local_experts": Infinity, "vocab_size"'), "`num_local_experts` must be finite"),
    ("infinite sliding_window", fields().replace('"sliding_window": 64', '"sliding_window": -Infinity'), "`sliding_window` must be finite"),
    ("5,000-digit integer", fields().replace('"vocab_size": 1000', '"vocab_size": ' + "9" * 5000), "an integer of 5,000 digits"),
    ("config_groups a list", fields(quantization_config={**CT, "config_groups": [{"weights": {"num_bits": 4}}]}),
     "`quantization_config.config_groups` must be an object, not a list"),
    ("FP8 weight_block_size 0", fields(quantization_config={"quant_method": "fp8", "weight_block_size": [0, 128]}),
     "`quantization_config.weight_block_size` must be two whole numbers from 1"),
    ("huge FP8 block", fields(quantization_config={"quant_method": "fp8", "weight_block_size": [10**18, 128]}),
     "`quantization_config.weight_block_size[0]` must be a whole number"),
    ("FP8 block above any matrix", fields(quantization_config={"quant_method": "fp8", "weight_block_size": [2**30, 128]}),
     "`quantization_config.weight_block_size` must be two whole numbers from 1 to 16,777,216"),
    ("huge GPTQ bits", fields(quantization_config={"quant_method": "gptq", "bits": 10**18, "group_size": 128}),
     "`quantization_config.bits` must be between 1 and 16"),
    ("negative GPTQ bits", fields(quantization_config={"quant_method": "gptq", "bits": -4, "group_size": 128}),
     "`quantization_config.bits` must be between 1 and 16, not -4"),
    ("negative intermediate_size", fields(intermediate_size=-256), "`intermediate_size` must be between 0 and"),
    ("negative sliding_window", fields(sliding_window=-64), "`sliding_window` must be between 1 and"),
    ("string hidden_size", fields(hidden_size="4096"), "`hidden_size` must be a whole number, not the string \"4096\""),
    ("fractional heads", fields(num_attention_heads=4.5), "`num_attention_heads` must be a whole number, not 4.5"),
    ("boolean layers", fields(num_hidden_layers=True), "`num_hidden_layers` must be a whole number, not true"),
    ("text_config a list", fields(text_config=[1, 2]), "`text_config` must be an object, not a list"),
    ("nested bad field", json.dumps({"text_config": {**BASE, "head_dim": 0}}), "`text_config.head_dim` must be between 1 and"),
    ("layer_types of another length", fields(layer_types=["full_attention"] * 3), "`layer_types` names 3 layers, not 2"),
    ("bad hybrid pattern", fields(hybrid_override_pattern="MX"), "`hybrid_override_pattern` must have one of M * - E per layer"),
    ("MoE layers without experts (found by fuzzing)", fields(num_hidden_layers=2, hybrid_override_pattern="ME"),
     "`hybrid_override_pattern` names MoE layers (E) but the config has no `n_routed_experts`"),
    ("ignore list of numbers", fields(quantization_config={**CT, "ignore": [1, 2]}), "`quantization_config.ignore[0]` must be a string"),
    ("bad RE2 in ignore", fields(quantization_config={**CT, "ignore": ["re:(a"]}), "`quantization_config.ignore[0]` is not a regular expression RE2 accepts"),
    ("compressed-tensors type", fields(quantization_config={**CT, "config_groups": {"g": {"weights": {"num_bits": 4, "type": "posit"}}}}),
     "`quantization_config.config_groups.g.weights.type` must be \"int\" or \"float\""),
    ("top level a list", "[1, 2, 3]", "model config is not a JSON object"),
    ("not UTF-8", None, "not valid JSON (not UTF-8"),
]


@pytest.mark.parametrize("name, text, reason", CASES, ids=[c[0] for c in CASES])
def test_hostile_config_is_one_clear_error(tmp_path, name, text, reason):
    path = tmp_path / "config.json"
    if text is None:
        path.write_bytes(b'{"hidden_size": "\xff\xfe"}')
    else:
        path.write_text(text)
    started = time.perf_counter()
    with pytest.raises(TraceError) as err:
        load_config(path)
    assert time.perf_counter() - started < 5  # no loop as long as a hostile number
    assert err.value.path == str(path) and reason in err.value.reason, err.value.reason


@pytest.mark.parametrize("name, text, reason", [CASES[0], CASES[2], CASES[8], CASES[9]], ids=[CASES[i][0] for i in (0, 2, 8, 9)])
def test_hostile_config_exits_2_with_one_line(tmp_path, name, text, reason):
    path = write(tmp_path, text)
    trace = shared("torch", "mi300x_sglang_qwen3-8b_decode_bs32.json.gz")
    run = run_cli("analyze", trace, "--model", path)
    assert run.returncode == 2, run.stderr[-2000:]
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tracekit: error: {path}: ") and reason in lines[0]


def test_the_shared_configs_pass_validation():
    for name in ("qwen3-8b", "qwen1.5-0.5b-chat", "gpt-oss-20b", "gpt-oss-120b", "qwen3.5-27b"):
        assert load_config(REPO.parent / "shared" / "models" / f"{name}.config.json").layers > 0
