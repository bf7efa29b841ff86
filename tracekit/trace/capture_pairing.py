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
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections import Counter, defaultdict
from typing import Any

import numpy as np
import pandas as pd

from tracekit.trace.column_text import as_text, rows_where
from tracekit.trace.frames import Trace
from tracekit.trace.intervals import NO_ROW
from tracekit.trace.launch_api import BEGIN_CAPTURE_API, COPY_API, END_CAPTURE_API, NODE_API, NOT_NODE_API, SET_API
from tracekit.trace.link import launch_context

# vLLM's capture annotation (gpu_model_runner: one range per captured batch size and mode)
_CAPTURE_LABEL = re.compile(r"^capture_(\d+)(?:_([A-Za-z_]+))?")
# the token count a step's graphs were captured for (see the module doc)
_PADDED = re.compile(r"^execute_(\d+)_context_\d+\(")
_NATIVE = re.compile(r"^execute_context_\d+\((\d+)[\d_]*\)_generation_\d+\((\d+)[\d_]*\)")
_SGLANG_BS = re.compile(r"step\[\s*[A-Za-z_]+\s+bs=(\d+)")
_MAX_PARTIAL = 64  # graphs tried for a longest-common-subsequence match, per replay
MATCH_KINDS = ("sequence", "by position", "reordered", "partial")


@dataclasses.dataclass
class _Graph:
    index: int  # order of capture in the capture trace
    label: str  # its capture range (`capture_8192_PIECEWISE`), or "capture" without one
    batch: int | None
    ordinal: int  # its place among the graphs of its label
    labels: list  # per node: kernel name, "memcpy" / "memset", None: a kernel of unrecorded name
    ops: np.ndarray  # per node: the innermost op of its launch (row of the capture's ops), -1 none
    signature: tuple = ()  # per node: op name and input dims (what the costs read)


@dataclasses.dataclass
class _Replay:
    launch: int  # row of the graph launch
    rows: np.ndarray  # its kernels (rows of trace.kernels), in GPU order
    labels: list
    tokens: int | None  # the token count its step states
    ordinal: int | None  # its place among its step's graph launches


def pair_capture(trace: Trace, capture: Trace, source: str) -> Trace:
    """`trace` (linked) with its graph-replayed kernels given the ops of the matching kernels
    of `capture` (linked); meta["capture"] holds the pairing summary (see the module doc)."""
    graphs = captured_graphs(capture)
    replays = _replays(trace)
    matches = [_match(r, graphs) for r in replays]
    ops, op_of, from_capture = _append_ops(trace, capture, graphs, replays, matches)
    kernels = trace.kernels.assign(op=op_of, capture_op=from_capture)
    meta = {**trace.meta, "capture": _summary(trace, source, graphs, replays, matches)}
    return dataclasses.replace(trace, kernels=kernels, ops=ops, meta=meta)


def captured_graphs(capture: Trace) -> list[_Graph]:
    """The graphs captured in a (linked) trace, in order, with their nodes."""
    launches = capture.launches
    if not len(launches):
        return []
    names = as_text(launches["name"]).astype(str)
    kernel = as_text(launches["kernel"])
    pid, tid = launches["pid"].to_numpy(), launches["tid"].to_numpy()
    start, end = launches["start"].to_numpy(), launches["end"].to_numpy()
    is_begin, is_end, is_node = (rows_where(launches["name"], test) for test in (
        BEGIN_CAPTURE_API.search, END_CAPTURE_API.search, lambda n: NODE_API.search(n) and not NOT_NODE_API.search(n)))
    op_of, range_of = launch_context(capture)
    range_names, range_parent = as_text(capture.ranges["name"]), capture.ranges["parent"].to_numpy()
    graphs: list[_Graph] = []
    per_label: Counter = Counter()
    for b in np.flatnonzero(is_begin)[np.argsort(start[is_begin], kind="stable")]:
        thread = (pid == pid[b]) & (tid == tid[b])
        after = np.flatnonzero(thread & is_end & (start >= end[b]))
        if not len(after):
            continue  # a capture cut off by the end of the trace
        e = after[np.argmin(start[after])]
        nodes = np.flatnonzero(thread & is_node & (start >= end[b]) & (start < start[e]))
        nodes = nodes[np.argsort(start[nodes], kind="stable")]
        if not len(nodes):
            continue
        label, batch = _capture_label(range_of[b], range_names, range_parent)
        labels = [_node_label(names[i], kernel[i]) for i in nodes]
        graphs.append(_Graph(len(graphs), label, batch, per_label[label], labels, op_of[nodes]))
        per_label[label] += 1
    op_names, dims = as_text(capture.ops["name"]), capture.ops["input_dims"].to_numpy()
    for g in graphs:
        g.signature = tuple((op_names[o], repr(dims[o])) if o >= 0 else None for o in g.ops)
    return graphs


def _node_label(call: str, kernel: str | None) -> str | None:
    if COPY_API.search(call):
        return "memcpy"
    if SET_API.search(call):
        return "memset"
    return kernel


def _capture_label(row: int, names: np.ndarray, parent: np.ndarray) -> tuple[str, int | None]:
    """The innermost enclosing range that labels a capture (`capture_<tokens>_<MODE>`)."""
    while row >= 0:
        m = _CAPTURE_LABEL.match(str(names[row]))
        if m:
            return m.group(0), int(m.group(1))
        row = parent[row]
    return "capture", None


def step_tokens(name: str) -> int | None:
    """The token count a step range says its graphs ran for (see the module doc)."""
    m = _PADDED.match(name)
    if m:
        return int(m.group(1))
    m = _NATIVE.match(name)
    if m:
        return int(m.group(1)) + int(m.group(2))
    m = _SGLANG_BS.search(name)
    return int(m.group(1)) if m else None


def _replays(trace: Trace) -> list[_Replay]:
    k = trace.kernels
    graph = k["graph_launch"].to_numpy(dtype=bool) & (k["launch"].to_numpy() >= 0)
    if not graph.any():
        return []
    rows = np.flatnonzero(graph)
    launch = k["launch"].to_numpy()[rows]
    kind, name = as_text(k["kind"]), as_text(k["name"])
    rows = rows[np.lexsort((rows, k["start"].to_numpy()[rows], launch))]  # by launch, then in GPU order
    launch = k["launch"].to_numpy()[rows]
    cuts = np.flatnonzero(np.diff(launch)) + 1
    range_names, range_parent = as_text(trace.ranges["name"]), trace.ranges["parent"].to_numpy()
    launch_start = trace.launches["start"].to_numpy()
    out, seen = [], Counter()
    groups = np.split(rows, cuts)
    for members in sorted(groups, key=lambda m: launch_start[k["launch"].iat[m[0]]]):
        step, tokens = _step_of(int(k["range"].iat[members[0]]), range_names, range_parent)
        labels = [name[r] if kind[r] == "kernel" else kind[r] for r in members]
        out.append(_Replay(int(k["launch"].iat[members[0]]), members, labels, tokens, seen[step] if step >= 0 else None))
        seen[step] += 1
    return out


def _step_of(row: int, names: np.ndarray, parent: np.ndarray) -> tuple[int, int | None]:
    """The enclosing range that states a token count, and that count (-1, None: none does)."""
    while row >= 0:
        tokens = step_tokens(str(names[row]))
        if tokens is not None:
            return row, tokens
        row = parent[row]
    return NO_ROW, None


@dataclasses.dataclass
class _Match:
    graph: int | None  # index into graphs, None: unmatched
    pairs: np.ndarray  # per replay kernel: node index in the graph, -1 unmatched
    how: str | None  # one of MATCH_KINDS
    why: str | None  # for unmatched kernels


def _match(replay: _Replay, graphs: list[_Graph]) -> _Match:
    n = len(replay.labels)
    none = np.full(n, -1, dtype=np.int64)
    pool, why, size = _pool(replay, graphs)
    if not pool:
        return _Match(None, none, None, why)
    for how, test in (("sequence", _same_sequence), ("reordered", _same_kernels)):
        found = [(g, pairs) for g in pool if (pairs := test(replay.labels, g.labels)) is not None]
        if found:
            return _choose(replay, found, "by position" if how == "sequence" and _unnamed(found[0][0]) else how)
    scored = [(g, _longest_common(replay.labels, g.labels)) for g in pool[:_MAX_PARTIAL] if not _unnamed(g)]
    best = max((int((p >= 0).sum()) for _, p in scored), default=0)
    if best * 2 < n or best == 0:
        of_size = f" of its batch size ({size:,} tokens)" if size is not None else ""
        return _Match(None, none, None, f"no captured graph{of_size} runs these kernels")
    match = _choose(replay, [(g, p) for g, p in scored if int((p >= 0).sum()) == best], "partial")
    if match.graph is not None:
        match.why = "not in the captured graph (the replay ran kernels its capture did not record)"
    return match


def _pool(replay: _Replay, graphs: list[_Graph]) -> tuple[list[_Graph], str | None, int | None]:
    """The captured graphs a replay may be, why none, and the batch size that chose them
    (None: not chosen by size; see the module doc)."""
    if not graphs:
        return [], "the capture trace holds no captured graph (no StreamBeginCapture / StreamEndCapture with launches between)", None
    sizes = sorted({g.batch for g in graphs if g.batch is not None})
    if replay.tokens is None or not sizes:
        return graphs, None, None
    fitting = [s for s in sizes if s >= replay.tokens]
    if not fitting:
        return [], f"its step ran {replay.tokens:,} tokens, more than any captured size (largest {sizes[-1]:,})", None
    return [g for g in graphs if g.batch == fitting[0]], None, fitting[0]


def _unnamed(g: _Graph) -> bool:
    return any(label is None for label in g.labels)


def _same_sequence(replay: list, nodes: list) -> np.ndarray | None:
    if len(replay) != len(nodes):
        return None
    for r, c in zip(replay, nodes):
        if c != r and not (c is None and r not in ("memcpy", "memset")):
            return None
    return np.arange(len(replay), dtype=np.int64)


def _same_kernels(replay: list, nodes: list) -> np.ndarray | None:
    """Each name's n-th kernel to its n-th node, when both hold the same kernels."""
    if len(replay) != len(nodes) or None in nodes or Counter(replay) != Counter(nodes):
        return None
    where = defaultdict(list)
    for i, label in enumerate(nodes):
        where[label].append(i)
    taken: Counter = Counter()
    out = np.empty(len(replay), dtype=np.int64)
    for i, label in enumerate(replay):
        out[i] = where[label][taken[label]]
        taken[label] += 1
    return out


def _longest_common(replay: list, nodes: list) -> np.ndarray:
    out = np.full(len(replay), -1, dtype=np.int64)
    for block in difflib.SequenceMatcher(None, nodes, replay, autojunk=False).get_matching_blocks():
        out[block.b:block.b + block.size] = np.arange(block.a, block.a + block.size)
    return out


def _choose(replay: _Replay, found: list[tuple[_Graph, np.ndarray]], how: str) -> _Match:
    """One of several equally good graphs: see the module doc."""
    labels = {g.label for g, _ in found}
    if replay.ordinal is not None and len(labels) == 1:
        at = [(g, p) for g, p in found if g.ordinal == replay.ordinal]
        if at:
            return _Match(at[0][0].index, at[0][1], how, None)
    if len({g.signature for g, _ in found}) == 1:
        return _Match(found[0][0].index, found[0][1], how, None)
    sizes = sorted({g.label for g, _ in found})
    return _Match(None, np.full(len(replay.labels), -1, dtype=np.int64), None,
                  f"ambiguous: {len(found)} captured graphs ({', '.join(sizes)}) run these kernels with different shapes, "
                  "and its step does not say its token count")


def _append_ops(trace: Trace, capture: Trace, graphs: list[_Graph], replays: list[_Replay],
                matches: list[_Match]) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
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


def _summary(trace: Trace, source: str, graphs: list[_Graph], replays: list[_Replay], matches: list[_Match]) -> dict[str, Any]:
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
