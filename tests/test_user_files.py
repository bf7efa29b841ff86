"""The files a user hands tracekit besides traces (issue 22): --device-file and --rules
TOML, `check --expect` files, stored summary.json given to `diff` / `check`. Each hostile
or odd file: exit 2 with one line naming the file, the key and the reason; never exit 1,
never a traceback."""

from __future__ import annotations

import json
import pathlib
import time

import pytest

from helpers import run_cli

REPO = pathlib.Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden" / "torch__h100_bert_small_hf_inference.json.gz.summary.json"
TINY = REPO / "fixtures" / "cpu_tiny_dense_generate.json.gz"


def assert_error(argv, path, *fragments) -> str:
    code, _, err = run_cli(*argv)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"tracekit: error: {path}: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


DEVICE = """[MYGPU]
name = "My GPU"
matrix_tflops = { bf16 = 100.0 }
vector_tflops = { fp32 = 10.0 }
memory_gbps = 1000
"""


# --- --device-file -------------------------------------------------------------------

@pytest.mark.parametrize("text, fragments", [
    (DEVICE.replace("bf16 = 100.0", 'bf16 = "100"'), ("[MYGPU].matrix_tflops.bf16", "must be a finite number, not a string")),
    ('devices = ["H100"]\n', ("[devices]", "must be a table of device figures, not a list")),
    (DEVICE.replace("memory_gbps = 1000", "memory_gbps = -5"), ("[MYGPU].memory_gbps", "must be at least 1")),
    (DEVICE.replace("memory_gbps = 1000", "memory_gbps = 0"), ("[MYGPU].memory_gbps", "must be at least 1")),
    (DEVICE.replace("memory_gbps = 1000", "memory_gbps = inf"), ("[MYGPU].memory_gbps", "finite")),
    (DEVICE.replace("memory_gbps = 1000", ""), ("[MYGPU].memory_gbps", "missing")),
    (DEVICE + 'match = ["(?<!G)B200"]\n', ("[MYGPU].match[0]", "RE2")),
    (DEVICE + "memory_gbs = 3\n", ("[MYGPU].memory_gbs", "unknown key")),
    (DEVICE + "sm_count = 1.5\n", ("[MYGPU].sm_count", "must be an integer")),
    ("x = " + "{a = " * 2000 + "1" + "}" * 2000 + "\n", ("nested deeper than",)),
    ("", ("no device tables",)),
])
def test_device_file_hostile(tmp_path, text, fragments):
    path = tmp_path / "dev.toml"
    path.write_text(text)
    assert_error(["devices", "--device-file", str(path)], path, *fragments)


def test_device_file_not_utf8(tmp_path):
    path = tmp_path / "dev.toml"
    path.write_bytes(DEVICE.replace("My GPU", "My \xff GPU").encode("latin-1"))
    assert_error(["devices", "--device-file", str(path)], path, "not UTF-8", "byte 19")  # len('[MYGPU]\nname = "My ') == 19


def test_device_file_zero_bandwidth_prints_no_numpy_warning(tmp_path):
    # A zero bandwidth used to reach the roofline and print numpy's "divide by zero".
    path = tmp_path / "dev.toml"
    path.write_text(DEVICE.replace("memory_gbps = 1000", "memory_gbps = 0.0"))
    line = assert_error(["analyze", str(TINY), "--device-file", str(path)], path, "memory_gbps")
    assert "RuntimeWarning" not in line


def test_device_match_runs_on_re2(tmp_path):
    # `(a+)+$` against 'aaaa…!' backtracks exponentially in Python's re; RE2 is linear.
    # The --device name is cut to 120 characters before any pattern runs.
    path = tmp_path / "dev.toml"
    path.write_text(DEVICE + 'match = ["(a+)+$"]\n')
    started = time.monotonic()
    code, _, err = run_cli("analyze", str(TINY), "--device-file", str(path), "--device", "a" * 100 + "!", "--format", "json")
    assert time.monotonic() - started < 30
    assert code == 2 and "unknown device" in err, err


def test_device_file_good_device_is_used(tmp_path):
    path = tmp_path / "dev.toml"
    path.write_text(DEVICE)
    code, out, err = run_cli("devices", "--device-file", str(path))
    assert code == 0, err
    assert "My GPU" in out


def test_builtin_patterns_without_lookaround_still_tell_devices_apart():
    from tracekit.hardware import builtin_devices, find_device

    devices = builtin_devices()
    expected = {"NVIDIA B200": "B200", "NVIDIA GB200": "GB200", "NVIDIA H20": "H20", "NVIDIA H200": "H200",
                "NVIDIA L20": "L20", "NVIDIA B300": "B300", "NVIDIA GB300": "GB300",
                "NVIDIA RTX PRO 6000 Blackwell Workstation Edition": "RTX-PRO-6000-BLACKWELL"}
    for name, key in expected.items():
        device = find_device(name, devices)
        assert device is not None and device.key == key, (name, device and device.key)
    assert find_device("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", devices) is None


# --- --rules ---------------------------------------------------------------------------

@pytest.mark.parametrize("text, fragments", [
    ("x = " + "{a = " * 2000 + "1" + "}" * 2000 + "\n", ("nested deeper than",)),
    ("phase = 5\n", ("phase: must be a list of tables", "not an integer")),
    ('block = "ffn"\n', ("block: must be a list of tables", "not a string")),
    ('[[phase]]\nname = 3\nop = "x"\n', ("rule 1 has no name",)),
    ('[[phase]]\nname = "decode"\nop = 7\n', ("decode", "pattern must be a string")),
    ('replace_defaults = "yes"\n', ("replace_defaults", "true or false")),
    ('phases = []\n', ("phases", "unknown key")),
])
def test_rules_hostile(tmp_path, text, fragments):
    path = tmp_path / "rules.toml"
    path.write_text(text)
    assert_error(["analyze", str(TINY), "--rules", str(path)], path, *fragments)


def test_rules_not_utf8(tmp_path):
    path = tmp_path / "rules.toml"
    path.write_bytes(b'[[phase]]\nname = "d\xffe"\nop = "x"\n')
    # byte 19: len(b'[[phase]]\nname = "d') == 19
    assert_error(["analyze", str(TINY), "--rules", str(path)], path, "not UTF-8", "byte 19")


# --- check --expect --------------------------------------------------------------------

def test_expect_deep_nesting(tmp_path):
    path = tmp_path / "expect.toml"
    path.write_text("[[expect]]\nmin_coverage = 0.5\nx = " + "[" * 3000 + "]" * 3000 + "\n")
    assert_error(["check", str(GOLDEN), "--expect", str(path)], path, "nested deeper than")


def test_expect_not_utf8(tmp_path):
    path = tmp_path / "expect.toml"
    path.write_bytes(b'[[expect]]\nname = "\xfe"\nmin_coverage = 0.5\n')
    # byte 19: len(b'[[expect]]\nname = "') == 19
    assert_error(["check", str(GOLDEN), "--expect", str(path)], path, "not UTF-8", "byte 19")


@pytest.mark.parametrize("text, fragments", [
    ("[[expect]]\nmin_coverage = -0.5\n", ("min_coverage must be at least 0",)),
    ("[[expect]]\nmin_coverage = inf\n", ("min_coverage must be a finite number",)),
    ("[[expect]]\nmax_step_time_ms = " + "9" * 400 + "\n", ("max_step_time_ms must be a finite number",)),
    ("[[expect]]\nmin_coverage = 0.5\nmetric = 3\n", ("metric must be one of",)),
    ("[[expect]]\nmin_coverage = 0.5\nname = [1]\n", ("name must be a string",)),
    ("expect = 3\n", ("no [[expect]] tables",)),
    ("[[expect]]\nmin_coverage = 0.5\n[other]\n", ("other: unknown key",)),
])
def test_expect_hostile(tmp_path, text, fragments):
    path = tmp_path / "expect.toml"
    path.write_text(text)
    assert_error(["check", str(GOLDEN), "--expect", str(path)], path, *fragments)


# --- summary.json for diff and check ----------------------------------------------------

def _summary() -> dict:
    return json.loads(GOLDEN.read_text())


def _mutations():
    """The seven malformed summaries of the issue, and counts out of range: (name, JSON text, fragments of the error)."""
    s = _summary()
    yield "list where a table belongs", json.dumps({**s, "coverage": [1, 2]}), ("coverage", "not a table")
    deep = json.dumps(s)[:-1] + ', "extra": ' + "[" * 5000 + "]" * 5000 + "}"
    yield "deep nesting", deep, ("nested deeper than",)
    text = json.dumps({**s, "steps": [{**s["steps"][0], "duration_ns": 1}]}).replace('"duration_ns": 1', '"duration_ns": Infinity')
    yield "infinite count", text, ("Infinity is not JSON",)
    text = json.dumps({**s, "devices": [{**s["devices"][0], "busy_ns": 1}]}).replace('"busy_ns": 1', '"busy_ns": 1' + "0" * 400)
    yield "integer beyond float range", text, ("devices[0].busy_ns", "beyond a float's range")
    yield "dict where a number belongs", json.dumps({**s, "top_kernels": [{**s["top_kernels"][0], "count": {"a": 1}}]}), \
        ("top_kernels[0].count", "must be a count (a whole number from 0 to 2**53) or null, not a table")
    # counts a trace cannot hold: 10**30 calls reached numpy's multinomial in compare/noise.py (OverflowError, exit 1)
    for name, value in (("huge count", 10 ** 30), ("count above 2**53", 2 ** 53 + 1), ("negative count", -3), ("fractional count", 2.5)):
        yield name, json.dumps({**s, "top_kernels": [{**s["top_kernels"][0], "count": value}]}), ("top_kernels[0].count", "must be a count")
    yield "huge calls", json.dumps({**s, "top_ops": [{**s["top_ops"][0], "calls": 10 ** 30}]}), ("top_ops[0].calls", "must be a count")
    # fuzz seed 75 (--kinds files): an op's shapes as a table reached diff's matching as a dict key (TypeError, exit 1)
    yield "shapes as a table", json.dumps({**s, "top_ops": [{**s["top_ops"][0], "shapes": {"a": 1}}]}), \
        ("top_ops[0].shapes", "must be the op's input shapes (a string or a list) or null, not a table")
    yield "trace as a list", json.dumps({**s, "trace": ["x"]}), ("trace: must be a table, not a list",)
    yield "warnings as a number", json.dumps({**s, "warnings": 5}), ("warnings: must be a list of strings",)


MUTATIONS = list(_mutations())


@pytest.mark.parametrize("name, text, fragments", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_malformed_summary_to_diff(tmp_path, name, text, fragments):
    bad = tmp_path / "bad.summary.json"
    bad.write_text(text)
    assert_error(["diff", str(GOLDEN), str(bad), "--format", "json"], bad, *fragments)
    assert_error(["diff", str(bad), str(GOLDEN), "--format", "json"], bad, *fragments)


@pytest.mark.parametrize("name, text, fragments", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_malformed_summary_to_check(tmp_path, name, text, fragments):
    bad = tmp_path / "bad.summary.json"
    bad.write_text(text)
    expect = tmp_path / "expect.toml"
    expect.write_text("[[expect]]\nmin_coverage = 0.0\n")
    assert_error(["check", str(bad), "--expect", str(expect)], bad, *fragments)
    assert_error(["check", str(GOLDEN), "--expect", str(expect), "--baseline", str(bad)], bad, *fragments)


def test_summary_counts_up_to_2_53_are_read(tmp_path):
    s = _summary()
    big = tmp_path / "big.summary.json"
    big.write_text(json.dumps({**s, "top_kernels": [{**s["top_kernels"][0], "count": 2 ** 53}, *s["top_kernels"][1:]]}))
    code, out, err = run_cli("diff", str(GOLDEN), str(big), "--format", "json")
    assert code == 0, err
    json.loads(out)


def test_summary_with_shapes_as_lists_diffs(tmp_path):
    """Shapes are free-form: a list (another tool's summary) is matched by its JSON text."""
    s = _summary()
    listed = {**s, "top_ops": [{**r, "shapes": json.loads(r["shapes"]) if isinstance(r.get("shapes"), str) else r.get("shapes")}
                               for r in s["top_ops"]]}
    path = tmp_path / "lists.summary.json"
    path.write_text(json.dumps(listed))
    code, out, err = run_cli("diff", str(path), str(path), "--format", "json")
    assert code == 0, err
    assert json.loads(out)["ops"]


def test_wellformed_summary_still_diffs():
    code, out, err = run_cli("diff", str(GOLDEN), str(GOLDEN), "--format", "json")
    assert code == 0, err
    totals = {t["metric"]: t for t in json.loads(out)["totals"]}
    assert totals["gpu_busy_ns"]["delta"] == 0  # a run against itself: no change
