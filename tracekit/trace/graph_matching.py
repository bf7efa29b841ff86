"""Which captured graph a graph replay ran, node for node (the rules are in the module doc of
tracekit.trace.capture_pairing): by sequence, by position, reordered, or by the longest
common subsequence, among the graphs of the replay's batch size."""

from __future__ import annotations

import dataclasses
import difflib
from collections import Counter, defaultdict

import numpy as np

from tracekit.trace.capture_graphs import CapturedGraph, GraphReplay

_MAX_PARTIAL = 64  # graphs tried for a longest-common-subsequence match, per replay
MATCH_KINDS = ("sequence", "by position", "reordered", "partial")


@dataclasses.dataclass
class GraphMatch:
    graph: int | None  # index into graphs, None: unmatched
    pairs: np.ndarray  # per replay kernel: node index in the graph, -1 unmatched
    how: str | None  # one of MATCH_KINDS
    why: str | None  # for unmatched kernels


def match_replay(replay: GraphReplay, graphs: list[CapturedGraph]) -> GraphMatch:
    n = len(replay.labels)
    none = np.full(n, -1, dtype=np.int64)
    pool, why, size = _pool(replay, graphs)
    if not pool:
        return GraphMatch(None, none, None, why)
    for how, test in (("sequence", _same_sequence), ("reordered", _same_kernels)):
        found = [(g, pairs) for g in pool if (pairs := test(replay.labels, g.labels)) is not None]
        if found:
            return _choose(replay, found, "by position" if how == "sequence" and _unnamed(found[0][0]) else how)
    scored = [(g, _longest_common(replay.labels, g.labels)) for g in pool[:_MAX_PARTIAL] if not _unnamed(g)]
    best = max((int((p >= 0).sum()) for _, p in scored), default=0)
    if best * 2 < n or best == 0:
        of_size = f" of its batch size ({size:,} tokens)" if size is not None else ""
        return GraphMatch(None, none, None, f"no captured graph{of_size} runs these kernels")
    match = _choose(replay, [(g, p) for g, p in scored if int((p >= 0).sum()) == best], "partial")
    if match.graph is not None:
        match.why = "not in the captured graph (the replay ran kernels its capture did not record)"
    return match


def _pool(replay: GraphReplay, graphs: list[CapturedGraph]) -> tuple[list[CapturedGraph], str | None, int | None]:
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


def _unnamed(g: CapturedGraph) -> bool:
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


def _choose(replay: GraphReplay, found: list[tuple[CapturedGraph, np.ndarray]], how: str) -> GraphMatch:
    """One of several equally good graphs: see the module doc."""
    labels = {g.label for g, _ in found}
    if replay.ordinal is not None and len(labels) == 1:
        at = [(g, p) for g, p in found if g.ordinal == replay.ordinal]
        if at:
            return GraphMatch(at[0][0].index, at[0][1], how, None)
    if len({g.signature for g, _ in found}) == 1:
        return GraphMatch(found[0][0].index, found[0][1], how, None)
    sizes = sorted({g.label for g, _ in found})
    return GraphMatch(None, np.full(len(replay.labels), -1, dtype=np.int64), None,
                  f"ambiguous: {len(found)} captured graphs ({', '.join(sizes)}) run these kernels with different shapes, "
                  "and its step does not say its token count")

