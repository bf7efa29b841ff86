"""Seeded mutation fuzzing of tracekit's inputs: broken and hostile Kineto traces and
Nsight Systems exports, built from small real fixtures, run through the CLI.

Every case is one mutated input (a few mutations, chosen by `random.Random(seed)`) run
through `info --format json`, `analyze --format json` and `analyze` (the terminal table),
and checked for what the project promises of any input:

- exit 0 or 2 (1 is a bug in tracekit: an "internal error");
- exit 2 prints exactly one line on stderr: `tracekit: error: PATH: reason`;
- JSON output is strict JSON (no NaN / Infinity);
- the terminal gets no raw control characters (ESC, C0 other than tab/newline, DEL, C1);
- no run takes longer than the time bound.

Used by tests/test_fuzz.py (a CI-sized run) and benchmarks/fuzz_inputs.py (thousands).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import random
import re
import shutil
import sqlite3
from dataclasses import dataclass, field
from typing import Any, Callable

from helpers import run_cli

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(REPO), "shared", "fixtures")
KINETO_BASES = [
    os.path.join(SHARED, "torch", "h100_bert_small_hf_inference.json.gz"),
    os.path.join(SHARED, "torch", "mi300x_sglang_qwen3-8b_decode_bs32.json.gz"),
    os.path.join(REPO, "fixtures", "cpu_tiny_llama_decode.json.gz"),
]
NSYS_BASES = [
    os.path.join(SHARED, "nsys", "rtx3080_tiny_nsys2026.1.sqlite"),
    os.path.join(SHARED, "nsys", "a100_saxpy_mpi_nsys2022.2.sqlite"),
    os.path.join(SHARED, "nsys", "h100_nvfuser_matmul_nsys2024.6.sqlite"),
]
COMMANDS = (("info", "--format", "json"), ("analyze", "--format", "json"), ("analyze",))

# Raw control characters a terminal would act on: C0 except tab and newline, DEL, C1.
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]")

_DEEP = 1_200
HOSTILE_NUMBERS: list[Any] = [2**63, 2**64 + 5, -(2**63) - 1, 2**63 - 1, -(2**63), 1e308, -1e308, 1e18, -1e18, 0, -1, 1.5, -0.0, 2**31, 2**53 + 1]
HOSTILE_TEXT: list[Any] = [
    "\x1b]0;pwned\x07\x1b[2J\x1b[31mred", "\u009b31m\u009d8;;https://evil\u009c", "x [/nope] y", "[link=https://example.com]click me[/link]",
    "<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "![](https://example.com/p.png)", "a|b\r\nc", "\x00\x01\x7f", "",
    "ProfilerStep#1", "(a+)+$", "\ud7ff\ufffd\U0001F600", "%s%n{0}", "aten::mm, seq = 1, op_id = 2, sizes = [[" + "1," * 50,
]
HOSTILE_OTHER: list[Any] = [None, True, [], {}, [1, 2], {"a": 1}, "123", "text"]


def hostile_value(rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.4:
        return rng.choice(HOSTILE_NUMBERS)
    if roll < 0.75:
        return rng.choice(HOSTILE_TEXT)
    if roll < 0.97:
        return rng.choice(HOSTILE_OTHER)
    return rng.choice([DEEP_MARKER, "k" * rng.choice([131_072, 1_000_000])])


# Stands for an array nested _DEEP levels deep; put in the text after json.dumps (which
# cannot itself write what is deeper than Python's recursion limit).
DEEP_MARKER = "@@deeply-nested@@"
_DEEP_TEXT = b"[" * _DEEP + b"]" * _DEEP


@dataclass
class Case:
    seed: int
    kind: str  # kineto | nsys
    base: str
    mutations: list[str] = field(default_factory=list)
    path: str = ""
    env: dict[str, str] = field(default_factory=dict)


# -- Kineto ---------------------------------------------------------------------------------
_KINETO_CACHE: dict[str, dict] = {}


def _kineto_doc(base: str) -> dict:
    if base not in _KINETO_CACHE:
        with gzip.open(base, "rb") as f:
            _KINETO_CACHE[base] = json.loads(f.read())
    doc = _KINETO_CACHE[base]
    # events are copied when mutated (see own_event); the list and header are copied here
    return {**doc, "traceEvents": list(doc["traceEvents"])}


def own_event(doc: dict, i: int) -> dict:
    """Event i, copied before it is changed (the base document is shared between cases)."""
    ev = dict(doc["traceEvents"][i])
    if isinstance(ev.get("args"), dict):
        ev["args"] = dict(ev["args"])
    doc["traceEvents"][i] = ev
    return ev


def _pick(rng: random.Random, doc: dict, cats: tuple[str, ...] | None = None) -> int | None:
    events = doc["traceEvents"]
    rows = [i for i, e in enumerate(events) if isinstance(e, dict) and (cats is None or e.get("cat") in cats)]
    return rng.choice(rows) if rows else None


_CATS = ("kernel", "cpu_op", "cuda_runtime", "user_annotation", "gpu_user_annotation", "gpu_memcpy", "python_function", "Trace")
_FIELDS = ("ts", "dur", "pid", "tid", "name", "cat", "ph", "args")
_ARGS = ("correlation", "device", "stream", "External id", "Input Dims", "Input type", "Concrete Inputs", "grid", "block",
         "registers per thread", "Collective name", "In msg nelems", "Group size", "bytes", "Sequence number")


def _k_event_field(rng, doc, log):
    i = _pick(rng, doc, _CATS)
    if i is None:
        return
    ev = own_event(doc, i)
    name = rng.choice(_FIELDS)
    ev[name] = hostile_value(rng)
    log.append(f"event[{i}].{name}")


def _k_event_arg(rng, doc, log):
    i = _pick(rng, doc, _CATS)
    if i is None:
        return
    ev = own_event(doc, i)
    if not isinstance(ev.get("args"), dict):
        ev["args"] = {}
    name = rng.choice(_ARGS)
    ev["args"][name] = hostile_value(rng)
    log.append(f"event[{i}].args.{name}")


def _k_many_fields(rng, doc, log):
    """The same hostile value in one field of every event of a category (a whole column)."""
    cat = rng.choice(_CATS)
    name = rng.choice(("ts", "dur", "name", "pid", "tid"))
    value = hostile_value(rng)
    for i, e in enumerate(doc["traceEvents"]):
        if isinstance(e, dict) and e.get("cat") == cat:
            own_event(doc, i)[name] = value
    log.append(f"all {cat}.{name}")


def _k_header(rng, doc, log):
    key = rng.choice(("deviceProperties", "distributedInfo", "baseTimeNanoseconds", "schemaVersion", "cuda_driver_version", "deviceProperties.name",
                      "deviceProperties.id", "distributedInfo.rank", "distributedInfo.pg_config"))
    value = hostile_value(rng)
    if "." in key:
        outer, inner = key.split(".")
        container = doc.get(outer)
        if outer == "deviceProperties":
            container = [dict(d) if isinstance(d, dict) else d for d in (container if isinstance(container, list) else [{}])] or [{}]
            if isinstance(container[0], dict):
                container[0][inner] = value
        else:
            container = dict(container) if isinstance(container, dict) else {}
            container[inner] = value
        doc[outer] = container
    else:
        doc[key] = value
    log.append(f"header {key}")


def _k_empty_intervals(rng, doc, log):
    """Every op (or range) of zero length, or ending before it starts; or just one op left."""
    cat = rng.choice(("cpu_op", "user_annotation", "gpu_user_annotation"))
    style = rng.choice(("zero", "negative", "single"))
    rows = [i for i, e in enumerate(doc["traceEvents"]) if isinstance(e, dict) and e.get("cat") == cat]
    if style == "single" and rows:
        keep = set(rows[:1])
        doc["traceEvents"] = [e for i, e in enumerate(doc["traceEvents"]) if i not in set(rows) or i in keep]
        rows = rows[:1]
    for i in rows:
        own_event(doc, i)["dur"] = 0 if style != "negative" else -5
    log.append(f"{style} {cat} intervals")


def _k_drop(rng, doc, log):
    events = doc["traceEvents"]
    kind = rng.choice(("kernels", "runtime", "ops", "all but one", "half"))
    cats = {"kernels": ("kernel",), "runtime": ("cuda_runtime", "cuda_driver"), "ops": ("cpu_op",)}.get(kind)
    if cats:
        doc["traceEvents"] = [e for e in events if not (isinstance(e, dict) and e.get("cat") in cats)]
    elif kind == "all but one":
        doc["traceEvents"] = [rng.choice(events)] if events else []
    else:
        doc["traceEvents"] = [e for e in events if rng.random() < 0.5]
    log.append(f"drop {kind}")


def _k_remove_key(rng, doc, log):
    i = _pick(rng, doc)
    if i is None:
        return
    ev = own_event(doc, i)
    if ev:
        key = rng.choice(list(ev))
        del ev[key]
        log.append(f"event[{i}] without {key}")


def _k_hostile_names(rng, doc, log):
    """Names, kernel names, ranges and devices made of escape sequences and markup."""
    for _ in range(rng.randint(1, 5)):
        i = _pick(rng, doc, ("kernel", "cpu_op", "user_annotation", "cuda_runtime"))
        if i is not None:
            own_event(doc, i)["name"] = rng.choice(HOSTILE_TEXT[:9])
    log.append("hostile names")


KINETO_MUTATIONS: list[Callable] = [_k_event_field, _k_event_arg, _k_many_fields, _k_header, _k_empty_intervals, _k_drop,
                                    _k_remove_key, _k_hostile_names]


def _serialize(rng: random.Random, doc: dict, log: list[str]) -> bytes:
    if rng.random() < 0.25:  # header after the events, as some writers do
        doc = {"traceEvents": doc["traceEvents"], **{k: v for k, v in doc.items() if k != "traceEvents"}}
        log.append("header last")
    text = json.dumps(doc, allow_nan=True).encode("utf-8").replace(f'"{DEEP_MARKER}"'.encode(), _DEEP_TEXT)
    roll = rng.random()
    if roll < 0.15:
        cut = rng.randint(1, len(text) - 1)
        text = text[:cut]
        log.append(f"cut at {cut}")
    elif roll < 0.25:
        data = bytearray(text)
        for _ in range(rng.randint(1, 20)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        text = bytes(data)
        log.append("random bytes")
    elif roll < 0.28:
        text = text.replace(b'"traceEvents": [', b'"traceEvents": [' + b"[" * _DEEP * 2 + b"]" * _DEEP * 2 + b",", 1)
        log.append("deeply nested event")
    return text


def make_kineto(case: Case, rng: random.Random, out_dir: str) -> None:
    doc = _kineto_doc(case.base)
    for _ in range(rng.randint(1, 3)):
        rng.choice(KINETO_MUTATIONS)(rng, doc, case.mutations)
    data = _serialize(rng, doc, case.mutations)
    compress = rng.random() < 0.5
    if compress:
        data = gzip.compress(data, compresslevel=1)
        if rng.random() < 0.1:
            data = data[: rng.randint(10, len(data))]
            case.mutations.append("gzip cut")
    if rng.random() < 0.01:  # a small decompression bomb, with a limit that makes it one
        data = gzip.compress(b'{"traceEvents": [' + b" " * (4 << 20) + b"]}")
        case.env["TRACEKIT_MAX_GUNZIP_BYTES"] = str(1 << 20)
        case.mutations.append("gzip bomb")
        compress = True
    case.path = os.path.join(out_dir, f"case{case.seed}.json" + (".gz" if compress else ""))
    with open(case.path, "wb") as f:
        f.write(data)


# -- Nsight Systems -------------------------------------------------------------------------
_SQL_VALUES = ["'text'", "X'00ff10'", "9e999", "-9e999", "NULL", "-9223372036854775808", "9223372036854775807", "1.5", "-5", "0",
               "'\x1b]0;pwned\x07'", "'x [/nope] y'"]


def _tables(conn: sqlite3.Connection) -> dict[str, list[str]]:
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {n: [r[1] for r in conn.execute(f'PRAGMA table_info("{n}")')] for n in names}


_KEY_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY", "NVTX_EVENTS", "StringIds",
               "TARGET_INFO_GPU", "ENUM_CUDA_MEMCPY_OPER", "TARGET_INFO_SESSION_START_TIME", "CUPTI_ACTIVITY_KIND_MEMSET")


def _key_table(rng, tables):
    present = [t for t in _KEY_TABLES if t in tables]
    return rng.choice(present) if present else rng.choice(list(tables))


def _n_value(rng, conn, tables, log):
    t = _key_table(rng, tables)
    col = rng.choice(tables[t])
    value = rng.choice(_SQL_VALUES)
    where = rng.choice(["", f"WHERE rowid IN (SELECT rowid FROM \"{t}\" ORDER BY random() LIMIT 1)"])
    conn.execute(f'UPDATE "{t}" SET "{col}" = {value} {where}')
    log.append(f"{t}.{col} = {value[:20]} {'all' if not where else 'one'}")


def _n_drop_column(rng, conn, tables, log):
    t = _key_table(rng, tables)
    col = rng.choice(tables[t])
    try:
        if rng.random() < 0.5:
            conn.execute(f'ALTER TABLE "{t}" DROP COLUMN "{col}"')
            log.append(f"drop {t}.{col}")
        else:
            conn.execute(f'ALTER TABLE "{t}" RENAME COLUMN "{col}" TO "{col}_renamed"')
            log.append(f"rename {t}.{col}")
    except sqlite3.Error:
        pass


def _n_view(rng, conn, tables, log):
    t = _key_table(rng, tables)
    conn.execute(f'ALTER TABLE "{t}" RENAME TO "{t}_data"')
    conn.execute(f'CREATE VIEW "{t}" AS SELECT * FROM "{t}_data"')
    if rng.random() < 0.5:
        log.append(f"{t} is a view")
    else:
        conn.execute(f'DROP TABLE "{t}_data"')
        log.append(f"{t} is a broken view")


def _n_strings(rng, conn, tables, log):
    if "StringIds" not in tables:
        return
    style = rng.choice(("empty", "duplicate", "hostile"))
    if style == "empty":
        conn.execute("DELETE FROM StringIds")
    elif style == "duplicate":
        conn.execute("CREATE TABLE s2 AS SELECT * FROM StringIds")
        conn.execute("DROP TABLE StringIds")
        conn.execute("CREATE TABLE StringIds (id INTEGER, value TEXT)")
        conn.execute("INSERT INTO StringIds SELECT * FROM s2")
        conn.execute("INSERT INTO StringIds SELECT id, 'duplicate ' || value FROM s2")
        conn.execute("DROP TABLE s2")
    else:
        conn.execute("UPDATE StringIds SET value = ? WHERE id IN (SELECT id FROM StringIds ORDER BY random() LIMIT 5)", (rng.choice(HOSTILE_TEXT),))
    log.append(f"StringIds {style}")


def _n_times(rng, conn, tables, log):
    t = rng.choice([x for x in ("CUPTI_ACTIVITY_KIND_KERNEL", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME") if x in tables] or list(tables))
    if "start" not in tables[t] or "end" not in tables[t]:
        return
    style = rng.choice(("backwards", "min start", "huge end"))
    sql = {"backwards": f'UPDATE "{t}" SET "end" = start - 2000000000', "min start": f'UPDATE "{t}" SET start = -9223372036854775808 WHERE rowid IN (SELECT rowid FROM "{t}" LIMIT 1)',
           "huge end": f'UPDATE "{t}" SET "end" = 9223372036854775807 WHERE rowid IN (SELECT rowid FROM "{t}" LIMIT 1)'}[style]
    conn.execute(sql)
    log.append(f"{t} {style}")


def _n_enum_null(rng, conn, tables, log):
    if "ENUM_CUDA_MEMCPY_OPER" in tables:
        conn.execute("UPDATE ENUM_CUDA_MEMCPY_OPER SET name = NULL")
        log.append("NULL enum names")


def _n_drop_table(rng, conn, tables, log):
    t = _key_table(rng, tables)
    conn.execute(f'DROP TABLE "{t}"')
    log.append(f"drop table {t}")


NSYS_MUTATIONS: list[Callable] = [_n_value, _n_value, _n_drop_column, _n_view, _n_strings, _n_times, _n_enum_null, _n_drop_table]


def make_nsys(case: Case, rng: random.Random, out_dir: str) -> None:
    case.path = os.path.join(out_dir, f"case{case.seed}.sqlite")
    shutil.copyfile(case.base, case.path)
    conn = sqlite3.connect(case.path)
    try:
        tables = _tables(conn)
        for _ in range(rng.randint(1, 3)):
            try:
                rng.choice(NSYS_MUTATIONS)(rng, conn, tables, case.mutations)
            except sqlite3.Error as exc:
                case.mutations.append(f"(sql failed: {exc})")
            tables = _tables(conn)
        conn.commit()
    finally:
        conn.close()
    roll = rng.random()
    size = os.path.getsize(case.path)
    if roll < 0.08:  # damaged pages
        with open(case.path, "r+b") as f:
            for _ in range(rng.randint(1, 8)):
                f.seek(rng.randrange(100, size))
                f.write(bytes(rng.randrange(256) for _ in range(rng.randint(1, 64))))
        case.mutations.append("corrupted pages")
    elif roll < 0.12:
        with open(case.path, "r+b") as f:
            f.truncate(rng.randrange(100, size))
        case.mutations.append("file cut short")
    elif roll < 0.14:
        with open(case.path + "-wal", "wb") as f:
            f.write(b"\x37\x7f\x06\x82" + bytes(4092))
        case.mutations.append("-wal beside it")


def make_case(seed: int, out_dir: str) -> Case:
    rng = random.Random(seed)
    kind = "kineto" if rng.random() < 0.7 else "nsys"
    case = Case(seed, kind, rng.choice(KINETO_BASES if kind == "kineto" else NSYS_BASES))
    (make_kineto if kind == "kineto" else make_nsys)(case, rng, out_dir)
    return case


# -- running and checking -------------------------------------------------------------------
def run_command(command, case: Case):
    """One command on the case's file, through tracekit's CLI in this process (helpers.run_cli);
    a numpy warning goes to the caller's filters (test_fuzz turns RuntimeWarnings into errors)."""
    return run_cli(*command, case.path, env=case.env, python_warnings="caller")


def _no_constants(name: str) -> Any:
    raise ValueError(f"not strict JSON: {name}")


def problems(run, command, time_bound: float) -> dict[str, str]:
    """What is wrong with one run of `command` (helpers.CliRun), by check name (empty when it is all right)."""
    found: dict[str, str] = {}
    if run.returncode not in (0, 2):
        # Rich markup in a trace string crashing the table is the terminal-escaping class
        # (tracekit/reports/text.py, issue 12): counted apart so each class is visible.
        check = "exit-markup" if "MarkupError" in run.stderr else "exit"
        found[check] = f"exit {run.returncode}: {run.stderr.strip()[-300:]}"
    if run.returncode == 2:
        lines = run.stderr.strip("\n").split("\n")
        if len(lines) != 1 or not lines[0].startswith("tracekit: error: "):
            found["stderr"] = f"exit 2 with {len(lines)} stderr lines: {run.stderr[:300]!r}"
    if run.returncode == 0 and "--format" in command and "json" in command:
        try:
            json.loads(run.stdout, parse_constant=_no_constants)
        except ValueError as exc:
            found["json"] = str(exc)[:300]
    control = count_control_characters(run.stdout)
    if control:
        found["control"] = f"{control} raw control characters on stdout"
    if run.seconds > time_bound:
        found["time"] = f"{run.seconds:.1f} s"
    return found


def count_control_characters(text: str) -> int:
    """Raw control characters a terminal would act on (escape sequences, C1 codes)."""
    return len(CONTROL.findall(text))


def run_commands(result: dict[str, Any], commands, case, time_bound: float) -> None:
    """Runs each command on the case's file, recording its exit code, time and problems in `result`."""
    for command in commands:
        run = run_command(command, case)
        result["runs"].append({"command": " ".join(command), "code": run.returncode, "seconds": round(run.seconds, 3)})
        for check, detail in problems(run, command, time_bound).items():
            result["problems"].setdefault(check, f"{' '.join(command)}: {detail}")


def run_case(seed: int, out_dir: str, time_bound: float = 10.0, commands=COMMANDS) -> dict[str, Any]:
    """Builds case `seed`, runs it, removes its files; a plain dict (it crosses processes)."""
    case = make_case(seed, out_dir)
    result: dict[str, Any] = {"seed": seed, "kind": case.kind, "base": os.path.basename(case.base), "mutations": case.mutations,
                              "runs": [], "problems": {}}
    before = _fingerprint(case.path)
    try:
        run_commands(result, commands, case, time_bound)
        if _fingerprint(case.path) != before:
            result["problems"]["input"] = "the input file was modified"
        leftovers = [p for p in os.listdir(out_dir) if p.startswith(f"case{seed}.") and p.endswith(("-shm", "-journal")) and not p.endswith("-wal")]
        if leftovers:
            result["problems"]["input"] = f"files written beside the input: {leftovers}"
    finally:
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(case.path + suffix)
    return result


def _fingerprint(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns
