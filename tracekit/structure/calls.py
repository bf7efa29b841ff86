"""Calls and networks from the weight reads of the thread that runs the forwards.

A **call** is a maximal run of reads that starts at an entry (tracekit.structure.weights: an
embedding lookup or a read that widens a narrow input) and runs to the next call's entry. A
widening read is an entry only where it is read once per forward: its weight's reads are
fewer than those of the reads after it (a layer stack reads each layer's weights once per
layer: a DiT block's modulation [6d, d] widens as much as a patch embedding, but is read as
often as the layer's other weights), and it writes the width the reads after it work at (T5's
relative-position embedding writes a head count, not the model's width). Entries with fewer
than MIN_CALL_READS reads between them start one call (a patch embedding, then a timestep MLP).

A **network** is the weights one call reads: calls that read the same set of weight shapes
the same number of times, within LENGTH_RATIO, are calls of one network (a prefill and its
decode forwards; the 20 calls of a UNet under guidance), while a 1-layer draft and a 4-layer
target of one width read the same shapes a different number of times and are two.

Each call also has a **signature**: the names and input shapes of the thread's top-level ops
from its entry to the next call's (the call and the host work after it: a sampler's update, a
guidance combine, a cache write). Calls of one network with one signature did the same work;
the loop finder (tracekit.structure.pipeline) reads periods from them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.structure.repeats import outermost_repeat
from tracekit.structure.weights import WeightReads, code_of, entry_candidates, narrow_conv
from tracekit.trace.autograd import NONE

LOOKAHEAD = 8  # reads after an entry candidate that show the width and counts of the layers it feeds
MIN_CALL_READS = 3  # a call reads at least this many weights before another entry starts a new one
LENGTH_RATIO = 1.5
MAX_LEADING = 8  # reads a network may run before its entry (a timestep MLP, a text projection)
SAME_WEIGHTS = 0.8  # share of their distinct weight shapes two calls of one network have in common  # calls of one network read within this ratio of each other's number of weights


@dataclass(frozen=True)
class Network:
    id: int
    calls: int
    reads_per_call: int  # the median call's weight reads
    layers: int  # the layer stack's repeat count inside one call (1: no stack found)
    width: int  # the most common input width of its reads (the residual stream, or channels)
    conv_share: float  # share of its reads that are convolutions
    embedding: bool  # its calls start with an embedding lookup (a token model)
    read_elements: int  # weight elements the median call reads (a size, not a parameter count: layers of one shape count each)

    def describe(self) -> str:
        layers = f"{self.layers} layers, " if self.layers > 1 else ""
        return f"{layers}d={self.width}"


@dataclass(frozen=True)
class ThreadOps:
    """The call thread's top-level ops outside autograd in start order (start, a code of name and
    input shapes), and per call the index of its first op and the index past its last read's op."""
    rows: np.ndarray  # op rows
    start: np.ndarray
    code: np.ndarray
    first: np.ndarray
    own_end: np.ndarray


@dataclass(frozen=True)
class Calls:
    """Per call, in start order: its reads [first, last] (indices into the thread's reads), host
    start (its entry's start) and end (its last read's end), network and signature."""
    first: np.ndarray
    last: np.ndarray
    start: np.ndarray
    end: np.ndarray
    network: np.ndarray
    signature: np.ndarray  # the call and the host work after it, to the next call
    own: np.ndarray  # the call's own ops, from its entry to its last read
    span_end: np.ndarray  # host end of the last top-level op before the next call's entry
    after: list  # per call: the distinct names of the host ops from its last read to the next call (a sampler's update)
    ops: "ThreadOps"  # the thread's top-level ops, and where each call's own ops begin and end among them
    networks: list[Network]
    reads: WeightReads  # the thread's reads the indices point into
    pid: int
    tid: int

    def __len__(self) -> int:
        return len(self.first)


def entries(reads: WeightReads) -> np.ndarray:
    """Positions of the reads that start a call (see the module docstring)."""
    candidate = np.flatnonzero(entry_candidates(reads))
    if not len(candidate):
        return candidate
    counts = np.bincount(reads.code)[reads.code].astype(np.float64)
    narrow = (reads.embedding | narrow_conv(reads))[candidate]
    # the LOOKAHEAD reads after each candidate, as rows (NaN past the end, and for a width of 0:
    # an embedding's indices have no width), their medians in one pass
    later = candidate[:, None] + 1 + np.arange(LOOKAHEAD)[None, :]
    inside = later < len(reads)
    later = np.minimum(later, len(reads) - 1)
    later_counts = np.where(inside, counts[later], np.nan)
    widths = np.where(inside & (reads.in_width[later] > 0), reads.in_width[later].astype(np.float64), np.nan)
    known = ~np.isnan(later_counts).all(axis=1) & ~np.isnan(widths).all(axis=1)
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows: unknown, dropped by `known`
            median_count = np.nanmedian(later_counts, axis=1)
            median_width = np.nanmedian(widths, axis=1)
        # it writes the width the reads after it work at (not an LM head's vocabulary, not a
        # modulation's 6 x d, not a relative-position table's head count)
        ratio = reads.out_width[candidate] / median_width
    feeds_the_width = (ratio >= 0.5) & (ratio <= 2.0)
    # a lookup of token ids, or a convolution over a few channels (pixels, a latent), starts a
    # forward wherever it is not read more often than what follows; a widening linear must be
    # read less often than the layers it feeds (see the module docstring)
    mine = counts[candidate]
    once_per_forward = np.where(narrow, mine <= median_count, mine < median_count)
    kept = candidate[known & feeds_the_width & once_per_forward].tolist()
    starts: list[int] = []
    for i in kept:
        if not starts or i - starts[-1] >= MIN_CALL_READS:
            starts.append(i)
    return np.array(starts, dtype=np.int64)


def find_calls(reads: WeightReads, ops: pd.DataFrame, states: np.ndarray) -> Calls | None:
    """The calls on the reads' one thread (see the module docstring); None without two entries."""
    if not len(reads):
        return None
    pid, tid = int(reads.pid[0]), int(reads.tid[0])
    first = entries(reads)
    if len(first) < 2:
        return None
    if first[0] >= MIN_CALL_READS:
        first = np.r_[0, first]  # a network before the first entry found (one whose entry is not a widening read)
    else:
        first[0] = 0
    first = _split_at_modality(reads, first)
    first = _split_repeated_forwards(reads.code, first)
    last = np.r_[first[1:] - 1, len(reads) - 1]
    networks, network = _networks(reads, first, last)
    first = _with_leading_reads(reads.code, first, network)
    last = np.r_[first[1:] - 1, len(reads) - 1]
    networks, network = _networks(reads, first, last)
    start = reads.start[first]
    end = np.array([reads.end[a:b + 1].max() for a, b in zip(first, last)], dtype=np.int64)
    full, own, span_end, after, thread_ops = _signatures(ops, states, pid, tid, start, reads.start[last])
    return Calls(first, last, start, end, network, full, own, span_end, after, thread_ops, networks, reads, pid, tid)


def _split_repeated_forwards(code: np.ndarray, first: np.ndarray) -> np.ndarray:
    """A call whose reads are two or more back-to-back periods that each hold a layer stack is
    that many calls: forwards whose entry reads like a layer's weight (a DiT's timestep MLP
    [d, 128] has the shape of its FFN's down projection) start no call of their own."""
    bounds = np.r_[first, len(code)]
    out: list[int] = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        out.append(int(a))
        found = outermost_repeat(code[a:b], min_period=2 * MIN_CALL_READS)
        if found is None or found.period * found.count < (b - a) // 2:
            continue
        unit = code[a + found.start:a + found.start + found.period]
        if unit[0] != code[a]:
            continue  # each forward starts with the read the call starts with, not with a layer's
        inner = outermost_repeat(unit, min_period=2)
        # a forward: a layer stack over most of the period, and reads outside it (an entry, a head)
        if inner is None or not len(unit) / 2 <= inner.covered < len(unit) - 1:
            continue
        starts = [a + found.start + i * found.period for i in range(found.count)]
        if starts[0] - a < MIN_CALL_READS:
            starts = starts[1:]
        out += [int(x) for x in starts if b - x >= MIN_CALL_READS]
    return np.array(sorted(set(out)), dtype=np.int64)


def _split_at_modality(reads: WeightReads, first: np.ndarray) -> np.ndarray:
    """Calls split where their reads turn from GEMMs to convolutions (or back) onto weights the
    call has not read before, for MIN_CALL_READS reads or more to its end: a conv decoder
    whose first convolution keeps its latent's channels has no entry of its own, and would
    read as the tail of the transformer call before it."""
    bounds = np.r_[first, len(reads)]
    out = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        out.append(int(a))
        conv = reads.conv[a:b]
        turns = np.flatnonzero(conv[1:] != conv[:-1]) + 1
        for k in turns:
            if k < MIN_CALL_READS or b - a - k < MIN_CALL_READS:
                continue
            head, tail = reads.code[a:a + k], reads.code[a + k:b]
            if conv[k:].mean() >= 0.5 > conv[:k].mean() or conv[k:].mean() < 0.5 <= conv[:k].mean():
                if not set(head.tolist()) & set(tail.tolist()):
                    out.append(int(a + k))
                    break
    return np.array(out, dtype=np.int64)


def _with_leading_reads(code: np.ndarray, first: np.ndarray, network: np.ndarray) -> np.ndarray:
    """Entries moved back over the reads every call of their network runs just before its entry
    and that are read nowhere else (a UNet's timestep MLP before its conv stem), unless the
    network's last call ends with them too (a token model's LM head: the end of each call)."""
    first = first.copy()
    total = np.bincount(code)
    for net in np.unique(network):
        mine = np.flatnonzero(network == net)
        mine = mine[first[mine] > 0]
        if len(mine) < 2:
            continue
        shift = 0
        for m in range(1, MAX_LEADING + 1):
            if (first[mine] - m < 0).any() or (first[mine] - m <= np.r_[-1, first[:-1]][mine]).any():
                break  # not past the previous entry
            before = code[first[mine] - m]
            if not (before == before[0]).all() or total[before[0]] != len(mine):
                break  # read elsewhere too: the previous call's own weight (a DiT's head before a VAE)
            shift = m
        if not shift:
            continue
        last = np.flatnonzero(network == net)[-1]
        tail_end = first[last + 1] if last + 1 < len(first) else len(code)
        lead = code[first[mine[0]] - shift:first[mine[0]]]
        if tail_end - shift >= first[last] and np.array_equal(code[tail_end - shift:tail_end], lead):
            continue
        first[mine] -= shift
    return first


def _networks(reads: WeightReads, first: np.ndarray, last: np.ndarray) -> tuple[list[Network], np.ndarray]:
    keys = [frozenset(reads.code[a:b + 1].tolist()) for a, b in zip(first, last)]
    lengths = last - first + 1
    groups: list[tuple[frozenset, int]] = []  # (weight set, the first call's length)
    network = np.zeros(len(first), dtype=np.int64)
    for j, (key, n) in enumerate(zip(keys, lengths)):
        found = next((g for g, (k, m) in enumerate(groups) if _same_weights(k, key) and max(n, m) <= LENGTH_RATIO * min(n, m)), None)
        if found is None:
            groups.append((key, int(n)))
            found = len(groups) - 1
        network[j] = found
    out = []
    for g, (key, _) in enumerate(groups):
        mine = np.flatnonzero(network == g)
        a, b = first[mine[0]], last[mine[0]]
        codes = reads.code[a:b + 1]
        repeat = outermost_repeat(codes, min_period=2)
        widths = reads.in_width[a:b + 1]
        widths = widths[widths > 0]
        elements = [int(reads.size[first[j]:last[j] + 1].sum()) for j in mine]
        out.append(Network(id=g, calls=len(mine), reads_per_call=int(np.median(lengths[mine])),
                           layers=repeat.count if repeat is not None else 1,
                           width=int(np.bincount(widths).argmax()) if len(widths) else 0,
                           conv_share=float(reads.conv[a:b + 1].mean()),
                           embedding=bool(reads.embedding[a]),
                           read_elements=int(np.median(elements))))
    return out, network


def _same_weights(a: frozenset, b: frozenset) -> bool:
    """Two calls read one network's weights where their weight shapes mostly agree (a decode
    forward skips the cross-attention projections its first call cached; a sampler's last call
    may skip a projection)."""
    return len(a & b) >= SAME_WEIGHTS * len(a | b)


def _signatures(ops: pd.DataFrame, states: np.ndarray, pid: int, tid: int, starts: np.ndarray,
                last_reads: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, list, "ThreadOps"]:
    """Per call: a code of the names and input shapes of the thread's top-level ops from its
    entry to the next call's entry (full), the same of its own ops (to its last read), the
    end of the last of those ops, and the distinct names of the ops after its last read."""
    parent = ops["parent"].to_numpy() if "parent" in ops else np.full(len(ops), -1)
    mine = np.flatnonzero((parent < 0) & (states == NONE) & (ops["pid"].to_numpy() == pid) & (ops["tid"].to_numpy() == tid))
    op_start = ops["start"].to_numpy()[mine]
    order = np.argsort(op_start, kind="stable")
    mine, op_start = mine[order], op_start[order]
    op_end = ops["end"].to_numpy()[mine]
    names = ops["name"].to_numpy()[mine]
    dims = ops["input_dims"].to_numpy()[mine] if "input_dims" in ops else np.full(len(mine), None)
    op_code = code_of([(str(n), repr(d)) for n, d in zip(names.tolist(), dims.tolist())])
    # the op holding a read starts at or before the read: cut at the last op starting by it
    cut = np.maximum(np.searchsorted(op_start, starts, side="right") - 1, 0)
    own_end = np.searchsorted(op_start, last_reads, side="right")
    bounds = np.r_[cut, len(mine)]
    full = code_of([tuple(op_code[a:b].tolist()) for a, b in zip(bounds[:-1], bounds[1:])])
    own = code_of([tuple(op_code[a:max(b, a + 1)].tolist()) for a, b in zip(cut, own_end)])
    span_end = np.array([op_end[a:b].max() if b > a else op_end[a] for a, b in zip(bounds[:-1], bounds[1:])], dtype=np.int64)
    name_code = code_of([str(n) for n in names.tolist()])
    after = [frozenset(name_code[a:b].tolist()) for a, b in zip(own_end, bounds[1:])]
    return full, own, span_end, after, ThreadOps(mine, op_start, op_code, cut, own_end)
