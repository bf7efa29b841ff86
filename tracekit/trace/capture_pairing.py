"""Graph-capture pairing: the graph-replayed kernels of an execution trace take the ops and
input shapes of the kernels captured into those graphs (a second trace, of the capture).

A CUDA/HIP graph replay runs its kernels with no op around them: they were launched once,
at capture time, and only `cudaGraphLaunch` / `hipGraphLaunch` shows at replay. Serving
engines can profile their capture (vLLM captures one graph per batch size, and per piece
between attention layers in piecewise mode). In that trace each captured graph is the run of
launch calls between `StreamBeginCapture` and `StreamEndCapture` on one thread; each launch
call is a node, with the op that made it and, where the runtime records it (ROCm does, CUDA
does not), the kernel's name.

Rules, per replay (one graph launch and the kernels it ran, in GPU order):
- The candidates are the captured graphs of the replay's batch size: where the capture
  labels its graphs (vLLM's `capture_<tokens>_<MODE>` range) and the replay's step says its
  token count (vLLM's `execute_<tokens>_context_..` or `execute_context_N(T)_generation_M(T)`,
  SGLang's `step[.. bs=N]`), the smallest captured size at or above it (engines pad up to it).
- Sequence: a graph whose nodes name the replay's kernels one for one, in order (memcpy and
  memset nodes match by kind). A capture that records no kernel names matches by node count
  and kinds: "by position", unverified. Else the same kernels in another order (a graph may
  run independent nodes in another order, or on several streams): each name's n-th kernel
  to its n-th node. Else the graph sharing the longest common subsequence of names, when
  that covers at least half of the replay: the kernels outside it stay unmatched.
- Several candidates: the one at the replay's position among its step's graph launches
  (piece k of the step is graph k of its batch size), else any, when all record the same
  ops and shapes; else none ("ambiguous"): a guess could take another batch size's shapes.

Matched kernels point their `op` at a copy of the captured op (with its ancestors) appended
to the ops table, one copy per replay, and are flagged `capture_op`; their times are the
graph launch's, on no thread (tid -1): they did not run on the host at replay. The kernels
keep `graph_launch`. The pairing summary (matched and unmatched kernels and time, why, per
captured graph) goes to `meta["capture"]`.

The graphs and replays are read in capture_graphs, matched in graph_matching; this module
pairs them and appends the captured ops.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from typing import Any

import numpy as np
import pandas as pd

from tracekit.trace.capture_graphs import CapturedGraph, GraphReplay, captured_graphs, graph_replays
from tracekit.trace.frames import Trace
from tracekit.trace.intervals import NO_ROW
from tracekit.trace.graph_matching import MATCH_KINDS, GraphMatch, match_replay


def pair_capture(trace: Trace, capture: Trace, source: str) -> Trace:
    """`trace` (linked) with its graph-replayed kernels given the ops of the matching kernels
    of `capture` (linked); meta["capture"] holds the pairing summary (see the module doc)."""
    graphs = captured_graphs(capture)
    replays = graph_replays(trace)
    matches = [match_replay(r, graphs) for r in replays]
    ops, op_of, from_capture = _append_ops(trace, capture, graphs, replays, matches)
    kernels = trace.kernels.assign(op=op_of, capture_op=from_capture)
    meta = {**trace.meta, "capture": _summary(trace, source, graphs, replays, matches)}
    return dataclasses.replace(trace, kernels=kernels, ops=ops, meta=meta)



def _append_ops(trace: Trace, capture: Trace, graphs: list[CapturedGraph], replays: list[GraphReplay],
                matches: list[GraphMatch]) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """The ops table with one copy of each matched replay's captured ops (and their
    ancestors) appended; each kernel's op row; which kernels took a captured op."""
    k = trace.kernels
    op_of = k["op"].to_numpy().copy()
    from_capture = np.zeros(len(k), dtype=bool)
    cap_parent = capture.ops["parent"].to_numpy()
    closures: dict[int, np.ndarray] = {}
    taken, parents, launches = [], [], []  # per appended row: capture op row, parent (new row), graph launch
    offset = len(trace.ops)
    for replay, match in zip(replays, matches):
        if match.graph is None:
            continue
        g = graphs[match.graph]
        if g.index not in closures:
            closures[g.index] = _with_ancestors(g.ops, cap_parent)
        closure = closures[g.index]
        if not len(closure):
            continue
        position = np.full(len(capture.ops), NO_ROW, dtype=np.int64)
        position[closure] = np.arange(len(closure)) + offset
        matched = match.pairs >= 0
        node_op = np.full(len(replay.rows), NO_ROW, dtype=np.int64)
        node_op[matched] = g.ops[match.pairs[matched]]
        has_op = node_op >= 0
        op_of[replay.rows[has_op]] = position[node_op[has_op]]
        from_capture[replay.rows[has_op]] = True
        parent = cap_parent[closure]
        taken.append(closure)
        parents.append(np.where(parent >= 0, position[np.maximum(parent, 0)], NO_ROW))
        launches.append(np.full(len(closure), replay.launch, dtype=np.int64))
        offset += len(closure)
    if not taken:
        return trace.ops, op_of, from_capture
    launch = np.concatenate(launches)
    l = trace.launches
    appended = capture.ops.iloc[np.concatenate(taken)].reset_index(drop=True).assign(
        parent=np.concatenate(parents), pid=l["pid"].to_numpy()[launch], tid=-1,
        start=l["start"].to_numpy()[launch], end=l["end"].to_numpy()[launch])
    return _concat(trace.ops, appended), op_of, from_capture


def _with_ancestors(rows: np.ndarray, parent: np.ndarray) -> np.ndarray:
    seen = set()
    for r in rows.tolist():
        while r >= 0 and r not in seen:
            seen.add(r)
            r = int(parent[r])
    return np.array(sorted(seen), dtype=np.int64)


def _concat(ops: pd.DataFrame, appended: pd.DataFrame) -> pd.DataFrame:
    """Row-wise, categories kept as object labels in order of first sight (existing first)."""
    categorical = [c for c in ops.columns if isinstance(ops[c].dtype, pd.CategoricalDtype)]
    out = pd.concat([f.astype({c: object for c in categorical if c in f}) for f in (ops, appended)], ignore_index=True)
    for c in ops.columns:
        if c in categorical:
            values = out[c].to_numpy(dtype=object)
            labels = pd.Index(pd.unique(values[pd.notna(values)]), dtype=object)
            out[c] = pd.Categorical(values, categories=labels)
        else:
            out[c] = out[c].astype(ops[c].dtype)
    return out


def _summary(trace: Trace, source: str, graphs: list[CapturedGraph], replays: list[GraphReplay], matches: list[GraphMatch]) -> dict[str, Any]:
    """What was paired, and what was not and why (summary.json `capture`)."""
    k = trace.kernels
    duration = (k["end"] - k["start"]).to_numpy(dtype=np.float64)
    is_kernel = (k["kind"] == "kernel").to_numpy()
    matched_time = unmatched_time = matched_kernel_time = 0.0
    matched = unmatched = 0
    how: Counter = Counter()
    why: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    per_graph: dict[int, dict[str, Any]] = {}
    for replay, match in zip(replays, matches):
        ok = match.pairs >= 0
        t_ok, t_no = float(duration[replay.rows[ok]].sum()), float(duration[replay.rows[~ok]].sum())
        matched += int(ok.sum())
        unmatched += int((~ok).sum())
        matched_time += t_ok
        unmatched_time += t_no
        matched_kernel_time += float(duration[replay.rows[ok & is_kernel[replay.rows]]].sum())
        if (~ok).any():
            why[match.why or "unmatched"][0] += int((~ok).sum())
            why[match.why or "unmatched"][1] += t_no
        if match.graph is None:
            continue
        how[match.how] += 1
        g = graphs[match.graph]
        row = per_graph.setdefault(g.index, {"graph": f"{g.label} #{g.ordinal + 1}", "batch": g.batch, "nodes": len(g.labels),
                                             "replays": 0, "kernels_matched": 0, "kernels_unmatched": 0,
                                             "matched_time_ns": 0.0, "unmatched_time_ns": 0.0, "match": match.how})
        row["replays"] += 1
        row["kernels_matched"] += int(ok.sum())
        row["kernels_unmatched"] += int((~ok).sum())
        row["matched_time_ns"] += t_ok
        row["unmatched_time_ns"] += t_no
    kernel_time = float(duration[is_kernel].sum())
    return {
        "path": source,
        "graphs_captured": len(graphs),
        "batch_sizes": sorted({g.batch for g in graphs if g.batch is not None}),
        "graph_launches": len(replays),
        "graph_launches_matched": sum(m.graph is not None for m in matches),
        "matched_by": {h: how[h] for h in MATCH_KINDS if how[h]},
        "kernels": matched + unmatched,
        "kernels_matched": matched,
        "kernels_unmatched": unmatched,
        "matched_time_ns": matched_time,
        "unmatched_time_ns": unmatched_time,
        "matched_share_of_kernel_time": matched_kernel_time / kernel_time if kernel_time else None,
        "unmatched": [{"reason": r, "kernels": int(n), "time_ns": t} for r, (n, t) in sorted(why.items(), key=lambda kv: -kv[1][1])],
        "graphs": [per_graph[i] for i in sorted(per_graph)],
    }
