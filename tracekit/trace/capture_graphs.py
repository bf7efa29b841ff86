"""The two sides of graph-capture pairing (tracekit.trace.capture_pairing), read from linked
traces: the graphs a capture trace captured (`CapturedGraph`: the launch calls between
`StreamBeginCapture` and `StreamEndCapture` on one thread, labelled by vLLM's
`capture_<tokens>_<MODE>` range), and the graph replays of an execution trace
(`GraphReplay`: one graph launch and the kernels it ran, with the token count its step
states: vLLM's `execute_<tokens>_context_..` or `execute_context_N(T)_generation_M(T)`,
SGLang's `step[.. bs=N]`)."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter

import numpy as np

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


@dataclasses.dataclass
class CapturedGraph:
    index: int  # order of capture in the capture trace
    label: str  # its capture range (`capture_8192_PIECEWISE`), or "capture" without one
    batch: int | None
    ordinal: int  # its place among the graphs of its label
    labels: list  # per node: kernel name, "memcpy" / "memset", None: a kernel of unrecorded name
    ops: np.ndarray  # per node: the innermost op of its launch (row of the capture's ops), -1 none
    signature: tuple = ()  # per node: op name and input dims (what the costs read)


@dataclasses.dataclass
class GraphReplay:
    launch: int  # row of the graph launch
    rows: np.ndarray  # its kernels (rows of trace.kernels), in GPU order
    labels: list
    tokens: int | None  # the token count its step states
    ordinal: int | None  # its place among its step's graph launches


def captured_graphs(capture: Trace) -> list[CapturedGraph]:
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
    graphs: list[CapturedGraph] = []
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
        graphs.append(CapturedGraph(len(graphs), label, batch, per_label[label], labels, op_of[nodes]))
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


def graph_replays(trace: Trace) -> list[GraphReplay]:
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
        out.append(GraphReplay(int(k["launch"].iat[members[0]]), members, labels, tokens, seen[step] if step >= 0 else None))
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

