"""Stages of a pipeline found from the op sequence alone (a trace without ranges, modules or stack).

A pipeline run is networks one after another: a text encoder that runs once, a denoiser that
runs N times, a decoder that runs once. Its outermost ops on the launching thread, each
written as its name and input shapes, show it: the denoiser's ops repeat with one period (a
forward and the sampler's ops between forwards); the ops before and after the repetition are
the other networks. So, within a window (a step, or the whole capture):

1. the outermost ops of the thread that spends the most time in ops, in start order, each a
   code (name + input shapes);
2. the longest stretch that repeats with one period (two or more times): candidate periods
   are the gaps between consecutive occurrences of one code, the most frequent first; for
   each, the runs of positions where code[i] == code[i + period] (a few mismatches inside a
   run are tolerated: a sampler's last step); the longest stretch wins, the smallest period
   among equal stretches (a period of two forwards covers the same stretch);
3. the repetition is a stage of forwards only if one period holds a network's entry (a token
   embedding, or a convolution that lifts a narrow input, pixels or latents, into many more
   channels: a stem, a patch embedding) and weights (GEMMs or convolutions): a layer's
   repetition inside one forward has no entry;
4. after the repetition, ops that read the same weights in the same order (the shapes of the
   GEMM / convolution weights of one period) are a single forward of the same network (a
   cache refresh, a recompute);
5. what is left before and after is named by what it is: convolutions over most of its ops'
   time: a conv decoder (after) or conv encoder (before); a token embedding and GEMMs: a
   text encoder; other weights: another network; no weights: other.

Each stage spans from its first op's start to the next stage's first op (the host time
between two ops belongs to the stage that was running); the last ends at its last op's end.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.trace.column_text import as_text

# the pipeline's roles in this module's kinds, so readers of either (decoder_frames) see one vocabulary
PIPELINE_KINDS = {"body": "repeated", "same_weights_after": "same_weights", "encoder": "network"}
MAX_PERIODS = 64  # candidate periods tried, most frequent gaps first
MIN_REPEATS = 2
CONV = re.compile(r"^aten::(conv\d?d|convolution|_convolution|conv_transpose\d?d)$")
WEIGHT_OP = re.compile(r"^aten::(linear|addmm|matmul|mm|bmm|conv\d?d|convolution|conv_transpose\d?d)$")
EMBEDDING = re.compile(r"^aten::embedding$")
ENTRY_CHANNELS = 16  # pixels (1, 3, 4 channels) or a latent (4 to 16)
WIDEN = 4
CONV_SHARE = 0.3  # a piece whose convolutions take this much of its ops' time is a conv network


@dataclass(frozen=True)
class Segment:
    start: int  # host ns
    end: int
    name: str  # what the stage is: "repeated forward x8", "text encoder", "conv decoder", ...
    kind: str  # repeated | same_weights | text_encoder | conv_decoder | conv_encoder | network | other
    rows: np.ndarray  # the outermost ops it holds (rows of the ops table)


def outermost_ops(ops: pd.DataFrame, lo: float = -np.inf, hi: float = np.inf) -> np.ndarray:
    """Rows of the ops that no other op on their thread encloses, inside [lo, hi], on the thread
    whose outermost ops take the most time; in start order."""
    if not len(ops):
        return np.zeros(0, dtype=np.int64)
    start, end, tid = ops["start"].to_numpy(), ops["end"].to_numpy(), ops["tid"].to_numpy()
    inside = np.flatnonzero((start >= lo) & (end <= hi))
    if not len(inside):
        return inside
    order = inside[np.lexsort((-end[inside], start[inside], tid[inside]))]
    t, e = tid[order], end[order]
    reach = np.empty(len(order), dtype=np.float64)  # the furthest end of earlier ops on the same thread
    first = np.r_[True, t[1:] != t[:-1]]
    for a, b in zip(np.flatnonzero(first), np.r_[np.flatnonzero(first)[1:], len(order)]):
        reach[a:b] = np.r_[-np.inf, np.maximum.accumulate(e[a:b].astype(np.float64))[:-1]]
    top = order[start[order] >= reach]
    time = pd.Series(end[top] - start[top]).groupby(tid[top]).sum()
    main = time.idxmax()
    top = top[tid[top] == main]
    return top[np.argsort(start[top], kind="stable")]


def _codes(ops: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    names = as_text(ops["name"].iloc[rows]) if len(rows) else []
    dims = ops["input_dims"].to_numpy()[rows]
    return pd.factorize(pd.Series([(n, _hashable(d)) for n, d in zip(names, dims)], dtype=object))[0]


def _hashable(value):
    """Input dims as nested tuples (hashing a tuple is much cheaper than writing the list as text)."""
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    return value


def repetition(codes: np.ndarray) -> tuple[int, int, int] | None:
    """(first position, end position, period) of the longest stretch of `codes` that repeats
    with one period at least MIN_REPEATS times; None when nothing does."""
    n = len(codes)
    if n < 4:
        return None
    order = np.argsort(codes, kind="stable")
    gaps = np.diff(order)[codes[order][1:] == codes[order][:-1]]
    if not len(gaps):
        return None
    values, counts = np.unique(gaps[gaps >= 2], return_counts=True)
    best = None
    for p in values[np.argsort(-counts, kind="stable")][:MAX_PERIODS]:
        p = int(p)
        match = codes[:-p] == codes[p:]
        if match.sum() < p:
            continue  # not one whole period matches: no repetition at this period
        for a, b in _runs(match, tolerance=max(2, p // 20)):
            length = b + p - a
            if length // p < MIN_REPEATS or b - a < p:
                continue
            if best is None or length > best[1] - best[0] or (length == best[1] - best[0] and p < best[2]):
                best = (a, a + (length // p) * p, p)
    return best


def _runs(match: np.ndarray, tolerance: int) -> list[tuple[int, int]]:
    """[start, end) of the runs of True, runs separated by at most `tolerance` False joined."""
    padded = np.r_[False, match, False].astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    first, last = edges[::2], edges[1::2]
    if not len(first):
        return []
    new = np.r_[True, first[1:] - last[:-1] > tolerance]  # a run that starts a joined run
    starts = first[new]
    ends = np.maximum.reduceat(last, np.flatnonzero(new))
    return list(zip(starts.tolist(), ends.tolist()))


def _weights(ops: pd.DataFrame, rows: np.ndarray, names: list[str]) -> list[tuple[int, str]]:
    """(position, weight shape) of the ops among `rows` that read a weight (GEMM, convolution)."""
    dims = ops["input_dims"].to_numpy()
    out = []
    for i, (row, name) in enumerate(zip(rows, names)):
        d = dims[row]
        if WEIGHT_OP.match(name) and isinstance(d, (list, tuple)) and len(d) > 1 and isinstance(d[1], (list, tuple)) and len(d[1]) >= 2:
            out.append((i, str(list(d[1]))))
    return out


def is_entry(name: str, dims) -> bool:
    """An op that starts a network: a token embedding, or a convolution that lifts a narrow
    input (at most ENTRY_CHANNELS channels: pixels, latents) into at least WIDEN x the channels
    (a stem, a patch embedding); a layer's convolution keeps or narrows its width."""
    if EMBEDDING.match(name):
        return True
    if not CONV.match(name) or not isinstance(dims, (list, tuple)) or len(dims) < 2:
        return False
    x, w = dims[0], dims[1]
    if not (isinstance(x, (list, tuple)) and len(x) in (4, 5) and isinstance(w, (list, tuple)) and len(w) == len(x)):
        return False
    return x[1] <= ENTRY_CHANNELS and w[0] >= WIDEN * x[1]


def _has_entry(ops: pd.DataFrame, rows: np.ndarray, names: list[str]) -> bool:
    dims = ops["input_dims"].to_numpy()
    return any(is_entry(name, dims[row]) for row, name in zip(rows, names))


def entry_ops(ops: pd.DataFrame) -> np.ndarray:
    """Mask of the ops that start a network (is_entry)."""
    if not len(ops):
        return np.zeros(0, dtype=bool)
    codes, distinct = pd.factorize(pd.Series(as_text(ops["name"]), dtype=object))
    candidate = np.array([bool(EMBEDDING.match(n) or CONV.match(n)) for n in distinct], dtype=bool)[codes]
    names, dims = np.asarray(distinct, dtype=object)[codes], ops["input_dims"].to_numpy()
    out = np.zeros(len(ops), dtype=bool)
    for i in np.flatnonzero(candidate):
        out[i] = is_entry(str(names[i]), dims[i])
    return out


def _what(ops: pd.DataFrame, rows: np.ndarray, names: list[str], after: bool) -> tuple[str, str]:
    """(kind, name) of a piece that is not the repetition (see the module docstring, 5)."""
    if not len(rows):
        return "other", "other"
    time = (ops["end"].to_numpy()[rows] - ops["start"].to_numpy()[rows]).astype(np.float64)
    conv = np.array([bool(CONV.match(n)) for n in names])
    if time.sum() > 0 and time[conv].sum() >= CONV_SHARE * time.sum():
        return ("conv_decoder", "conv decoder") if after else ("conv_encoder", "conv encoder")
    if not _weights(ops, rows, names):
        return "other", "other"
    if any(EMBEDDING.match(n) for n in names):
        return "text_encoder", "text encoder"
    return "network", "another network"


def segments(ops: pd.DataFrame, lo: float = -np.inf, hi: float = np.inf, outer: np.ndarray | None = None,
             entry: np.ndarray | None = None) -> list[Segment]:
    """The stages inside [lo, hi]: the pipeline's (tracekit.structure.pipeline) where its weight
    reads show a loop, else those of the op sequence (see the module docstring); [] when no
    forward repeats. `outer`, `entry`: outermost_ops(ops) of the whole trace and entry_ops(ops),
    found once by a caller that asks for many windows."""
    found = pipeline_segments(ops, lo, hi)
    if found:
        return found
    if outer is None:
        rows = outermost_ops(ops, lo, hi)
    else:
        start = ops["start"].to_numpy()[outer]
        rows = outer[np.searchsorted(start, lo, side="left"): np.searchsorted(start, hi, side="right")]
        rows = rows[ops["end"].to_numpy()[rows] <= hi]
    if not len(rows):
        return []
    entry = entry_ops(ops) if entry is None else entry
    if entry[rows].sum() < MIN_REPEATS:
        return []  # forwards that repeat start a network at least twice: nothing to look for
    names = as_text(ops["name"].iloc[rows])
    pieces = _pieces(ops, rows, np.array(names, dtype=object), _codes(ops, rows), depth=0)
    start, end = ops["start"].to_numpy(), ops["end"].to_numpy()
    out = []
    for i, (kind, name, x, y) in enumerate(pieces):
        mine = rows[x:y]
        stop = int(start[rows[pieces[i + 1][2]]]) if i + 1 < len(pieces) else int(end[mine].max())
        out.append(Segment(int(start[mine[0]]), stop, name, kind, mine))
    return out


def pipeline_segments(ops: pd.DataFrame, lo: float = -np.inf, hi: float = np.inf) -> list[Segment]:
    """The pipeline's stages inside [lo, hi] as segments; [] where it finds no loop or only one
    stage there."""
    from tracekit.structure.pipeline import find_pipeline, window_stages

    pipeline = find_pipeline(ops)
    if pipeline is None or pipeline.loop is None:
        return []
    stages = window_stages(pipeline, lo, hi)
    if len({s.name for s in stages}) < 2:
        return []
    ops_of = pipeline.calls.ops
    out = []
    for s in stages:
        rows = ops_of.rows[np.searchsorted(ops_of.start, s.start, side="left"):np.searchsorted(ops_of.start, s.end, side="left")]
        out.append(Segment(s.start, s.end, s.name, PIPELINE_KINDS.get(s.kind, s.kind), rows))
    return out


def _pieces(ops, rows, names, codes, depth: int) -> list[tuple[str, str, int, int]]:
    """(kind, name, first, end) positions of the stages among `rows` (see the module docstring).
    A repetition whose period itself holds repeated forwards repeats whole steps (chunks of a
    streaming pipeline): the stages are those of one period, found again in every period."""
    found = repetition(codes)
    if found is None or depth > 2:
        return []
    a, b, p = found
    if not _weights(ops, rows[a:a + p], names[a:a + p]) or not _has_entry(ops, rows[a:a + p], names[a:a + p]):
        return []  # a layer's repetition, not a network's forwards
    inner = _pieces(ops, rows[a:a + p], names[a:a + p], codes[a:a + p], depth + 1)
    if inner:  # each period is a step: its stages, at the same positions in every period
        middle = [(k, n, a + i * p + x, a + i * p + y) for i in range((b - a) // p) for k, n, x, y in inner]
        pieces = _merge(middle)
        same = b
    else:
        pieces = [("repeated", f"repeated forward \u00d7{(b - a) // p}", a, b)]
        same = _same_weights_after(ops, rows, names, a, b, p)
        if same > b:
            pieces.append(("same_weights", "same weights, once after the repeats", b, same))
    if a > 0:
        pieces.insert(0, (*_what(ops, rows[:a], names[:a], after=False), 0, a))
    if len(rows) > max(b, same):
        tail = max(b, same)
        pieces.append((*_what(ops, rows[tail:], names[tail:], after=True), tail, len(rows)))
    return pieces


def _merge(pieces: list[tuple[str, str, int, int]]) -> list[tuple[str, str, int, int]]:
    """Neighbouring pieces of one stage joined (the glue before a period's first stage)."""
    out: list[tuple[str, str, int, int]] = []
    for k, n, x, y in pieces:
        if out and out[-1][1] == n and out[-1][3] == x:
            out[-1] = (k, n, out[-1][2], y)
        else:
            out.append((k, n, x, y))
    return out


def _same_weights_after(ops, rows, names, a: int, b: int, p: int) -> int:
    """End position of ops right after the repetition that read one period's weights in the
    same order (a single forward of the same network); b when none do."""
    unit = [w for _, w in _weights(ops, rows[a:a + p], names[a:a + p])]
    after = _weights(ops, rows[b:], names[b:])
    if len(unit) < 2 or len(after) < len(unit) or [w for _, w in after[: len(unit)]] != unit:
        return b
    return b + after[len(unit) - 1][0] + 1


def decoder_frames(ops: pd.DataFrame, segment: Segment) -> tuple[int, str] | None:
    """(frames, how) the conv decoder `segment` writes: the output of its last convolution, the
    time axis (x batch) of a 5-D output, the images of a 4-D one; None when not computable."""
    if segment.kind != "conv_decoder":
        return None
    start, tid = ops["start"].to_numpy(), ops["tid"].to_numpy()
    thread = tid[segment.rows[0]]
    inside = np.flatnonzero((start >= segment.start) & (start <= segment.end) & (tid == thread))
    names = as_text(ops["name"].iloc[inside]) if len(inside) else []
    conv = [r for r, n in zip(inside, names) if n == "aten::convolution"] or [r for r, n in zip(inside, names) if CONV.match(n)]
    if not conv:
        return None
    last = max(conv, key=lambda r: start[r])
    shape = _conv_output(ops, last)
    if shape is None:
        return None
    if len(shape) == 5:
        return shape[0] * shape[2], f"time axis of the decoder's last convolution output {shape}"
    if len(shape) == 4:
        return shape[0], f"images of the decoder's last convolution output {shape}"
    return None


def _conv_output(ops: pd.DataFrame, row: int) -> list[int] | None:
    from tracekit.costs.conv import output_spatial

    dims, concrete = ops["input_dims"].iat[row], ops["concrete_inputs"].iat[row]
    name = str(ops["name"].iat[row])
    if not (isinstance(dims, (list, tuple)) and len(dims) > 1 and dims[0] and dims[1]) or len(dims[0]) not in (4, 5):
        return None
    inp, w = list(dims[0]), list(dims[1])
    values = [_int_list(v) for v in (concrete or [])]
    transposed = name == "aten::convolution" and len(values) > 6 and str(concrete[6]) == "True"
    stride, padding, dilation = (values[i] if len(values) > i and values[i] is not None else [1 if i != 4 else 0] for i in (3, 4, 5))
    out_pad = values[7] if transposed and len(values) > 7 else None
    spatial = output_spatial(inp[2:], w[2:], stride, padding, dilation, transposed, out_pad)
    out_channels = w[1] if transposed else w[0]
    return [inp[0], out_channels, *spatial]


def _int_list(text) -> list[int] | None:
    try:
        value = json.loads(str(text))
    except ValueError:
        return None
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value] if isinstance(value, list) and all(isinstance(v, int) for v in value) else None
