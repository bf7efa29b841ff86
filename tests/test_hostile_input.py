"""Hostile and broken input (issue 11): one regression test per class of failure, each on a
minimal input built here from a small real fixture. Every bad input ends in exit 0 (with
a warning that counts what was lost) or exit 2 with one line; never exit 1, NaN in JSON,
or a half-written report bundle."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
import subprocess
import sys

import numpy as np
import pytest

import tracekit
from conftest import shared
from helpers import run_cli

BERT = shared("torch", "h100_bert_small_hf_inference.json.gz")
SGLANG = shared("torch", "mi300x_sglang_qwen3-8b_decode_bs32.json.gz")
SAXPY = shared("nsys", "a100_saxpy_mpi_nsys2022.2.sqlite")
RTX = shared("nsys", "rtx3080_tiny_nsys2026.1.sqlite")
NVFUSER = shared("nsys", "h100_nvfuser_matmul_nsys2024.6.sqlite")
CPU_FIXTURE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "cpu_tiny_llama_decode.json.gz")


def _strict(text: str):
    def refuse(name):
        raise AssertionError(f"{name} in JSON output")

    return json.loads(text, parse_constant=refuse)


def one_line_error(run, *fragments: str) -> str:
    assert run.returncode == 2, (run.returncode, run.stderr)
    lines = run.stderr.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("tracekit: error: "), run.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def bert_doc() -> dict:
    return json.loads(gzip.decompress(BERT.read_bytes()))


def write_json(tmp_path, doc, name="t.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def nsys_copy(tmp_path, source=SAXPY, name="e.sqlite") -> str:
    path = tmp_path / name
    shutil.copyfile(source, path)
    return str(path)


def edit(path: str, *statements: str) -> None:
    conn = sqlite3.connect(path)
    for sql in statements:
        conn.execute(sql)
    conn.commit()
    conn.close()
    for suffix in ("-wal", "-shm", "-journal"):
        assert not os.path.exists(path + suffix)


def sql_value(path, query: str):
    """One value read from an export with plain SQL (read-only): the reference figure."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute(query).fetchone()[0]
    finally:
        conn.close()


def warnings_of(path: str) -> list[str]:
    return tracekit.load(path).warnings


# -- Kineto columns: int64 bounds, implausible times, header types -------------------------------


@pytest.mark.parametrize("field", ["stream", "correlation", "device", "External id"])
def test_integers_outside_int64_in_args_are_unknown_and_counted(tmp_path, field):
    doc = bert_doc()
    cat = "cpu_op" if field == "External id" else "kernel"
    events = [e for e in doc["traceEvents"] if e.get("cat") == cat]
    for e, value in zip(events[:3], (2**63, 2**64 + 5, -(2**63) - 1)):
        e["args"][field] = value
    path = write_json(tmp_path, doc)
    trace = tracekit.load(path)
    assert any(w.startswith(f"3 `{field}` values are not integers in range") for w in trace.warnings), trace.warnings
    # every event is kept; only the three values are unknown
    table = trace.ops if cat == "cpu_op" else trace.kernels[trace.kernels["kind"] == "kernel"]
    assert len(table) == len(events)
    run = run_cli("analyze", "--format", "json", path)
    assert run.returncode == 0, run.stderr
    _strict(run.stdout)


@pytest.mark.parametrize("value", [1e308, -1e308, 1e18])
def test_timestamps_no_capture_can_have_are_dropped_and_counted(tmp_path, value):
    doc = bert_doc()
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    kernels[0]["ts"] = value
    kernels[1]["dur"] = value if value > 0 else 1e308
    path = write_json(tmp_path, doc)
    trace = tracekit.load(path)
    assert (trace.kernels["kind"] == "kernel").sum() == len(kernels) - 2
    assert any(w.startswith("2 events dropped: `ts` or `dur` is missing or not a plausible time") for w in trace.warnings), trace.warnings
    # what is left is the real capture: its span is the unmutated events' span
    rest = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e not in kernels[:2] and e.get("cat") in
            ("kernel", "gpu_memcpy", "gpu_memset", "cpu_op", "cuda_runtime", "cuda_driver", "user_annotation", "gpu_user_annotation", "python_function")]
    span_us = max(e["ts"] + max(e["dur"], 0) for e in rest) - min(e["ts"] for e in rest)
    assert abs(trace.meta["span_ns"] - span_us * 1000) <= 1
    assert run_cli("analyze", "--format", "json", path).returncode == 0


def test_negative_durations_are_clamped_and_counted(tmp_path):
    doc = bert_doc()
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    for e in kernels[:4]:
        e["dur"] = -7
    trace = tracekit.load(write_json(tmp_path, doc))
    assert any(w.startswith("4 events have a negative `dur`") for w in trace.warnings), trace.warnings
    assert int((trace.kernels["end"] - trace.kernels["start"]).min()) == 0


@pytest.mark.parametrize("header", [{"deviceProperties": 5}, {"deviceProperties": [{"id": 0, "name": 123}]},
                                    {"distributedInfo": {"rank": 2**70}}, {"distributedInfo": "rank 0"}])
def test_header_fields_of_the_wrong_type_are_ignored_with_a_warning(tmp_path, header):
    doc = bert_doc()
    doc.update(header)
    path = write_json(tmp_path, doc)
    trace = tracekit.load(path)
    assert any("trace header fields have the wrong type" in w for w in trace.warnings), trace.warnings
    assert run_cli("info", "--format", "json", path).returncode == 0
    if "deviceProperties" in header:  # the GPU is unknown now: said so, and --device still works
        run = run_cli("analyze", "--format", "json", path)
        assert run.returncode == 0 and "does not name its GPU" in run.stderr, run.stderr
        assert run_cli("analyze", "--device", "H100-SXM", "--format", "json", path).returncode == 0


def test_json_nested_too_deep_is_one_line(tmp_path):
    doc_text = json.dumps(bert_doc())
    deep = "[" * 5000 + "]" * 5000
    path = tmp_path / "deep.json"
    path.write_text(doc_text.replace('"traceEvents": [', '"traceEvents": [' + deep + ",", 1))
    one_line_error(run_cli("info", str(path)), "nested too deeply")


# -- intervals --------------------------------------------------------------------------------


def test_a_trace_whose_only_op_has_zero_length(tmp_path):
    doc = bert_doc()
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "cpu_op"] + [dict(ops[0], dur=0)]
    path = write_json(tmp_path, doc)
    trace = tracekit.load(path)
    assert len(trace.ops) == 1 and trace.ops["parent"].tolist() == [-1] and trace.ops["depth"].tolist() == [0]
    assert run_cli("analyze", "--format", "json", path).returncode == 0


def test_nvtx_ranges_all_ending_before_they_start(tmp_path):
    path = nsys_copy(tmp_path)
    edit(path, "UPDATE NVTX_EVENTS SET end = start - 1000 WHERE end IS NOT NULL")
    ranges = sql_value(SAXPY, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60) AND end IS NOT NULL")
    trace = tracekit.load(path)
    assert any(w.startswith(f"{ranges:,} NVTX ranges end before they start") for w in trace.warnings), trace.warnings
    assert (trace.ranges["end"] == trace.ranges["start"]).all()
    assert run_cli("analyze", "--format", "json", path).returncode == 0


# -- nsys columns and SQLite errors -------------------------------------------------------------


def test_nsys_kernels_ending_before_they_start_are_clamped_not_negative(tmp_path):
    path = nsys_copy(tmp_path)
    edit(path, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start - 2000000000 WHERE rowid IN (SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 2)")
    expected = sql_value(path, "SELECT sum(max(end - start, 0)) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    trace = tracekit.load(path)
    kernels = trace.kernels[trace.kernels["kind"] == "kernel"]
    assert int((kernels["end"] - kernels["start"]).sum()) == expected
    assert any(w.startswith("2 kernels end before they start") for w in trace.warnings), trace.warnings


@pytest.mark.parametrize("value, what", [("'text'", "text"), ("X'00ff'", "a blob"), ("9e999", "+inf"), ("-9e999", "-inf")])
def test_nsys_numeric_columns_holding_text_blobs_or_infinity(tmp_path, value, what):
    path = nsys_copy(tmp_path)
    edit(path, f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET streamId = {value}, gridX = {value} WHERE rowid IN (SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1)")
    trace = tracekit.load(path)
    kernels = trace.kernels[trace.kernels["kind"] == "kernel"]
    assert len(kernels) == 5 and (kernels["stream"] == -1).sum() == 1 and (kernels["grid_x"] == -1).sum() == 1
    assert any(w.startswith("1 `kernels: streamId` values are not integers in range") for w in trace.warnings), trace.warnings
    assert run_cli("analyze", "--format", "json", path).returncode == 0


def test_nsys_start_at_int64_min_is_dropped(tmp_path):
    path = nsys_copy(tmp_path)
    edit(path, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = -9223372036854775808 WHERE rowid IN (SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1)")
    trace = tracekit.load(path)
    assert (trace.kernels["kind"] == "kernel").sum() == 4
    assert any(w.startswith("1 kernels dropped") for w in trace.warnings)
    assert trace.meta["span_ns"] < 10**12  # the bad row does not stretch the capture


def test_nsys_duplicate_string_ids_use_the_first(tmp_path):
    path = nsys_copy(tmp_path, RTX)
    n = sql_value(RTX, "SELECT count(*) FROM StringIds")
    edit(path, "CREATE TABLE s2 AS SELECT * FROM StringIds", "DROP TABLE StringIds", "CREATE TABLE StringIds (id INTEGER, value TEXT)",
         "INSERT INTO StringIds SELECT * FROM s2", "INSERT INTO StringIds SELECT id, 'dup ' || value FROM s2", "DROP TABLE s2")
    trace = tracekit.load(path)
    assert any(w.startswith(f"{n:,} StringIds ids appear twice") for w in trace.warnings), trace.warnings
    assert not trace.kernels["name"].astype(str).str.startswith("dup ").any()


def test_nsys_emptied_string_table_is_warned(tmp_path):
    path = nsys_copy(tmp_path, RTX)
    edit(path, "DELETE FROM StringIds")
    trace = tracekit.load(path)
    kernels = int((trace.kernels["kind"] == "kernel").sum())
    assert set(trace.kernels.loc[trace.kernels["kind"] == "kernel", "name"].astype(str)) == {"<unknown string id>"}
    warning = [w for w in trace.warnings if "missing from the StringIds table" in w]
    assert warning and int(warning[0].split()[0].replace(",", "")) >= kernels


def test_nsys_null_memcpy_enum_names(tmp_path):
    path = nsys_copy(tmp_path, RTX)
    edit(path, "UPDATE ENUM_CUDA_MEMCPY_OPER SET name = NULL")
    trace = tracekit.load(path)
    copies = trace.kernels[trace.kernels["kind"] == "memcpy"]
    assert len(copies) == 1 and str(copies["copy_kind"].iat[0]) in ("Unknown", "nan")
    assert run_cli("analyze", "--format", "json", path).returncode == 0


def test_nsys_dropped_name_id_column(tmp_path):
    path = nsys_copy(tmp_path, RTX)
    edit(path, "ALTER TABLE CUPTI_ACTIVITY_KIND_RUNTIME DROP COLUMN nameId")
    assert run_cli("analyze", "--format", "json", path).returncode == 0


@pytest.mark.parametrize("damage, fragment", [
    ("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN demangledName", "no such column: demangledName"),
    ("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME COLUMN correlationId TO corr", "no such column: correlationId"),
])
def test_nsys_missing_columns_are_one_line(tmp_path, damage, fragment):
    path = nsys_copy(tmp_path)
    edit(path, damage)
    one_line_error(run_cli("info", path), path, "SQLite error", fragment)


def test_nsys_table_replaced_by_a_view(tmp_path):
    working, broken = nsys_copy(tmp_path, name="view.sqlite"), nsys_copy(tmp_path, name="broken.sqlite")
    view = ("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME TO k", "CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS SELECT * FROM k")
    edit(working, *view)
    assert (tracekit.load(working).kernels["kind"] == "kernel").sum() == 5  # a view that works is read like the table
    edit(broken, *view, "DROP TABLE k")
    one_line_error(run_cli("info", broken), broken, "SQLite error")


def test_nsys_corrupted_page_is_one_line(tmp_path):
    path = nsys_copy(tmp_path)
    data = bytearray(open(path, "rb").read())
    page = 4096
    for start in range(page, len(data), page * 3):  # the headers of many b-tree pages
        data[start : start + 16] = b"\xff" * 16
    open(path, "wb").write(bytes(data))
    one_line_error(run_cli("info", path), path)


def test_nsys_export_with_a_write_ahead_log_is_still_being_written(tmp_path):
    path = nsys_copy(tmp_path)
    with open(path + "-wal", "wb") as f:
        f.write(b"\x37\x7f\x06\x82" + bytes(4092))
    one_line_error(run_cli("info", path), "still being written", "-wal")
    assert os.path.getsize(path + "-wal") == 4096  # untouched


# -- gzip --------------------------------------------------------------------------------------


def test_gzip_bomb_is_refused_before_it_fills_memory(tmp_path, monkeypatch):
    from tracekit.parsers import source

    payload = b'{"traceEvents": [' + b" " * (40 << 20) + b"]}"  # 40 MiB that gzip shrinks ~1000x
    path = tmp_path / "bomb.json.gz"
    path.write_bytes(gzip.compress(payload, 9))
    ratio = (40 << 20) / path.stat().st_size
    assert ratio > source.MAX_RATIO
    monkeypatch.setattr(source, "RATIO_FLOOR_BYTES", 1 << 20)
    with pytest.raises(tracekit.TraceError, match="expands more than 200x"):
        tracekit.load(path)
    # the limit a user sets replaces the ratio rule, and is itself a clear line
    monkeypatch.setenv(source.LIMIT_ENV, str(4 << 20))
    one_line_error(run_cli("info", str(path)), "gzip expands past 4.0 MiB", source.LIMIT_ENV)


# -- a trace cut short whose header follows its events -------------------------------------------


def test_cut_short_trace_with_its_header_last_names_the_cut(tmp_path):
    doc = bert_doc()
    reordered = {"traceEvents": doc["traceEvents"], **{k: v for k, v in doc.items() if k != "traceEvents"}}
    text = json.dumps(reordered)
    path = tmp_path / "cut.json"
    path.write_text(text[: text.index('"schemaVersion"') - 40])  # inside the last event; kernels come late in the file
    assert (tracekit.load(path).kernels["kind"] == "kernel").sum() > 0
    run = run_cli("analyze", "--format", "json", str(path))
    assert run.returncode == 0, run.stderr
    warnings = run.stderr.strip().split("\n")
    assert any("trace is cut short: kept" in w for w in warnings), warnings  # the cause, not only its effect
    assert any("does not name its GPU" in w for w in warnings), warnings  # the header with the GPU was lost
    assert _strict(run.stdout)["device"] is None


# -- regex time ---------------------------------------------------------------------------------


def test_user_rules_run_on_a_linear_time_engine(tmp_path):
    from tracekit.attribution.rules import load_rules

    rules = tmp_path / "rules.toml"
    rules.write_text('[[block]]\nname = "ffn"\nkernel = \'(a+)+$\'\n')
    pattern = load_rules(str(rules)).block[0].patterns["kernel"]
    assert pattern.search("a" * 100_000 + "b") is None and pattern.search("xaaa") is not None  # catastrophic for backtracking
    lookbehind = tmp_path / "lookbehind.toml"
    lookbehind.write_text('[[block]]\nname = "ffn"\nkernel = \'(?<!all_)reduce\'\n')
    one_line_error(run_cli("analyze", "--rules", str(lookbehind), str(BERT)), "bad regular expression for RE2")


def test_kernel_classifier_reads_a_bounded_prefix():
    from tracekit.costs.classify import MAX_MATCHED_CHARS, classify_name

    assert classify_name("gemm_kernel" + "x" * 1_000_000) == "gemm"
    assert classify_name("x" * MAX_MATCHED_CHARS + "gemm") == "other"  # past the bound: not read


def test_default_rules_keep_the_self_output_exception():
    from tracekit.attribution.rules import default_rules

    ffn = next(r for r in default_rules().block if r.label == "ffn").patterns["frame"]
    assert ffn.search("nn.Module: BertOutput") and ffn.search("nn.Module: T5LayerOutput_1")
    assert not ffn.search("nn.Module: BertSelfOutput") and not ffn.search("nn.Module: SelfOutput")


# -- strict JSON -------------------------------------------------------------------------------


def test_strict_json_turns_non_finite_numbers_into_null():
    from tracekit.strict_json import dumps

    text = dumps({"a": float("nan"), "b": np.float64("inf"), "c": [np.float32("-inf"), 1.5], np.int64(3): np.int32(7)})
    assert _strict(text) == {"a": None, "b": None, "c": [None, 1.5], "3": 7}


@pytest.mark.parametrize("command", [("info", "--format", "json"), ("analyze", "--format", "json")])
@pytest.mark.parametrize("path", [CPU_FIXTURE, str(RTX), str(NVFUSER)])
def test_json_output_is_strict(command, path):
    run = run_cli(*command, path)
    assert run.returncode == 0, run.stderr
    _strict(run.stdout)


def test_zero_length_memcpy_gives_strict_json(tmp_path):
    doc = bert_doc()
    copies = [e for e in doc["traceEvents"] if e.get("cat") == "gpu_memcpy"]
    assert copies
    for e in copies:
        e["dur"] = 0
    run = run_cli("analyze", "--format", "json", write_json(tmp_path, doc))
    assert run.returncode == 0
    _strict(run.stdout)


# -- output -------------------------------------------------------------------------------------


def test_out_on_an_existing_file(tmp_path):
    target = tmp_path / "file"
    target.write_text("mine")
    one_line_error(run_cli("analyze", "--out", str(target), str(SGLANG)), "exists and is not a directory")
    assert target.read_text() == "mine"


def test_out_under_a_file(tmp_path):
    (tmp_path / "file").write_text("")
    one_line_error(run_cli("analyze", "--out", str(tmp_path / "file" / "bundle"), str(SGLANG)), "is a file")


def test_out_where_nothing_can_be_written(tmp_path):
    one_line_error(run_cli("analyze", "--out", "/proc/tracekit-bundle", str(SGLANG)), "/proc/tracekit-bundle")


def test_out_path_that_is_not_utf8(tmp_path):
    out = os.fsdecode(os.fsencode(str(tmp_path)) + b"/bundle\xff")
    one_line_error(run_cli("analyze", "--out", out, str(SGLANG)), "not valid UTF-8")
    assert os.listdir(tmp_path) == []


def test_usage_errors_are_one_line():
    one_line_error(run_cli("analyze", "--top", "many", str(SGLANG)), "--top")


BUNDLE = {"summary.json", "report.md", "report.html", "roofline.png", "breakdown.png", "kernels.parquet", "ops.parquet", "blocks.csv",
          "tracekit-manifest.json"}


@pytest.mark.parametrize("stage", ["render", "roofline_png", "to_parquet"])
def test_an_interrupted_bundle_leaves_nothing_that_looks_complete(tmp_path, monkeypatch, stage):
    from tracekit.reports import bundle, markdown, plots

    analysis = tracekit.analyze(SGLANG)
    out = tmp_path / "bundle"

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    target = {"render": (markdown, "render"), "roofline_png": (plots, "roofline_png")}.get(stage)
    if target:
        monkeypatch.setattr(*target, interrupt)
    else:  # the parquet writer (the bundle converts and writes on its own thread: pyarrow's write_table)
        import pyarrow.parquet as pq

        monkeypatch.setattr(pq, "write_table", interrupt)
    with pytest.raises(KeyboardInterrupt):
        bundle.write_bundle(analysis, str(out))
    assert os.listdir(tmp_path) == []  # no bundle, no temporary directory left behind

    # over a previous bundle: the old one stays whole
    monkeypatch.undo()
    bundle.write_bundle(analysis, str(out))
    before = {name: (out / name).read_bytes() for name in BUNDLE}
    if target:
        monkeypatch.setattr(*target, interrupt)
    else:  # the parquet writer (the bundle converts and writes on its own thread: pyarrow's write_table)
        import pyarrow.parquet as pq

        monkeypatch.setattr(pq, "write_table", interrupt)
    with pytest.raises(KeyboardInterrupt):
        bundle.write_bundle(analysis, str(out))
    assert {name: (out / name).read_bytes() for name in BUNDLE} == before
    assert sorted(os.listdir(tmp_path)) == ["bundle"]


def test_sigint_during_a_run_never_leaves_a_complete_looking_bundle(tmp_path):
    import signal
    import time

    out = tmp_path / "bundle"
    proc = subprocess.Popen([sys.executable, "-m", "tracekit", "analyze", "--out", str(out), str(SGLANG)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:  # interrupt once the bundle is being written
        if any(".bundle.tracekit-" in n for n in os.listdir(tmp_path)):
            proc.send_signal(signal.SIGINT)
            break
        time.sleep(0.005)
    proc.wait(60)
    names = set(os.listdir(out)) if out.exists() else set()
    assert names in (set(), BUNDLE), names  # all or nothing
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]


def test_report_text_of_a_trace_with_a_non_utf8_path(tmp_path):
    src = os.fsencode(str(tmp_path)) + b"/trace\xff.json.gz"
    shutil.copyfile(SGLANG, src)
    run = run_cli("analyze", "--format", "markdown", "--out", tmp_path / "b", src, process=True, capture_output=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert b"trace\\udcff.json.gz" in (tmp_path / "b" / "report.md").read_bytes()
    assert set(os.listdir(tmp_path / "b")) == BUNDLE


# -- several ranks ------------------------------------------------------------------------------


def test_rerun_into_the_input_directory_does_not_read_its_own_reports(tmp_path):
    for rank in (0, 1):
        shutil.copyfile(shared("torch", "v100_dlrm_8ranks", f"rank{rank}.json.gz"), tmp_path / f"rank{rank}.json.gz")
    first = run_cli("analyze", "--workers", "1", "--format", "json", "--out", str(tmp_path), str(tmp_path))
    assert first.returncode == 0, first.stderr
    assert (tmp_path / "ranks.json").exists() and (tmp_path / "rank1" / "summary.json").exists()
    second = run_cli("analyze", "--workers", "1", "--format", "json", "--out", str(tmp_path), str(tmp_path))
    assert second.returncode == 0, second.stderr
    assert _strict(second.stdout)["ranks"] == 2
    assert sorted(os.listdir(tmp_path)) == ["rank0", "rank0.json.gz", "rank1", "rank1.json.gz", "ranks.csv", "ranks.json", "ranks.md",
                                            "tracekit-manifest.json"]


def test_one_bad_rank_among_good_ones_with_workers_names_the_file(tmp_path):
    for rank in (0, 1):
        shutil.copyfile(shared("torch", "v100_dlrm_8ranks", f"rank{rank}.json.gz"), tmp_path / f"rank{rank}.json.gz")
    bad = tmp_path / "rank2.json"
    bad.write_text('{"traceEvents": [')
    run = run_cli("analyze", "--workers", "2", tmp_path, "--format", "json")
    # the sound ranks keep their report (issue 49, case 12); the bad one is named in one warning
    assert run.returncode == 0, run.stderr
    assert _strict(run.stdout)["ranks"] == 2
    named = [line for line in run.stderr.splitlines() if line.startswith(f"tracekit: warning: {bad}:")]
    assert len(named) == 1 and "left out of the job's report" in named[0], run.stderr


def test_trace_error_survives_pickling():
    import pickle

    err = pickle.loads(pickle.dumps(tracekit.TraceError("/x/rank3.json", "not valid JSON")))
    assert (err.path, err.reason, str(err)) == ("/x/rank3.json", "not valid JSON", "/x/rank3.json: not valid JSON")


def test_out_through_a_symlink_keeps_the_link(tmp_path):
    from tracekit.reports.bundle import write_bundle

    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    write_bundle(tracekit.analyze(SGLANG), str(tmp_path / "link"))
    assert (tmp_path / "link").is_symlink() and set(os.listdir(real)) == BUNDLE


def test_out_in_a_directory_whose_parent_is_read_only(tmp_path, monkeypatch):
    import tempfile

    from tracekit.reports.bundle import write_bundle

    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep")
    real_mkdtemp = tempfile.mkdtemp

    def no_writes_in_parent(prefix=None, dir=None, **kw):  # as if tmp_path were not writable
        if os.path.realpath(dir) == os.path.realpath(tmp_path):
            raise PermissionError(13, "Permission denied")
        return real_mkdtemp(prefix=prefix, dir=dir, **kw)

    monkeypatch.setattr(tempfile, "mkdtemp", no_writes_in_parent)
    write_bundle(tracekit.analyze(SGLANG), str(out))
    assert set(os.listdir(out)) == BUNDLE | {"notes.txt"} and (out / "notes.txt").read_text() == "keep"


def test_fuzz_seed_2165_damaged_schema_page_is_one_line(tmp_path):
    # found by benchmarks/fuzz_inputs.py: SQLite's error quoted the damaged bytes, and
    # decoding that message failed before the error could be reported
    from fuzz_cases import make_case

    case = make_case(2165, str(tmp_path))
    assert "corrupted pages" in case.mutations
    one_line_error(run_cli("info", case.path), case.path, "not a readable SQLite database")


def test_events_that_are_not_utf8_in_a_chunk_with_a_type_error(tmp_path):
    doc_text = json.dumps(bert_doc())
    kernel = '"cat": "kernel", "name": "'
    at = doc_text.index(kernel) + len(kernel)
    data = doc_text[:at].encode() + b"\xee\x80bad " + doc_text[at:].encode()
    data = data.replace(b'"ph": "X"', b'"ph": 5', 1)  # the chunk fails its types first
    path = tmp_path / "mixed.json"
    path.write_bytes(data)
    trace = tracekit.load(path)
    assert any("not UTF-8 were replaced" in w for w in trace.warnings), trace.warnings
    assert trace.kernels["name"].astype(str).str.contains("\ufffd").sum() == 1


def test_tex_in_trace_names_does_not_break_the_plots(tmp_path):
    """matplotlib reads text between two `$` as TeX and fails the save on an unknown command
    (`$\\x$`: "ParseFatalException: Unknown symbol"). An op, a range (the phase, through a
    rule) and the device name from the trace reach roofline.png and breakdown.png; the
    bundle must still be written, with both plots."""
    from synthetic import KinetoBuilder

    b = KinetoBuilder(device_name="NVIDIA H100 80GB HBM3")
    b.range("$\\x$ step", 0.0, 200.0)
    for i in range(4):
        t = 10.0 + 40 * i
        b.op("aten::mm$\\frac{$", t, 5.0, dims=[[512, 512], [512, 512]], types=["c10::BFloat16", "c10::BFloat16"])
        b.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_$\\sqrt{$", t + 1, t + 2, 20.0)
    rules = tmp_path / "rules.toml"
    rules.write_text('[[phase]]\nname = "$\\\\x$ phase"\nrange = "step"\n')
    out = tmp_path / "bundle"
    run = run_cli("analyze", b.write(tmp_path / "tex.json"), "--rules", str(rules), "--out", str(out))
    assert run.returncode == 0, run.stderr
    for png in ("roofline.png", "breakdown.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((out / "summary.json").read_text())
    assert any(r["phase"] == "$\\x$ phase" for r in summary["blocks"])  # the rule applied: the phase name reached the plot
