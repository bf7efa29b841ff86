"""The hostile-user audit's other cases (issue 49): secrets, terminals, journals, XML, encodings,
compression, amplification, the forms users have. Each builds its own minimal input."""

from __future__ import annotations

import base64
import http.server
import threading

import pytest

from helpers import run_cli
from tracekit.errors import TraceError
from tracekit.integrations.mlflow import check_server, masked

import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
TINY = ROOT / "fixtures" / "gpu" / "h100" / "h10080gbhbm3_llama3-8b_4layers_prefill1x512_decode_bs16_ncu_twin.json.gz"


class _Health(http.server.BaseHTTPRequestHandler):
    """/health: 200 for alice:S3cretPass (basic auth), 401 else."""

    def do_GET(self):  # noqa: N802 - the stdlib's name
        good = "Basic " + base64.b64encode(b"alice:S3cretPass").decode()
        self.send_response(200 if self.path == "/health" and self.headers.get("Authorization") == good else 401)
        self.end_headers()
        self.wfile.write(b"OK")

    def log_message(self, *args):
        pass


@pytest.fixture
def health_server():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()


def test_mlflow_credentials_in_the_uri_pass_the_health_check(health_server):
    check_server(f"http://alice:S3cretPass@127.0.0.1:{health_server}")  # no error: the server said 200


def test_mlflow_credentials_from_the_environment_pass_the_health_check(health_server, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "alice")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "S3cretPass")
    check_server(f"http://127.0.0.1:{health_server}")


def test_a_refused_password_is_never_printed(health_server):
    uri = f"http://alice:Wr0ngPass@127.0.0.1:{health_server}"
    with pytest.raises(TraceError) as caught:
        check_server(uri)
    assert "Wr0ngPass" not in str(caught.value) and "alice" not in str(caught.value) and "***@" in str(caught.value)
    assert "HTTP 401" in str(caught.value)


def test_masked_hides_user_info_and_the_environments_secrets(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "tok-123")
    text = masked("could not reach https://bob:pw%40x@host/api, token tok-123, pw@x", "https://bob:pw%40x@host")
    assert "bob" not in text and "pw%40x" not in text and "pw@x" not in text and "tok-123" not in text


@pytest.mark.parametrize("columns", ["²", "٣", "abc", "-5", "1e3", ""])
def test_a_columns_value_that_is_not_ascii_digits_is_ignored(columns):
    run = run_cli("info", TINY, env={"COLUMNS": columns, "LINES": columns})
    assert run.returncode == 0, run.stderr


NSYS = ROOT.parent / "shared" / "fixtures" / "nsys" / "rtx3080_tiny_nsys2026.1.sqlite"


def _hot_journal_export(tmp_path) -> pathlib.Path:
    """A copy of an export, changed inside a transaction whose writer died: the journal stays."""
    import shutil
    import sqlite3
    import subprocess
    import sys

    path = tmp_path / "export.sqlite"
    shutil.copyfile(NSYS, path)
    script = ("import os, sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
              "c.execute('PRAGMA journal_mode=DELETE'); c.execute('PRAGMA cache_size=1'); c.execute('BEGIN'); "
              "c.execute('DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL'); c.execute('INSERT INTO StringIds(id, value) "
              "SELECT id + 1000000, value FROM StringIds'); os._exit(0)")
    subprocess.run([sys.executable, "-c", script, str(path)], check=True)
    return path


@pytest.mark.skipif(not NSYS.exists(), reason="needs the shared fixtures' rtx3080 export")
def test_a_hot_rollback_journal_is_refused_like_a_wal(tmp_path):
    path = _hot_journal_export(tmp_path)
    journal = pathlib.Path(f"{path}-journal")
    assert journal.exists() and journal.read_bytes()[:8] == bytes.fromhex("d9d505f920a163d7")
    before = path.read_bytes(), journal.read_bytes()
    run = run_cli("analyze", path)
    assert run.returncode == 2 and "hot rollback journal" in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert (path.read_bytes(), journal.read_bytes()) == before  # the input and its journal untouched


@pytest.mark.skipif(not NSYS.exists(), reason="needs the shared fixtures' rtx3080 export")
def test_a_cold_journal_is_no_reason_to_refuse(tmp_path):
    import shutil

    path = tmp_path / "export.sqlite"
    shutil.copyfile(NSYS, path)
    pathlib.Path(f"{path}-journal").write_bytes(b"\0" * 512)  # persist mode, after the commit: the header zeroed
    assert run_cli("analyze", path, "--format", "json").returncode == 0


def test_junit_xml_parses_whatever_the_expectations_and_paths_hold(tmp_path):
    import xml.etree.ElementTree as ET

    expect = tmp_path / "expect.toml"
    expect.write_text('[[expect]]\nblock = "decode/attn\\u0001\\u001b[2J\\u200b"\nmin_efficiency = 0.99\n'
                      '[[expect]]\nblock = "k\\u0007\\ufffe"\nmax_share = 0.5\n', encoding="utf-8")
    junit = tmp_path / "junit.xml"
    run = run_cli("check", TINY, "--expect", expect, "--junit", junit)
    assert run.returncode == 3, run.stderr  # verdicts (3: one fails), not an error (2)
    raw = junit.read_bytes()
    assert not any(c in raw for c in (b"\x01", b"\x1b", b"\x07")) and "\ufffe".encode() not in raw
    root = ET.fromstring(raw)  # parses
    names = [case.get("name") for case in root.iter("testcase")]
    assert any("\\x01\\x1b[2J\\u200b" in n for n in names)


def test_trace_text_never_reaches_stderr_through_matplotlib(tmp_path):
    """Block names with SO, BEL and ESC (glyphs no font has): matplotlib warned with the raw
    bytes and a source line; the plots now draw them escaped, and its warnings stay in."""
    from synthetic import KinetoBuilder

    b, t = KinetoBuilder(), 0.0
    for _ in range(10):
        for name in ("shift\x0eout", "bell\x07", "esc\x1b[31m", "cjk\u6f22\u5b57\u0378"):
            b.kernel(name, t, t + 5, 4.0)
            t += 10
    run = run_cli("analyze", b.write(tmp_path / "glyphs.json"), "--out", tmp_path / "out", "--format", "json", process=True)
    assert run.returncode == 0, run.stderr
    assert not any(c in run.stderr for c in ("\x0e", "\x07", "\x1b")) and "Glyph" not in run.stderr and "UserWarning" not in run.stderr


RANKS = ROOT.parent / "shared" / "fixtures" / "torch" / "v100_dlrm_8ranks"


@pytest.mark.skipif(not RANKS.is_dir(), reason="needs the shared fixtures' v100_dlrm_8ranks")
def test_one_bad_rank_leaves_the_sound_ranks_their_report(tmp_path):
    import gzip
    import json
    import os
    import shutil

    job = tmp_path / "job"
    job.mkdir()
    for n in ("rank0.json.gz", "rank1.json.gz"):
        shutil.copyfile(RANKS / n, job / n)
    raw = gzip.decompress((RANKS / "rank2.json.gz").read_bytes())
    (job / "rank2.json").write_bytes(raw[: len(raw) // 3])  # cut short: salvaged, with a warning
    (job / "rank3.json").write_bytes(b"\x00not a trace at all")  # unreadable: left out, named
    (job / "rank4.json").mkdir()  # a folder named like a trace
    os.symlink("loop.json", job / "loop.json")  # a link that loops
    run = run_cli("analyze", job, "--format", "json")
    assert run.returncode == 0, run.stderr
    d = json.loads(run.stdout)
    assert d["ranks"] == 3 and sorted(os.path.basename(u["path"]) for u in d["unreadable"]) == ["loop.json", "rank3.json", "rank4.json"]
    for name in ("loop.json", "rank3.json", "rank4.json"):
        assert f"{name}: left out of the job's report" in run.stderr
    assert "rank2.json: trace is cut short" in run.stderr


def test_a_job_of_no_readable_rank_is_one_error(tmp_path):
    (tmp_path / "rank0.json").write_bytes(b"garbage")
    (tmp_path / "rank1.json").write_bytes(b"garbage too")
    run = run_cli("analyze", tmp_path)
    assert run.returncode == 2 and "could not be read either" in run.stderr and len(run.stderr.strip().splitlines()) == 1


def _tiny_doc() -> dict:
    import gzip
    import json

    return json.loads(gzip.decompress(TINY.read_bytes()))


def _headline(path) -> tuple[int, str, str]:
    import json

    run = run_cli("analyze", path, "--format", "json")
    return run.returncode, (json.loads(run.stdout)["headline"][0] if run.returncode == 0 else ""), run.stderr


def _forms(tmp_path) -> dict[str, tuple[pathlib.Path, str]]:
    """The same trace in the forms users have sent, each with the warning it must give."""
    import bz2
    import gzip
    import json
    import lzma

    doc = _tiny_doc()
    text = json.dumps(doc)
    at = text.index('], "traceName"') if '], "traceName"' in text else text.rindex("]")
    with_nan = json.loads(text)
    with_nan["traceEvents"][3].setdefault("args", {})["bogus"] = float("nan")
    begin_end = dict(doc, traceEvents=[])
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation", "python_function"):
            begin_end["traceEvents"] += [{**{k: v for k, v in e.items() if k != "dur"}, "ph": "B"},
                                         {"ph": "E", "pid": e["pid"], "tid": e["tid"], "ts": e["ts"] + e["dur"]}]
        else:
            begin_end["traceEvents"].append(e)
    forms = {
        "trailing comma": (text[:at] + "," + text[at:], "trailing comma"),
        "NaN literal": (json.dumps(with_nan), "NaN / Infinity literal"),
        "UTF-8 BOM": (b"\xef\xbb\xbf" + text.encode(), "byte-order mark"),
        "UTF-16": (text.encode("utf-16"), "UTF-16"),
        "UTF-16-LE without BOM": (text.encode("utf-16-le"), "UTF-16-LE"),
        "bz2": (bz2.compress(text.encode()), "bz2-compressed"),
        "xz named .json.gz": (lzma.compress(text.encode()), "xz-compressed"),
        "gzip in gzip": (gzip.compress(gzip.compress(text.encode())), "gzip inside gzip"),
        "B/E pairs": (json.dumps(begin_end), "B/E) event pairs read as complete events"),
    }
    out = {}
    for i, (name, (data, warning)) in enumerate(forms.items()):
        path = tmp_path / f"form{i}.json.gz"
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
        out[name] = (path, warning)
    return out


def test_every_form_users_have_reads_as_the_plain_trace_with_a_warning(tmp_path):
    code, plain, _ = _headline(TINY)
    assert code == 0
    for name, (path, warning) in _forms(tmp_path).items():
        code, headline, err = _headline(path)
        assert code == 0, (name, err)
        assert headline == plain, name  # the same figures
        assert warning in err, (name, err)


@pytest.mark.parametrize("magic, kind", [(b"(\xb5/\xfd", "zstd"), (b"PK\x03\x04", "zip")])
def test_compression_the_standard_library_cannot_read_is_named(tmp_path, magic, kind):
    path = tmp_path / "trace.json.gz"
    path.write_bytes(magic + b"\0" * 64)
    run = run_cli("analyze", path)
    assert run.returncode == 2 and f"is {kind}-compressed" in run.stderr and len(run.stderr.strip().splitlines()) == 1


def test_a_b_without_its_e_is_counted_not_invented(tmp_path):
    import json

    doc = _tiny_doc()
    doc["traceEvents"] += [{"ph": "B", "cat": "user_annotation", "name": "never_closed", "pid": 1, "tid": 1, "ts": 1.0},
                           {"ph": "E", "pid": 9, "tid": 9, "ts": 5.0}]
    path = tmp_path / "open.json"
    path.write_text(json.dumps(doc))
    run = run_cli("analyze", path, "--format", "json")
    assert run.returncode == 0 and "2 begin (B) or end (E) events have no partner" in run.stderr


def test_a_50_mb_kernel_name_gives_a_small_summary(tmp_path):
    import gzip
    import json

    doc = _tiny_doc()
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    kernel["name"] = "k" * (50 << 20) + kernel["name"]
    path = tmp_path / "big_name.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode(), 9))
    assert path.stat().st_size < 1 << 20  # a small file
    run = run_cli("analyze", path, "--out", tmp_path / "out", "--format", "json")
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "out" / "summary.json").stat().st_size < 10 << 20
    assert "1 distinct name(s) longer than 4,096 characters were cut" in run.stderr


def _nsys_with_strings(tmp_path, sql: str) -> pathlib.Path:
    import shutil
    import sqlite3

    path = tmp_path / "strings.sqlite"
    shutil.copyfile(NSYS, path)
    db = sqlite3.connect(path)
    db.executescript(sql)
    db.commit()
    db.close()
    return path


@pytest.mark.skipif(not NSYS.exists(), reason="needs the shared fixtures' rtx3080 export")
def test_an_nsys_string_table_that_expands_is_refused(tmp_path):
    """StringIds as a view that adds 30 MB to every row: a small file, gigabytes of text."""
    path = _nsys_with_strings(tmp_path, "ALTER TABLE StringIds RENAME TO strings_kept; "
                                        "CREATE VIEW StringIds AS SELECT id, value || printf('%.*c', 30000000, 'x') AS value FROM strings_kept;")
    run = run_cli("analyze", path, process=True, timeout=300)
    assert run.returncode == 2 and "not a plausible export" in run.stderr, run.stderr


@pytest.mark.skipif(not NSYS.exists(), reason="needs the shared fixtures' rtx3080 export")
def test_a_long_nsys_name_is_cut_as_read(tmp_path):
    path = _nsys_with_strings(tmp_path, "UPDATE StringIds SET value = value || printf('%.*c', 200000, 'y') "
                                        "WHERE id = (SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1);")
    run = run_cli("analyze", path, "--format", "json")
    assert run.returncode == 0, run.stderr
    assert "texts longer than 4,096 characters were cut" in run.stderr and len(run.stdout) < 1 << 20


def test_begin_end_durations_are_exact_decimals(tmp_path):
    """At 4.8e12 µs a float holds no nanoseconds: a pair's duration is the written decimals'
    difference, as exact as an X event's own `dur`."""
    text = ('{"traceEvents": [{"ph": "B", "cat": "user_annotation", "name": "r", "pid": 1, "tid": 1, "ts": 4830842216555.058},'
            '{"ph": "E", "pid": 1, "tid": 1, "ts": 4830842216555.059},'
            '{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 4830842216555.058, "dur": 0.001}]}')
    path = tmp_path / "be.json"
    path.write_text(text)
    import tracekit

    trace = tracekit.load(str(path))
    assert int(trace.ranges["end"].iat[0] - trace.ranges["start"].iat[0]) == 1  # ns
    assert int(trace.ops["end"].iat[0] - trace.ops["start"].iat[0]) == 1


@pytest.mark.parametrize("prefix, encoding", [("\n  ", "utf-16-le"), ("\n", "utf-16-be")])
def test_utf16_without_a_bom_and_leading_whitespace_is_decoded(tmp_path, prefix, encoding):
    import gzip

    path = tmp_path / "u16.json"
    path.write_bytes((prefix + gzip.decompress(TINY.read_bytes()).decode()).encode(encoding))
    run = run_cli("info", path)
    assert run.returncode == 0 and encoding.upper() in run.stderr, run.stderr


def test_begin_end_pairs_in_a_trace_the_workers_would_split_read_as_in_one_process(tmp_path):
    """Over 16 MB the workers decode pieces; a piece holding B/E halves goes to the serial
    parser, so each pair is closed whichever piece holds its halves: the same trace either way."""
    import json

    doc = _tiny_doc()
    events = []
    for k in range(24):
        for e in doc["traceEvents"]:
            e = dict(e, ts=e["ts"] + k * 100000.0) if "ts" in e else dict(e)
            if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation"):
                events += [{**{x: v for x, v in e.items() if x != "dur"}, "ph": "B"},
                           {"ph": "E", "pid": e["pid"], "tid": e["tid"], "ts": e["ts"] + e["dur"]}]
            else:
                events.append(e)
    path = tmp_path / "big_pairs.json"
    path.write_text(json.dumps(dict(doc, traceEvents=events)))
    assert path.stat().st_size > 16 << 20
    runs = [run_cli("info", "--workers", w, "--format", "json", path) for w in ("1", "2")]
    assert [r.returncode for r in runs] == [0, 0]
    assert json.loads(runs[0].stdout)["counts"] == json.loads(runs[1].stdout)["counts"]
    assert all(r.stderr.count("B/E) event pairs read as complete events") == 1 for r in runs)
