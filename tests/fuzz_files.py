"""Seeded mutations of the files a user hands tracekit besides traces (issue 22): device
files, rules, expectations (TOML), stored summaries (JSON) and model configs (HF
config.json for --model), run through the commands that read them (devices, analyze,
export, check, diff, multi-rank analyze, calibrate, project). Used by
benchmarks/fuzz_inputs.py --kinds files. A case passes when it exits 0, 2 (check: 3),
with one error line on 2, strict JSON where asked, no traceback."""

from __future__ import annotations

import copy
import gzip
import json
import os
import random
import re
import shutil
import sys
from typing import Any

from helpers import run_cli

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(REPO, "fixtures", "cpu_tiny_dense_generate.json.gz")
SUMMARY = os.path.join(REPO, "tests", "golden", "torch__h100_bert_small_hf_inference.json.gz.summary.json")
RANKS = os.path.join(os.path.dirname(REPO), "shared", "fixtures", "torch", "v100_dlrm_8ranks")

DEVICE = {"MYGPU": {"name": "My GPU", "matrix_tflops": {"bf16": 100.0}, "vector_tflops": {"fp32": 10.0}, "memory_gbps": 1000,
                    "match": ["My GPU"], "sm_count": 100}}
RULES = {"phase": [{"name": "decode", "range": "decode"}], "block": [{"name": "attention", "kernel": "attn"}]}
EXPECT = {"expect": [{"min_coverage": 0.0}, {"block": "attention", "max_share": 1.0, "name": "attn"}]}


def hostile(rng: random.Random) -> Any:
    return rng.choice([
        0, -1, -1e308, 1e308, float("inf"), float("nan"), 10 ** 400, 2 ** 63, True, "", "x" * rng.randint(1, 5000), "1.5",
        "(a+)+$", "(?<!x)y", "[", "\x1b[31m", [], [1, [2, [3]]], {}, {"a": {"b": {}}}, None, 3.5, "é\u202e",
    ])


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def mutate(rng: random.Random, doc: Any, log: list[str], rounds: int = 3) -> Any:
    doc = copy.deepcopy(doc)
    for _ in range(rng.randint(1, rounds)):
        paths = []

        def walk(node, path):
            paths.append(path)
            if len(path) > 60:  # a nested value put there before: not walked into
                return
            if isinstance(node, dict):
                for k, v in node.items():
                    walk(v, path + [k])
            elif isinstance(node, list):
                for i, v in enumerate(node):
                    walk(v, path + [i])

        walk(doc, [])
        path = rng.choice(paths)
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        action = rng.random()
        if not path:
            if action < 0.3:
                doc = hostile(rng)
                log.append("root=hostile")
            continue
        key = path[-1]
        if action < 0.55:
            parent[key] = hostile(rng)
            log.append(f"{path}=hostile")
        elif action < 0.7 and isinstance(parent, dict):
            del parent[key]
            log.append(f"del {path}")
        elif action < 0.8:
            parent[key] = nested(rng.choice([5, 40, 300]))
            log.append(f"{path}=nested")
        elif action < 0.9 and isinstance(parent, dict):
            parent[rng.choice(["zz", "name ", "memory_gbs", "phases", "expectt"])] = hostile(rng)
            log.append(f"{path}: extra key")
        else:
            parent[key] = [parent[key]]
            log.append(f"{path}=[...]")
    return doc


def toml_text(rng: random.Random, doc: Any) -> bytes:
    """TOML for `doc` where it can be written, else mangled text; sometimes bad bytes.
    A value nested 700 deep costs this writer two frames a level (the value, the join's
    generator): the recursion limit is raised while it writes (seeds 821 and 1192 of
    `--kinds files` ended in the harness's own RecursionError), and put back before
    tracekit reads the file, so tracekit runs under the limit a user's process has."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * MAX_DEPTH + 200))
    try:
        return _toml_text(rng, doc)
    finally:
        sys.setrecursionlimit(limit)


MAX_DEPTH = 700  # deeper values are written as 1


def _toml_text(rng: random.Random, doc: Any) -> bytes:
    def value(v, depth=0):
        if depth > MAX_DEPTH:
            return "1"
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return {float("inf"): "inf", float("-inf"): "-inf"}.get(v, "nan" if v != v else repr(v))
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x, depth + 1) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{json.dumps(str(k))} = {value(x, depth + 1)}" for k, x in v.items()) + "}"
        return '""'

    if not isinstance(doc, dict):
        text = f"x = {value(doc)}\n"
    else:
        lines = []
        for k, v in doc.items():
            if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
                for item in v:
                    lines.append(f"[[{k}]]")
                    lines += [f"{json.dumps(str(kk))} = {value(vv)}" for kk, vv in item.items()]
            elif isinstance(v, dict):
                lines.append(f"[{json.dumps(str(k))}]")
                lines += [f"{json.dumps(str(kk))} = {value(vv)}" for kk, vv in v.items()]
            else:
                lines.append(f"{json.dumps(str(k))} = {value(v)}")
        text = "\n".join(lines) + "\n"
    data = text.encode("utf-8", "surrogatepass")
    if rng.random() < 0.1:
        at = rng.randrange(len(data) + 1)
        data = data[:at] + rng.choice([b"\xff", b"\xc3", b"\x00", b"[[", b"}"]) + data[at:]
    return data


def json_text(rng: random.Random, doc: Any) -> bytes:
    text = json.dumps(doc, allow_nan=True) if rng.random() < 0.9 else json.dumps(doc)[: rng.randrange(1, 200)]
    data = text.encode()
    if rng.random() < 0.05:
        data = data.replace(b'"', b'"\xff', 1)
    return data


KINDS = ("device", "rules", "expect", "summary_diff", "summary_check", "export_rules", "multirank", "model")

# --- model configs (HF config.json for --model) ------------------------------------------------

MODELS = os.path.join(os.path.dirname(REPO), "shared", "models")
TINY_MOE = os.path.join(REPO, "fixtures", "cpu_tiny_moe_generate.json.gz")
# Keys the model reader takes sizes from (tracekit/model/config.py), for the size mutations.
SIZE_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size",
             "vocab_size", "num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok", "experts_per_token",
             "moe_intermediate_size", "shared_expert_intermediate_size", "n_shared_experts", "first_k_dense_replace",
             "moe_layer_freq", "sliding_window", "sliding_window_pattern", "max_position_embeddings", "q_lora_rank", "kv_lora_rank",
             "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "full_attention_interval", "linear_num_key_heads",
             "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim", "decoder_sparse_step")
# Edge values a config may hold and pass validation with (the reader's bounds: 4096 layers,
# 2**24 widths, 2**40 tokens), then values it must refuse.
PLAUSIBLE = (1, 2, 3, 5, 7, 17, 100, 4095, 4096, 65535, 65536, 2 ** 24 - 1, 2 ** 24, 2 ** 40)
SIZES = (0, -1, -4096, 1, 3, 10 ** 7, 10 ** 12, 2 ** 31, 2 ** 63, 2 ** 64 + 1, 10 ** 400, 0.5, 3.5, 64.0, -0.0, 1e308, float("inf"),
         float("-inf"), float("nan"), "64", "abc", "", True, False, None, [64], {"value": 64}, [])
QUANTS = (
    {"quant_method": "mxfp4"}, {"quant_method": "fp8"}, {"quant_method": "fp8", "weight_block_size": [128, 128]},
    {"quant_method": "fp8", "weight_block_size": [0, 128]}, {"quant_method": "fp8", "weight_block_size": [10 ** 30, 1]},
    {"quant_method": "fp8", "weight_block_size": ["a", None]}, {"quant_method": "fp8", "weight_block_size": 128},
    {"quant_method": "fp8", "weight_block_size": []}, {"quant_method": "fp8", "weight_block_size": [1.5, 2.5]},
    {"quant_method": "gptq", "bits": 4, "group_size": 128}, {"quant_method": "gptq", "bits": 0}, {"quant_method": "gptq", "bits": -4},
    {"quant_method": "gptq", "bits": 99}, {"quant_method": "gptq", "bits": 3.5}, {"quant_method": "gptq", "bits": "4"},
    {"quant_method": "gptq", "bits": 4, "group_size": 0}, {"quant_method": "gptq", "bits": 4, "group_size": -1},
    {"quant_method": "gptq", "bits": 4, "group_size": 10 ** 20}, {"bits": 8}, {"quant_method": "awq", "w_bit": 4, "q_group_size": 64},
    {"quant_method": "awq", "bits": 4, "zero_point": "yes"}, {"quant_method": "bitsandbytes", "load_in_4bit": True},
    {"quant_method": "compressed-tensors", "config_groups": []}, {"quant_method": "compressed-tensors", "config_groups": {}},
    {"quant_method": "compressed-tensors"}, {"quant_method": "compressed-tensors", "config_groups": "group_0"},
    {"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 0, "type": "int"}}}},
    {"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "float",
                                                                                                       "group_size": 16}}}},
    {"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": "Linear", "weights": [4]}}},
    {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 10 ** 9, "group_size": -7}}}},
    {"quant_method": "compressed-tensors", "config_groups": {f"g{i}": {"targets": ["Linear"], "weights": {"num_bits": 8}} for i in range(1500)}},
    {"quant_method": "modelopt", "quant_algo": "NVFP4"}, {"quant_method": "unknown-method"}, {"quant_method": 7},
    {"quant_method": ["fp8"]}, {}, [], "fp8", None,
)
LAYER_TYPES = ("full_attention", "sliding_attention", "linear_attention", "attention", "mamba", "", 7, None, ["full_attention"])


def model_bases() -> list[str]:
    """The configs mutated: the project's own, the tests' tiny ones, the shared real ones."""
    paths = [os.path.join(REPO, "fixtures", n) for n in ("cpu_tiny_dense.config.json", "cpu_tiny_moe.config.json")]
    data = os.path.join(REPO, "tests", "data", "models")
    paths += sorted(os.path.join(data, n) for n in os.listdir(data) if n.startswith("tiny_")) if os.path.isdir(data) else []
    paths += sorted(os.path.join(MODELS, n) for n in os.listdir(MODELS) if n.endswith(".json")) if os.path.isdir(MODELS) else []
    return paths


def mutate_model(rng: random.Random, doc: Any, log: list[str]) -> Any:
    """Model-config mutations (sizes, quantisation, text_config, layer_types, depth), and now
    and then the generic ones."""
    doc = copy.deepcopy(doc)
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3, 4])):
        if not isinstance(doc, dict):
            break
        text = doc.get("text_config") if isinstance(doc.get("text_config"), dict) else None
        target = text if text is not None and rng.random() < 0.6 else doc
        action = rng.random()
        if action < 0.2:
            key = rng.choice([k for k in SIZE_KEYS if k in target] or list(SIZE_KEYS))
            target[key] = rng.choice(PLAUSIBLE)
            log.append(f"{key}={target[key]!r}")
        elif action < 0.35:
            key = rng.choice([k for k in SIZE_KEYS if k in target] or list(SIZE_KEYS))
            target[key] = rng.choice(SIZES)
            log.append(f"{key}={target[key]!r}"[:80])
        elif action < 0.5:
            target["quantization_config"] = copy.deepcopy(rng.choice(QUANTS))
            log.append(f"quantization_config={json.dumps(target['quantization_config'])[:60]}")
        elif action < 0.6:
            n = target.get("num_hidden_layers") if isinstance(target.get("num_hidden_layers"), int) else 4
            length = rng.choice([0, 1, max(n - 1, 0), n + 1, 3 * max(n, 1), min(abs(n), 100)])
            target["layer_types"] = rng.choice([[rng.choice(LAYER_TYPES) for _ in range(length)], "full_attention", {}, None, 5])
            log.append(f"layer_types: {length} entries or {type(target['layer_types']).__name__}")
        elif action < 0.7:
            choice = rng.random()
            if choice < 0.4:  # everything moved under text_config (a multimodal checkpoint)
                doc = {"model_type": rng.choice(["qwen3_5", "llava", "gemma3", "mystery"]), "text_config": doc,
                       "vision_config": rng.choice([{}, {"hidden_size": 10 ** 30}, []])}
                log.append("wrapped in text_config")
            elif choice < 0.7:
                target["text_config"] = rng.choice([[], "x", 5, None, {"text_config": {"text_config": {}}}, nested(50), nested(2000)])
                log.append("text_config=odd")
                if isinstance(target["text_config"], dict) and "a" in target["text_config"]:
                    break
            else:
                inner: Any = copy.deepcopy(target)
                levels = rng.choice([3, 60, 1200])
                for _ in range(levels):
                    inner = {"text_config": inner}
                doc = inner
                log.append(f"text_config nested {levels}")
                if levels > 100:
                    break  # no copy or walk of it after this: the harness would recurse as deep
        elif action < 0.78:
            key = rng.choice(list(target) or ["hidden_size"])
            levels = rng.choice([10, 1000, 5000])
            target[key] = nested(levels)
            log.append(f"{key}=nested {levels}")
            if levels > 100:
                break
        elif action < 0.8:
            if rng.random() < 0.3:
                doc = rng.choice([[doc], 5, "config", None, []])
                log.append("top level not a table")
            else:
                target[rng.choice(["model_type", "torch_dtype", "hybrid_override_pattern", "hidden_act"])] = rng.choice(
                    ["deepseek_v3", "qwen3_next", "qwen3_5", "nemotron_h", "mamba2", "jamba", "gemma3_text", "gpt_oss", "mixtral",
                     "float8_e4m3fn", "torch.float32", "int4", "M*M-M*", "*" * 100, "", "\x1b[31m", "é"])
                log.append("a name changed")
        elif action < 0.84:
            for key in rng.sample(list(target), min(len(target), rng.randint(1, 2))):
                target.pop(key, None)
                log.append(f"del {key}")
        elif action < 0.9:
            for key in rng.sample(list(target), min(len(target), rng.randint(1, 4))):
                del target[key]
                log.append(f"del {key}")
        else:
            doc = mutate(rng, doc, log, rounds=2)
    return doc


def model_case(rng: random.Random, path: str, out_dir: str, log: list[str]) -> list[list[str]]:
    """A mutated config (as a file, or as config.json in a directory) through the commands that read --model."""
    bases = model_bases()
    base = rng.choice(bases)
    log.append(os.path.basename(base))
    with open(base) as f:
        doc = json.load(f)
    doc = mutate_model(rng, doc, log)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20000))  # the writer recurses through deep nesting (the reader must not)
    try:
        text = json.dumps(doc, allow_nan=True)
    except (RecursionError, ValueError):
        text = "{" + '"a": {' * 5000 + "}" * 5001
    finally:
        sys.setrecursionlimit(limit)
    data = text.encode("utf-8", "surrogatepass")
    if rng.random() < 0.05:
        data = data[: rng.randrange(1, max(2, len(data)))]
        log.append("truncated")
    elif rng.random() < 0.05:
        at = rng.randrange(len(data) + 1)
        data = data[:at] + b"\xff\xfe" + data[at:]
        log.append("bad bytes")
    config = path + ".config.json"
    if rng.random() < 0.15:  # --model DIR (with config.json inside)
        os.makedirs(path, exist_ok=True)
        config = os.path.join(path, "config.json")
    with open(config, "wb") as f:
        f.write(data)
    model = os.path.dirname(config) if config.endswith(os.sep + "config.json") else config
    trace = TINY_MOE if "moe" in base or rng.random() < 0.3 else TINY
    extra = rng.choice([[], [], ["--batch", "4"], ["--context", "1000"], ["--device", "h100"], ["--tp", "2"],
                        ["--weight-dtype", rng.choice(["fp8", "mxfp4", "int4"])], ["--kv-dtype", "fp8"], ["--batch", "3", "--context", "0"]])
    argv = [["analyze", trace, "--model", model, "--format", "json", *extra]]
    roll = rng.random()
    if roll < 0.25:
        argv.append(["calibrate", trace, "--model", model, "--device", "h100"])
    elif roll < 0.4:
        argv.append(["project", trace, "--device", "h100", "--tp", rng.choice(["1", "2", "8"]), "--model", model, "--format", "json"])
    elif roll < 0.55:
        argv.append(["analyze", trace, "--model", model])  # the tables, not JSON
    return argv


def make_case(seed: int, out_dir: str, kinds: tuple[str, ...] = KINDS) -> dict:
    rng = random.Random(seed)
    kind = kinds[seed % len(kinds)]
    log: list[str] = []
    path = os.path.join(out_dir, f"case{seed}")
    if kind == "device":
        with open(path + ".toml", "wb") as f:
            f.write(toml_text(rng, mutate(rng, DEVICE, log)))
        argv = [["devices", "--device-file", path + ".toml"],
                ["analyze", TINY, "--device-file", path + ".toml", "--device", rng.choice(["My GPU", "a" * 100 + "!", "H100"]), "--format", "json"]]
    elif kind in ("rules", "export_rules"):
        with open(path + ".toml", "wb") as f:
            f.write(toml_text(rng, mutate(rng, RULES, log)))
        argv = [["analyze", TINY, "--rules", path + ".toml", "--format", "json"]] if kind == "rules" else \
               [["export", TINY, "--rules", path + ".toml", "--perfetto", os.path.join(out_dir, f"p{seed}.json")]]
    elif kind == "expect":
        with open(path + ".toml", "wb") as f:
            f.write(toml_text(rng, mutate(rng, EXPECT, log)))
        argv = [["check", SUMMARY, "--expect", path + ".toml", "--format", "json"]]
    elif kind in ("summary_diff", "summary_check"):
        with open(SUMMARY) as f:
            summary = json.load(f)
        with open(path + ".json", "wb") as f:
            f.write(json_text(rng, mutate(rng, summary, log, rounds=5)))
        expect = os.path.join(out_dir, "expect.toml")
        with open(expect, "w") as f:
            f.write('[[expect]]\nmin_coverage = 0.0\n[[expect]]\nblock = "attention"\nmax_share = 1.0\n')
        argv = ([["diff", SUMMARY, path + ".json", "--format", "json"], ["diff", path + ".json", SUMMARY, "--format", "markdown"]]
                if kind == "summary_diff" else
                [["check", path + ".json", "--expect", expect, "--format", "json"],
                 ["check", SUMMARY, "--expect", expect, "--baseline", path + ".json", "--format", "json"]])
    elif kind == "model":
        argv = model_case(rng, path, out_dir, log)
    else:  # multirank: two ranks of one job, one of them altered (world size, rank, or an nsys export)
        ranks = os.path.join(out_dir, f"ranks{seed}")
        os.makedirs(ranks)
        if not os.path.isdir(RANKS):
            argv = []
        else:
            for r in (0, 1):
                shutil.copy(os.path.join(RANKS, f"rank{r}.json.gz"), os.path.join(ranks, f"rank{r}.json.gz"))
            doc = json.loads(gzip.decompress(open(os.path.join(RANKS, "rank2.json.gz"), "rb").read()))
            info = doc.setdefault("distributedInfo", {})
            info["world_size"] = rng.choice([8, 4, 1, 0, -1, "8", None])
            info["rank"] = rng.choice([2, 0, 1, 7, 9, -1, "2"])
            log.append(f"distributedInfo={info}")
            with open(os.path.join(ranks, "rank2.json"), "w") as f:
                json.dump(doc, f)
            argv = [["analyze", ranks, "--format", "json", "--workers", "1"]]
    return {"seed": seed, "kind": kind, "mutations": log, "argv": argv}


def problems(argv: list[str], code: int, out: str, err: str) -> list[str]:
    found = []
    allowed = {0, 2, 3} if argv[0] == "check" else {0, 2}
    if code not in allowed:
        found.append(f"exit {code}")
    if "Traceback" in err or "internal error" in err:
        found.append("traceback")
    if re.search(r"^\S.*:\d+: \w*Warning: ", err, re.M):  # Python's raw warning (numpy's divide by zero), not a tracekit line
        found.append("python warning")
    errors = [line for line in err.splitlines() if line.startswith("tracekit: error")]
    if code == 2 and len(errors) != 1:
        found.append("exit 2 without one error line")
    if code in (0, 3) and "--format" in argv and argv[argv.index("--format") + 1] == "json":
        try:
            json.loads(out, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        except ValueError:
            found.append("invalid JSON")
    return found


def run_case(seed: int, out_dir: str, kinds: tuple[str, ...] = KINDS) -> dict:
    case = make_case(seed, out_dir, kinds)
    results = []
    for argv in case["argv"]:
        code, out, err = run_cli(*argv, python_warnings="always")  # every warning, every time: a run's own warnings are its problem
        results.append({"argv": argv[:2], "exit": code, "problems": problems(argv, code, out, err),
                        "error": err.strip().splitlines()[-1][:300] if err.strip() else ""})
    return {**case, "results": results}
