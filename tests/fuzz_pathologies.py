"""Seeded fuzzing with the ways profilers fail (issue 29): real Kineto traces given the
pathologies seen in the field, each at a random extent, run through the CLI and held to the
same promises as every input (tests/fuzz_cases.py: exit 0 or 2, one error line, strict JSON,
no raw control characters, bounded time, the input untouched).

The pathologies (1 to 3 per case):
- zero times: every (or a random share of the) kernel, copy, memset and runtime call with
  ts 0 and dur 0 (the CUDA-graph replay failure of torch 2.11 / CUDA 13);
- dropped start: kernels that start before their own launch call;
- clock offset: every GPU time (activities, GPU annotations) shifted by up to a second either way;
- duplicated correlation ids: launch calls (and their kernels) given another call's id;
- orphan activities: kernels with an id no launch call has;
- missing markers: ProfilerStep#N ranges or deviceProperties removed;
- stream overlap and negative durations on GPU activities;
- an event cap (the trace's events cut after the first N) and a file cut mid-event.

Used by benchmarks/fuzz_inputs.py --kinds pathologies (thousands) and tests/test_fuzz.py.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import random
from typing import Any, Callable

from fuzz_cases import SHARED, Case, own_event, run_commands

BASES = [
    os.path.join(SHARED, "torch", "h100_bert_small_hf_inference.json.gz"),
    os.path.join(SHARED, "torch", "mi300x_sglang_qwen3-8b_decode_bs32.json.gz"),
]
COMMANDS = (("analyze", "--format", "json"), ("analyze",))
_GPU = ("kernel", "gpu_memcpy", "gpu_memset")
_RUNTIME = ("cuda_runtime", "cuda_driver")


_DOCS: dict[str, dict] = {}


def _document(base: str) -> dict:
    """The base trace, decoded once per process; the list and header are copied per case
    (events are copied when changed: fuzz_cases.own_event)."""
    if base not in _DOCS:
        with gzip.open(base, "rb") as f:
            _DOCS[base] = json.loads(f.read())
    doc = _DOCS[base]
    return {**doc, "traceEvents": list(doc["traceEvents"])}


def _events(doc: dict, cats: tuple[str, ...]) -> list[int]:
    return [i for i, e in enumerate(doc["traceEvents"]) if isinstance(e, dict) and e.get("cat") in cats]


def _some(rng: random.Random, rows: list[int]) -> list[int]:
    if not rows:
        return []
    return rows if rng.random() < 0.4 else rng.sample(rows, rng.randint(1, len(rows)))


def _zero_times(rng, doc, log):
    cats = rng.choice([_GPU, _GPU + _RUNTIME, ("kernel",)])
    rows = _some(rng, _events(doc, cats))
    for i in rows:
        ev = own_event(doc, i)
        ev["ts"], ev["dur"] = 0, 0
    log.append(f"zero times on {len(rows)} {'/'.join(cats)} events")


def _launch_ts(doc) -> dict[Any, float]:
    return {e["args"].get("correlation"): e.get("ts") for e in (doc["traceEvents"][i] for i in _events(doc, _RUNTIME))
            if isinstance(e.get("args"), dict)}


def _dropped_start(rng, doc, log):
    launches = _launch_ts(doc)
    rows = [i for i in _events(doc, _GPU) if isinstance(doc["traceEvents"][i].get("args"), dict)
            and isinstance(launches.get(doc["traceEvents"][i]["args"].get("correlation")), (int, float))]
    rows = rng.sample(rows, min(len(rows), rng.choice([1, 2, 5, 50])))
    for i in rows:
        ev = own_event(doc, i)
        ev["ts"] = launches[ev["args"]["correlation"]] - rng.choice([0.5, 3, 50, 5_000, 1e6])
    log.append(f"{len(rows)} GPU activities before their launch")


def _clock_offset(rng, doc, log):
    offset = rng.choice([-1e6, -10_000, -50, -3, 3, 50, 10_000, 1e6])
    for i in _events(doc, _GPU + ("gpu_user_annotation",)):
        ev = own_event(doc, i)
        if isinstance(ev.get("ts"), (int, float)):
            ev["ts"] += offset
    log.append(f"GPU clock offset {offset} us")


def _duplicate_ids(rng, doc, log):
    rows = [i for i in _events(doc, _RUNTIME) if isinstance(doc["traceEvents"][i].get("args"), dict)
            and "correlation" in doc["traceEvents"][i]["args"]]
    if len(rows) < 2:
        return
    pairs = [rng.sample(rows, 2) for _ in range(rng.choice([1, 3, 30]))]
    renamed = {doc["traceEvents"][b]["args"]["correlation"]: doc["traceEvents"][a]["args"]["correlation"] for a, b in pairs}
    for i in _events(doc, _RUNTIME + _GPU):
        args = doc["traceEvents"][i].get("args")
        if isinstance(args, dict) and args.get("correlation") in renamed:
            own_event(doc, i)["args"]["correlation"] = renamed[args["correlation"]]
    log.append(f"{len(renamed)} correlation ids duplicated")


def _orphans(rng, doc, log):
    rows = _some(rng, _events(doc, _GPU))
    for n, i in enumerate(rows):
        ev = own_event(doc, i)
        if isinstance(ev.get("args"), dict):
            ev["args"]["correlation"] = 10**9 + n
    log.append(f"{len(rows)} GPU activities with no launch")


def _missing_markers(rng, doc, log):
    if rng.random() < 0.5:
        doc["traceEvents"] = [e for e in doc["traceEvents"] if not (isinstance(e, dict) and str(e.get("name", "")).startswith("ProfilerStep#"))]
        log.append("no ProfilerStep")
    else:
        doc.pop("deviceProperties", None)
        log.append("no deviceProperties")


def _overlap_or_negative(rng, doc, log):
    rows = _some(rng, _events(doc, _GPU))
    negative = rng.random() < 0.3
    for i in rows:
        ev = own_event(doc, i)
        if isinstance(ev.get("dur"), (int, float)):
            ev["dur"] = -abs(ev["dur"]) - 1 if negative else ev["dur"] * rng.choice([2, 10, 1000])
    log.append(f"{len(rows)} GPU activities {'with negative dur' if negative else 'stretched over their stream'}")


def _event_cap(rng, doc, log):
    keep = rng.randint(1, max(1, len(doc["traceEvents"])))
    doc["traceEvents"] = doc["traceEvents"][:keep]
    log.append(f"event cap at {keep}")


PATHOLOGIES: list[Callable] = [_zero_times, _zero_times, _dropped_start, _clock_offset, _duplicate_ids, _orphans,
                               _missing_markers, _overlap_or_negative, _event_cap]


def make_case(seed: int, out_dir: str) -> Case:
    rng = random.Random(seed)
    case = Case(seed, "pathology", rng.choice(BASES))
    doc = _document(case.base)
    for _ in range(rng.randint(1, 3)):
        rng.choice(PATHOLOGIES)(rng, doc, case.mutations)
    text = json.dumps(doc).encode("utf-8")
    if rng.random() < 0.15:
        cut = rng.randint(len(text) // 2, len(text) - 1)
        text = text[:cut]
        case.mutations.append(f"file cut at {cut}")
    case.path = os.path.join(out_dir, f"pathology{seed}.json")
    with open(case.path, "wb") as f:
        f.write(text)
    return case


def run_case(seed: int, out_dir: str, time_bound: float = 10.0, commands=None) -> dict[str, Any]:
    """Builds case `seed`, runs it, removes its file; a plain dict (it crosses processes).
    By default one command per case, the JSON and the terminal table taking turns by seed
    (thousands of cases fit in minutes)."""
    commands = commands if commands is not None else (COMMANDS[seed % len(COMMANDS)],)
    case = make_case(seed, out_dir)
    result: dict[str, Any] = {"seed": seed, "kind": "pathology", "base": os.path.basename(case.base), "mutations": case.mutations,
                              "runs": [], "problems": {}}
    before = (os.stat(case.path).st_size, os.stat(case.path).st_mtime_ns)
    try:
        run_commands(result, commands, case, time_bound)
        if (os.stat(case.path).st_size, os.stat(case.path).st_mtime_ns) != before:
            result["problems"]["input"] = "the input file was modified"
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(case.path)
    return result
