"""Bad input: one line naming the file and the problem, exit 2, no traceback; what is
readable in a damaged trace is kept, with a warning saying how much was lost."""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import sys

import pytest

import tracekit
from conftest import shared
from helpers import run_cli

BERT = shared("torch", "h100_bert_small_hf_inference.json.gz")


def assert_clean_error(path, reason_fragment: str) -> None:
    before = _fingerprint(path)
    proc = run_cli("info", str(path))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert str(path) in lines[0]
    assert reason_fragment in lines[0], lines[0]
    assert _fingerprint(path) == before  # input files are never written


def _fingerprint(path):
    try:
        data = open(path, "rb").read()
    except (FileNotFoundError, IsADirectoryError):
        return None
    import os

    return hashlib.sha256(data).hexdigest(), os.stat(path).st_mtime_ns


def _bert_json() -> bytes:
    return gzip.decompress(BERT.read_bytes())


def test_missing_path(tmp_path):
    assert_clean_error(tmp_path / "nope.json", "no such file")


def test_directory(tmp_path):
    assert_clean_error(tmp_path, "is a directory")


def test_empty_file(tmp_path):
    path = tmp_path / "empty.json"
    path.write_bytes(b"")
    assert_clean_error(path, "empty file")


def test_not_json(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("this is not a trace\n")
    assert_clean_error(path, "not a torch.profiler JSON trace")


def test_an_nsys_report_gets_the_command_that_exports_it(tmp_path):
    """A .nsys-rep is Nsight Systems' own format: the one line names the export that makes it readable."""
    path = tmp_path / "run 1.nsys-rep"
    path.write_bytes(b"\x00QDSTRM binary report\x00")
    assert_clean_error(path, "nsys export --type sqlite --output 'run 1.sqlite' 'run 1.nsys-rep'")


def test_json_suffix_but_garbage(tmp_path):
    path = tmp_path / "trace.json"
    path.write_text("<html>oops</html>")
    assert_clean_error(path, "not valid JSON")


def test_shared_malformed_json():
    assert_clean_error(shared("bad", "malformed_json.json.gz"), "not valid JSON")


def test_json_without_trace_events(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"schemaVersion": 1, "events": []}))
    assert_clean_error(path, "no `traceEvents`")


def test_top_level_array(tmp_path):
    path = tmp_path / "array.json"
    path.write_text("[1, 2, 3]")
    assert_clean_error(path, "not an object with `traceEvents`")


def test_trace_events_of_wrong_type(tmp_path):
    path = tmp_path / "wrongtype.json"
    path.write_text(json.dumps({"traceEvents": 5}))
    assert_clean_error(path, "wrong type")


def test_gzip_cut_before_any_data(tmp_path):
    path = tmp_path / "cut.json.gz"
    path.write_bytes(BERT.read_bytes()[:12])
    assert_clean_error(path, "gzip")


def complete_events_before(data: bytes, cut: int) -> list[dict]:
    """The events whose text ends before byte `cut`, read with the stdlib decoder."""
    text = data[:cut].decode()
    start = text.index("[", text.index('"traceEvents"')) + 1
    decoder = json.JSONDecoder()
    events = []
    pos = start
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        try:
            event, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            return events
        events.append(event)


@pytest.mark.parametrize("fraction", [0.35, 0.6, 0.93])
def test_json_cut_mid_array_keeps_every_whole_event(tmp_path, fraction):
    data = _bert_json()
    events_start = data.index(b'"traceEvents"')
    cut = events_start + int((len(data) - events_start) * fraction)
    path = tmp_path / "cut.json"
    path.write_bytes(data[:cut])
    trace = tracekit.load(path)
    kept = complete_events_before(data, cut)
    expected_gpu = sum(e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") for e in kept)
    expected_ops = sum(e.get("cat") == "cpu_op" for e in kept)
    assert len(trace.kernels) == expected_gpu
    assert len(trace.ops) == expected_ops
    assert any("cut short" in w and "bytes" in w for w in trace.warnings), trace.warnings
    lost = [w for w in trace.warnings if "cut short" in w][0]
    assert f"kept {len(kept):,} whole events" in lost

    proc = run_cli("info", "--format", "json", str(path))
    assert proc.returncode == 0
    assert "warning" in proc.stderr and "cut short" in proc.stderr
    assert json.loads(proc.stdout)["counts"]["ops"] == expected_ops


def test_gzip_stream_cut_short_keeps_what_decompresses(tmp_path):
    import zlib

    compressed = gzip.compress(_bert_json())
    partial = compressed[: int(len(compressed) * 0.7)]
    path = tmp_path / "cut.json.gz"
    path.write_bytes(partial)
    readable = zlib.decompressobj(wbits=31).decompress(partial)
    kept = complete_events_before(readable, len(readable))
    trace = tracekit.load(path)
    assert any("gzip stream is cut short" in w for w in trace.warnings)
    assert any(f"kept {len(kept):,} whole events" in w for w in trace.warnings), trace.warnings
    assert len(trace.kernels) == sum(e.get("cat") in ("kernel", "gpu_memcpy") for e in kept) < 61


def test_integer_above_int64_is_read():
    trace = tracekit.load(shared("bad", "int_above_int64.json.gz"))
    assert len(trace.kernels) == 1 and str(trace.kernels["name"].iat[0]) == "ncclKernel_AllReduce"
    assert len(trace.ops) == 1 and trace.ops["name"].iat[0] == "record_param_comms"


def test_event_fields_of_the_wrong_type_skip_that_event(tmp_path):
    doc = json.loads(_bert_json())
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    kernels[0]["ts"] = "yesterday"
    kernels[1]["args"]["correlation"] = "not a number"
    path = tmp_path / "typed.json"
    path.write_text(json.dumps(doc))
    trace = tracekit.load(path)
    assert len(trace.kernels) == 61 - 1  # the event with a text timestamp is dropped
    assert any("1 events skipped" in w for w in trace.warnings), trace.warnings
    assert any("unreadable `args`" in w for w in trace.warnings), trace.warnings
    assert int((trace.kernels["launch"] >= 0).sum()) == 59  # its args are unknown, the rest link


def test_names_that_are_not_utf8_are_replaced(tmp_path):
    data = _bert_json()
    name = b"void at::native::(anonymous namespace)::indexSelectLargeIndex"
    assert name in data
    path = tmp_path / "latin1.json"
    path.write_bytes(data.replace(name, b"void \xff\xfeindexSelect", 1))
    trace = tracekit.load(path)
    assert any("not UTF-8" in w for w in trace.warnings)
    assert trace.kernels["name"].str.contains("\ufffd").sum() == 1
    assert len(trace.kernels) == 61


def test_html_in_names_is_kept_verbatim(tmp_path):
    doc = json.loads(_bert_json())
    k = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    k["name"] = "<script>alert(1)</script>"
    path = tmp_path / "xss.json"
    path.write_text(json.dumps(doc))
    trace = tracekit.load(path)
    assert (trace.kernels["name"] == "<script>alert(1)</script>").sum() == 1


@pytest.mark.parametrize("fmt", ["table", "json"])
@pytest.mark.parametrize("command", ["info", "analyze"])
def test_a_reader_that_goes_away_ends_tracekit_quietly(command, fmt):
    """`tracekit analyze trace | head -1` when head has already gone: no traceback, no error
    line, exit 0 (rich's own handler exits 1, and the interpreter's last flush would fail)."""
    proc = subprocess.Popen([sys.executable, "-m", "tracekit", command, "--format", fmt, str(BERT)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # gone before tracekit writes its first byte: every write fails
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert err == ""


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_a_failed_check_keeps_its_exit_code_when_the_reader_goes_away(fmt, tmp_path):
    """`set -o pipefail; tracekit check ... | head` must still fail when an expectation did."""
    expect = tmp_path / "expect.toml"
    expect.write_text("[[expect]]\nmax_step_time_ms = 0.0001\n")  # no step is that short
    proc = subprocess.Popen([sys.executable, "-m", "tracekit", "check", str(BERT), "--expect", str(expect), "--format", fmt],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 3, err  # CHECK_FAILED
    assert "Traceback" not in err


def test_the_command_ends_at_once_but_keeps_output_exit_code_and_exit_handlers(tmp_path):
    """cli.run (the console script and `python -m tracekit`) skips the interpreter's
    teardown: output written to a file (block-buffered) is whole, exit handlers ran, and the
    exit code is the command's."""
    out = tmp_path / "info.json"
    code = ("import atexit, sys\natexit.register(lambda: print('exit handler ran', file=sys.stderr))\n"
            "from tracekit.cli import run\nsys.argv = ['tracekit'] + sys.argv[1:]\nrun()\n")
    with open(out, "w") as f:
        proc = subprocess.run([sys.executable, "-c", code, "info", "--format", "json", "--top", "10000", str(BERT)],
                              stdout=f, stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 0 and "exit handler ran" in proc.stderr
    inv = json.loads(out.read_text())  # whole: the buffer was flushed before the process ended
    with gzip.open(BERT, "rt") as f:
        kernels = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]
    assert inv["counts"]["kernels"] == len(kernels)
    bad = subprocess.run([sys.executable, "-c", code, "info", str(tmp_path / "missing.json")], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "exit handler ran" in bad.stderr


@pytest.mark.parametrize("inflater", ["zlib", "isal"])
def test_concatenated_gzip_members_larger_than_a_read_are_read_whole(tmp_path, inflater):
    """`cat a.json.gz b.gz > trace.json.gz`: every member is read. A member ending inside a
    bounded read used to send the standard library's decompressor round a loop for ever
    (its unconsumed_tail keeps the next member's bytes after the end); run in a subprocess
    with a time limit so that a regression fails instead of hanging the suite."""
    if inflater == "isal":
        pytest.importorskip("isal")
    with gzip.open(BERT, "rb") as f:
        trace = f.read()
    path = tmp_path / "members.json.gz"
    path.write_bytes(gzip.compress(trace) + gzip.compress(b" \n") + gzip.compress(b"\n"))
    code = (f"import sys, {'zlib' if inflater == 'zlib' else 'isal.isal_zlib as zlib'}\n"
            "import tracekit.parsers.source as source\n"
            "source.inflate = zlib\nsource._CHUNK = 1 << 16  # reads far smaller than the members\n"
            "data, warnings, cut_short = source._gunzip(sys.argv[1])\nprint(len(data), len(warnings))")
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(len(trace) + 3), "0"]


def test_utf8_repair_counts_each_bad_sequence_and_not_the_files_own_replacement_chars():
    """The repair is the parser's, not the JSON library's (msgspec 0.23 raises DecodeError
    where 0.22 raised UnicodeDecodeError): valid text is returned as it is, bad sequences are
    replaced one U+FFFD each, a U+FFFD already in the file is not counted, and a sequence
    cut by a chunk boundary is still one sequence."""
    from tracekit.parsers import utf8

    clean = "naïve ✓ \ufffd".encode()
    assert utf8.repaired(clean) == (clean, 0) and utf8.repaired(bytearray(b"ascii")) == (b"ascii", 0)
    bad = b"a\xffb\xfe\xfdc" + "\ufffd".encode() + b"\xe2\x9c"  # 0xff, 0xfe, 0xfd, then a cut 3-byte char
    fixed, count = utf8.repaired(bad)
    assert count == 4 and fixed.decode("utf-8") == "a\ufffdb\ufffd\ufffdc\ufffd\ufffd"
    # a valid 3-byte character split across the 16 MiB chunk boundary is not a bad sequence
    boundary = b"x" * ((16 << 20) - 1) + "✓".encode() + b"\xff"
    fixed, count = utf8.repaired(boundary)
    assert count == 1 and fixed.endswith("✓\ufffd".encode())


@pytest.mark.parametrize("command", ["info", "analyze"])
def test_a_kernel_name_that_is_not_utf8_exits_0_with_the_count(tmp_path, command):
    """The issue-47 reproduction as a user runs it: one non-UTF-8 byte in a kernel name, the
    command succeeds and says how many sequences were replaced."""
    data = _bert_json()
    name = b"void at::native::(anonymous namespace)::indexSelectLargeIndex"
    path = tmp_path / "one_bad_byte.json"
    path.write_bytes(data.replace(name, b"void \xffindexSelect", 1))
    proc = run_cli(command, str(path))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert f"tracekit: warning: {path}: 1 byte sequences that are not UTF-8 were replaced with U+FFFD" in proc.stderr.splitlines()


def test_matplotlib_warnings_from_its_own_import_are_not_printed(tmp_path):
    """Under an address-space limit matplotlib's optional 3D toolkit fails to import and
    matplotlib warns "Unable to import Axes3D" before tracekit's own lines; the plots use
    no 3D, so that warning is not the user's. The failed import is made here directly."""
    code = ("import sys; sys.modules['mpl_toolkits.mplot3d'] = None\n"
            "from tracekit.cli.main import main\n"
            f"main(['analyze', {str(BERT)!r}, '--out', {str(tmp_path / 'b')!r}])\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "b" / "roofline.png").exists()
    assert "Axes3D" not in proc.stderr and "UserWarning" not in proc.stderr, proc.stderr
