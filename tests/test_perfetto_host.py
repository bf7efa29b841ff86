"""The Perfetto export keeps the host side of the timeline (issue 30, point 7): every Python
frame (Kineto's python_function events, parsed as ranges of domain "python") and every
CUDA/HIP runtime call (the launch table), at their own times, on their own threads."""

from __future__ import annotations

import json

import numpy as np

import tracekit
from conftest import shared


def test_export_keeps_python_functions_and_runtime_calls(tmp_path):
    from tracekit.reports.perfetto import write_perfetto

    a = tracekit.analyze(shared("torch", "h100_bert_small_hf_inference.json.gz"), workers=1)
    out = tmp_path / "timeline.json"
    write_perfetto(a, str(out))
    events = json.loads(out.read_text())["traceEvents"]
    by_cat = {}
    for e in events:
        by_cat.setdefault(e.get("cat"), []).append(e)
    ranges, launches = a.trace.ranges, a.trace.launches
    frames = ranges[ranges["domain"].astype(str) == "python"]
    assert len(frames) > 1000 and len(by_cat.get("python_function", [])) == len(frames)
    assert len(launches) > 80 and len(by_cat.get("cuda_runtime", [])) == len(launches)
    # each runtime call at its own time (µs) and length
    got = sorted((e["ts"], e["dur"]) for e in by_cat["cuda_runtime"])
    want = sorted(zip(launches["start"].to_numpy() * 1e-3, (launches["end"] - launches["start"]).to_numpy() * 1e-3))
    assert np.allclose(got, want)
    # a frame keeps its name (file(line): function) and sits on a host thread, not a GPU
    gpu_pids = {e["pid"] for e in by_cat["kernel"]}
    assert {e["pid"] for e in by_cat["python_function"]}.isdisjoint(gpu_pids)
    assert any("modeling_bert.py(" in e["name"] for e in by_cat["python_function"])
