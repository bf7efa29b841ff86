"""Every command x every fixture x the option sets users combine (issue 22).

    python benchmarks/matrix.py [--sample N] [--seed 0] [--in-process]

Commands: info, analyze, export, diff, check, calibrate, project (--to a device; --tp, with
and without --model), and devices (no trace). Fixtures: the shared traces
(../shared/fixtures: torch/, nsys/, and the multi-rank directory torch/v100_dlrm_8ranks) and
the project's own (fixtures/). Option sets: --device, --device-file, --rules, --out,
formats, --model where it applies (MODEL: the real config of the model a serving fixture
ran, from ../shared/models, else the project's tiny config), --capture (graph-capture
pairing against the piecewise capture fixture), check's --junit and
--baseline, diff against a stored summary. Each case must exit 0 or 2 (check: 3 too),
never 1; print strict JSON when asked for JSON; and show no traceback. The whole product by
default; tests/test_matrix.py runs a seeded sample of it in CI. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(REPO), "shared", "fixtures")
CONFIG = os.path.join(REPO, "fixtures", "cpu_tiny_dense.config.json")
SUMMARY = os.path.join(REPO, "tests", "golden", "torch__h100_bert_small_hf_inference.json.gz.summary.json")
CAPTURE = os.path.join(SHARED, "torch", "mi300x_vllm_gpt-oss-20b_prefilldecode_piecewise_capture.json.gz")
MODELS = os.path.join(os.path.dirname(REPO), "shared", "models")
RANKS = os.path.join(SHARED, "torch", "v100_dlrm_8ranks")
# The serving fixtures and the model each one ran (../shared/models/README.md).
SERVING_MODELS = {
    "mi300x_sglang_qwen3-8b_decode_bs32.json.gz": "qwen3-8b.config.json",
    "b200_vllm_tp8_rank0_eager.json.gz": "gpt-oss-120b.config.json",
    "rtx3090_vllm_gpt-oss-20b_decode_bs4_cudagraph.json.gz": "gpt-oss-20b.config.json",
    "mi300x_vllm_gpt-oss-20b_prefilldecode_piecewise_execution.json.gz": "gpt-oss-20b.config.json",
    "mi300x_vllm_gpt-oss-20b_prefilldecode_piecewise_capture.json.gz": "gpt-oss-20b.config.json",
    "h100_qwen1.5-0.5b_hf_inference.json.gz": "qwen1.5-0.5b-chat.config.json",
}

RULES = """[[phase]]
name = "decode"
range = "decode|generate"
[[block]]
name = "attention"
kernel = "(?i)attn|attention|fmha"
"""
DEVICE = """[MYGPU]
name = "My GPU"
matrix_tflops = { bf16 = 100.0, fp16 = 100.0 }
vector_tflops = { fp32 = 10.0 }
memory_gbps = 1000
"""
EXPECT = """[[expect]]
min_coverage = 0.0
[[expect]]
block = "attention"
max_share = 1.0
"""


def fixtures() -> list[str]:
    found = sorted(glob.glob(os.path.join(SHARED, "torch", "*.json.gz"))) + sorted(glob.glob(os.path.join(SHARED, "nsys", "*.sqlite")))
    found += [RANKS] if os.path.isdir(RANKS) else []  # the ranks of one job, as a directory
    return found + sorted(glob.glob(os.path.join(REPO, "fixtures", "*.json.gz")))


def model_for(trace: str) -> str:
    """MODEL: the real config of a serving fixture's model where ../shared/models has it, else the tiny one."""
    name = SERVING_MODELS.get(os.path.basename(trace))
    path = os.path.join(MODELS, name) if name else ""
    return path if name and os.path.isfile(path) else CONFIG


def option_sets(files: dict[str, str]) -> dict[str, list[list[str]]]:
    """Per command, the option lists (OUT is replaced by a fresh output path per case;
    OTHER by another fixture)."""
    return {
        "info": [[], ["--format", "json"], ["--format", "json", "--workers", "1"]],
        "analyze": [["--format", "json"], ["--format", "markdown"], ["--device", "H100", "--format", "json"],
                    ["--device-file", files["device"], "--format", "json"], ["--rules", files["rules"], "--format", "json"],
                    ["--out", "OUT", "--format", "json"], ["--out", "OUT", "--device", "A100", "--rules", files["rules"]],
                    ["--model", CONFIG, "--format", "json"], ["--model", CONFIG, "--device", "H100", "--batch", "4", "--context", "128", "--format", "json"],
                    ["--format", "table", "--top", "3"], ["--capture", CAPTURE, "--format", "json"]],
        "export": [["--perfetto", "OUT"], ["--perfetto", "OUT", "--device", "H100", "--rules", files["rules"]]],
        "diff": [["OTHER", "--format", "json"], ["OTHER", "--format", "markdown", "--rules", files["rules"]],
                 [SUMMARY, "--format", "json", "--out", "OUT"]],
        "check": [["--expect", files["expect"], "--format", "json"], ["--expect", files["expect"], "--junit", "OUT"],
                  ["--expect", files["expect"], "--baseline", SUMMARY, "--device", "H100", "--format", "json"]],
        "calibrate": [["--model", CONFIG], ["--model", CONFIG, "--device", "H100", "--out", "OUT"]],
    }


def all_option_sets(files: dict[str, str]) -> dict[str, list[list[str]]]:
    """option_sets and the second pass's (issue 22): the real model configs of the serving
    fixtures (MODEL: model_for(the trace)), and `project`."""
    sets = {command: list(lists) for command, lists in option_sets(files).items()}
    sets["analyze"] = sets["analyze"] + [["--model", "MODEL", "--format", "json"],
                                         ["--model", "MODEL", "--context", "1000", "--device", "H100", "--format", "json"],
                                         ["--model", "MODEL", "--batch", "4", "--out", "OUT"]]
    sets["calibrate"] = sets["calibrate"] + [["--model", "MODEL", "--context", "1000"]]
    sets["project"] = [["--to", "H100", "--format", "json"], ["--to", "B200", "--device", "H100"], ["--to", "MI300X", "--format", "markdown"],
                       ["--to", "My GPU", "--device-file", files["device"], "--format", "json"], ["--tp", "2", "--format", "json"],
                       ["--tp", "8", "--model", "MODEL", "--format", "json"], ["--tp", "1", "--run-tp", "2", "--model", "MODEL"]]
    return sets


def other_cases(files: dict[str, str]) -> list[tuple[str, str | None, list[str]]]:
    """Commands that take no trace: `devices`, alone and with a device file."""
    return [("devices", None, options) for options in ([], ["--device-file", files["device"]])]


def cases(files: dict[str, str]) -> list[tuple[str, str, list[str]]]:
    traces = fixtures()
    out = []
    for command, sets in all_option_sets(files).items():
        for i, trace in enumerate(traces):
            other = traces[(i + 1) % len(traces)]
            for options in sets:
                out.append((command, trace, [other if o == "OTHER" else model_for(trace) if o == "MODEL" else o for o in options]))
    return out


def argv_of(case, out_dir: str) -> list[str]:
    command, trace, options = case
    options = [os.path.join(out_dir, "out") if o == "OUT" else o for o in options]
    return [command, *([trace] if trace is not None else []), *options]


def judge(case, code: int, stdout: str, stderr: str) -> str | None:
    """None when the case behaved; else what went wrong."""
    allowed = {0, 2, 3} if case[0] == "check" else {0, 2}
    if code not in allowed:
        return f"exit {code}: {stderr.strip().splitlines()[-1] if stderr.strip() else ''}"
    if "Traceback" in stderr or "internal error" in stderr:
        return "traceback"
    options = case[2]
    as_json = "--format" in options and options[options.index("--format") + 1] == "json"
    if code in (0, 3) and as_json:
        try:
            json.loads(stdout, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        except ValueError as exc:
            return f"not strict JSON: {exc}"
    if code == 2 and len(stderr.strip().splitlines()) != 1 + stderr.count("tracekit: warning"):
        return "exit 2 with more than one error line"
    return None


def run_in_process(argv: list[str]) -> tuple[int, str, str]:
    from tracekit.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main(argv)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def run_subprocess(argv: list[str]) -> tuple[int, str, str]:
    env = {**os.environ, "PYTHONPATH": REPO, "COLUMNS": "120"}
    proc = subprocess.run([sys.executable, "-m", "tracekit", *argv], capture_output=True, text=True, env=env, timeout=600)
    return proc.returncode, proc.stdout, proc.stderr


def input_files(directory: str) -> dict[str, str]:
    files = {}
    for name, text in (("rules", RULES), ("device", DEVICE), ("expect", EXPECT)):
        files[name] = os.path.join(directory, f"{name}.toml")
        with open(files[name], "w") as f:
            f.write(text)
    return files


def run_matrix(sample: int | None, seed: int, in_process: bool, log=None) -> dict:
    with tempfile.TemporaryDirectory(prefix="tk-matrix-") as tmp:
        files = input_files(tmp)
        everything = cases(files) + other_cases(files)
        chosen = random.Random(seed).sample(everything, min(sample, len(everything))) if sample else everything
        failures, started = [], time.monotonic()
        for n, case in enumerate(chosen):
            out_dir = tempfile.mkdtemp(dir=tmp)
            argv = argv_of(case, out_dir)
            code, stdout, stderr = (run_in_process if in_process else run_subprocess)(argv)
            problem = judge(case, code, stdout, stderr)
            if problem:
                failures.append({"argv": argv, "problem": problem})
            if log:
                print(json.dumps({"n": n, "argv": argv, "exit": code, "problem": problem}), file=log, flush=True)
        return {"cases": len(chosen), "of": len(everything), "failures": failures,
                "exit_1": sum(f["problem"].startswith("exit 1") for f in failures), "seconds": round(time.monotonic() - started, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sample", type=int, help="run this many cases, drawn with --seed (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--in-process", action="store_true", help="call tracekit's main() here (faster; no fresh process per case)")
    args = parser.parse_args()
    result = run_matrix(args.sample, args.seed, args.in_process, log=sys.stderr)
    print(json.dumps(result, indent=2))
    return 0 if not result["failures"] else 1


if __name__ == "__main__":
    sys.exit(main())
