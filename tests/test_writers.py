"""Every file tracekit writes goes through the one atomic writer (issue 22): a missing
directory is made, a path under a file / an empty path / an input as output is refused
with one line (exit 2) before any analysis, a full disk leaves nothing behind (exit 2),
and files get the user's umask."""

from __future__ import annotations

import gzip
import os
import pathlib
import resource
import shutil
import signal

import pytest

from helpers import run_cli

REPO = pathlib.Path(__file__).resolve().parents[1]
TINY = REPO / "fixtures" / "cpu_tiny_dense_generate.json.gz"
GOLDEN = REPO / "tests" / "golden" / "torch__h100_bert_small_hf_inference.json.gz.summary.json"


@pytest.fixture
def expect(tmp_path):
    path = tmp_path / "expect.toml"
    path.write_text("[[expect]]\nmin_coverage = 0.0\n")
    return path


def writers(tmp_path, expect, out):
    """(command line, the file it writes) for each writer."""
    return {
        "export": (["export", TINY, "--perfetto", out], out),
        "diff": (["diff", GOLDEN, GOLDEN, "--format", "json", "--out", out], os.path.join(out, "diff.json")),
        "check": (["check", GOLDEN, "--expect", expect, "--junit", out, "--format", "json"], out),
    }


@pytest.mark.parametrize("writer", ["export", "diff", "check"])
def test_into_a_missing_directory(tmp_path, expect, writer):
    out = str(tmp_path / "a" / "b" / "out")
    argv, written = writers(tmp_path, expect, out)[writer]
    code, _, err = run_cli(*argv)
    assert code == 0, err
    assert os.path.getsize(written) > 0
    assert not [n for n in os.listdir(os.path.dirname(written)) if ".tracekit-" in n]


@pytest.mark.parametrize("writer", ["export", "diff", "check"])
def test_under_a_file(tmp_path, expect, writer):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    out = str(blocker / "out")
    argv, _ = writers(tmp_path, expect, out)[writer]
    code, _, err = run_cli(*argv)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "is a file" in err
    assert blocker.read_text() == "x"


@pytest.mark.parametrize("writer", ["export", "diff", "check"])
def test_empty_out_path_is_an_error(tmp_path, expect, writer):
    argv, _ = writers(tmp_path, expect, "")[writer]
    code, _, err = run_cli(*argv)
    assert code == 2 and "an empty value" in err and len(err.strip().splitlines()) == 1, err


def test_analyze_empty_out():
    code, _, err = run_cli("analyze", TINY, "--out", "", "--format", "json")
    assert code == 2 and "'--out': an empty value" in err, err


# An output that is one of the command's inputs is refused before anything runs, and the input
# is left as it was: case -> (the input's file name, made from, the command with {input} and
# {dir}, the message). "expect": the expectations file of the fixture; "tiny-json": the tiny
# trace inflated, named summary.json in the directory analyze --out writes summary.json into.
ONTO_AN_INPUT = {
    "calibrate --out its config": ("config.json", REPO / "fixtures" / "cpu_tiny_dense.config.json",
                                   ["calibrate", TINY, "--model", "{input}", "--out", "{input}"], "is one of this command's inputs"),
    "export --perfetto onto its trace": ("t.json.gz", TINY, ["export", "{input}", "--perfetto", "{input}"],
                                         "is one of this command's inputs"),
    "check --junit onto the expectations": ("expect.toml", "expect", ["check", GOLDEN, "--expect", "{input}", "--junit", "{input}"],
                                            "inputs"),
    "diff --out onto an input": ("diff.json", GOLDEN, ["diff", "{input}", GOLDEN, "--out", "{dir}"], "would replace the input"),
    "analyze --out keeps a trace named summary.json": ("summary.json", "tiny-json",
                                                        ["analyze", "{input}", "--out", "{dir}", "--format", "json"],
                                                        "would replace the input"),
}


@pytest.mark.parametrize("case", list(ONTO_AN_INPUT))
def test_an_output_onto_an_input_is_refused(tmp_path, expect, case):
    name, source, argv, message = ONTO_AN_INPUT[case]
    path = tmp_path / name
    if source == "expect":
        path = expect
    elif source == "tiny-json":
        path.write_bytes(gzip.decompress(TINY.read_bytes()))
    else:
        shutil.copy(source, path)
    before = path.read_bytes()
    code, _, err = run_cli(*(a.format(input=path, dir=tmp_path) if isinstance(a, str) else a for a in argv))
    assert code == 2 and message in err, err
    assert path.read_bytes() == before


def test_written_with_the_users_umask(tmp_path):
    out = tmp_path / "t.perfetto.json"
    old = os.umask(0o022)
    try:
        code, _, err = run_cli("export", TINY, "--perfetto", out)
    finally:
        os.umask(old)
    assert code == 0, err
    assert (out.stat().st_mode & 0o777) == 0o644  # 0666 & ~0022


def _limited(limit_bytes: int):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG, like a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
    return apply


@pytest.mark.parametrize("writer", ["export", "diff", "check"])
def test_full_disk_leaves_nothing(tmp_path, expect, writer):
    out = str(tmp_path / "out" / "o")
    argv, written = writers(tmp_path, expect, out)[writer]
    limit = 200  # smaller than each output (a Perfetto timeline, diff.json, JUnit XML)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    proc = run_cli(*argv, process=True, env=env, preexec_fn=_limited(limit), timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "cannot write" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not os.path.exists(written)
    leftovers = [p for p in (tmp_path / "out").rglob("*")] if (tmp_path / "out").exists() else []
    assert [p for p in leftovers if p.is_file()] == []
