"""Seeded mutations of the files a user hands tracekit besides traces (issue 22): device
files, rules, expectations (TOML) and stored summaries (JSON), run through the commands
that read them (devices, analyze, export, check, diff, multi-rank analyze). Used by
benchmarks/fuzz_inputs.py --kinds files. A case passes when it exits 0, 2 (check: 3),
with one error line on 2, strict JSON where asked, no traceback."""

from __future__ import annotations

import copy
import gzip
import io
import json
import os
import random
import shutil
from contextlib import redirect_stderr, redirect_stdout
from typing import Any

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
    """TOML for `doc` where it can be written, else mangled text; sometimes bad bytes."""
    def value(v, depth=0):
        if depth > 700:
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


KINDS = ("device", "rules", "expect", "summary_diff", "summary_check", "export_rules", "multirank")


def make_case(seed: int, out_dir: str) -> dict:
    rng = random.Random(seed)
    kind = KINDS[seed % len(KINDS)]
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


def run_in_process(argv: list[str]) -> tuple[int, str, str]:
    from tracekit.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main(argv)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException as exc:  # noqa: BLE001 - anything escaping main() is a bug
            code = 1
            err.write(f"escaped main(): {type(exc).__name__}: {exc}\n")
    return code, out.getvalue(), err.getvalue()


def problems(argv: list[str], code: int, out: str, err: str) -> list[str]:
    found = []
    allowed = {0, 2, 3} if argv[0] == "check" else {0, 2}
    if code not in allowed:
        found.append(f"exit {code}")
    if "Traceback" in err or "internal error" in err:
        found.append("traceback")
    errors = [line for line in err.splitlines() if line.startswith("tracekit: error")]
    if code == 2 and len(errors) != 1:
        found.append("exit 2 without one error line")
    if code in (0, 3) and "--format" in argv and argv[argv.index("--format") + 1] == "json":
        try:
            json.loads(out, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        except ValueError:
            found.append("invalid JSON")
    return found


def run_case(seed: int, out_dir: str) -> dict:
    case = make_case(seed, out_dir)
    results = []
    for argv in case["argv"]:
        code, out, err = run_in_process(argv)
        results.append({"argv": argv[:2], "exit": code, "problems": problems(argv, code, out, err),
                        "error": err.strip().splitlines()[-1][:300] if err.strip() else ""})
    return {**case, "results": results}
