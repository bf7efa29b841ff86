"""What repeats in a sequence of integer codes: the tandem repeat that covers the most of it.

A run is a hierarchy of repetitions: layers repeat inside a forward, forwards inside a step,
steps across the trace. Coded as integers (an op's name and input shapes, a GEMM's weight
shape, a kernel's name), each level is a tandem repeat: a unit of `period` codes that occurs
`count` times back to back. The level that covers the most of the sequence is the outermost
one that repeats (the steps: 8 denoise steps cover more ops than the 30 blocks inside one of
them), so it is the one returned; a caller that wants the level inside a unit asks again on
the unit's codes.

Candidate periods come from anchors: a code that occurs once per unit occurs at a fixed
spacing, the period, for as long as the repetition lasts. Each candidate is then checked on
the whole sequence (codes[i] == codes[i + period]) with numpy, so the cost is one vectorised
pass per distinct period tried, and at most MAX_PERIODS are tried.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_PERIODS = 24  # candidate periods checked on the whole sequence, the best-covering anchors first


@dataclass(frozen=True)
class Repeat:
    start: int  # index of the first code of the first unit
    period: int  # codes per unit
    count: int  # units, back to back

    @property
    def covered(self) -> int:
        return self.period * self.count

    def unit_starts(self) -> np.ndarray:
        return self.start + self.period * np.arange(self.count + 1)  # the last one: where the repetition ends


def anchor_periods(codes: np.ndarray) -> list[tuple[int, int]]:
    """(period, anchor coverage) candidates: for every code, each run of equal spacing between
    its consecutive occurrences gives a period that covers spacing x occurrences codes."""
    if len(codes) < 2:
        return []
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    same = sorted_codes[1:] == sorted_codes[:-1]
    gaps = np.diff(order)  # spacing between consecutive occurrences of one code (positions ascend within a code)
    gaps = np.where(same, gaps, 0)
    # runs of one code and one spacing: a change of code or of spacing starts a new run
    edge = np.r_[True, (gaps[1:] != gaps[:-1]) | ~same[1:] | ~same[:-1], True]
    bounds = np.flatnonzero(edge)
    gap, occurrences = gaps[bounds[:-1]], np.diff(bounds) + 1
    keep = gap > 0
    gap, cover = gap[keep], gap[keep] * occurrences[keep]
    if not len(gap):
        return []
    periods, inverse = np.unique(gap, return_inverse=True)
    best = np.zeros(len(periods), dtype=np.int64)
    np.maximum.at(best, inverse, cover)
    order = np.lexsort((periods, -best))[:MAX_PERIODS]
    return [(int(periods[i]), int(best[i])) for i in order]


def repeat_with_period(codes: np.ndarray, period: int, min_count: int = 2) -> Repeat | None:
    """The longest stretch where the sequence repeats itself `period` codes later, as whole
    units (a partial last unit is left out); None when it holds fewer than `min_count`."""
    n = len(codes)
    if period <= 0 or n < 2 * period:
        return None
    equal = codes[:-period] == codes[period:]
    # longest run of True in `equal`: a run of length L means L + period codes repeat
    edges = np.flatnonzero(np.diff(np.r_[0, equal.view(np.int8), 0]))
    if not len(edges):
        return None
    starts, ends = edges[0::2], edges[1::2]
    longest = int(np.argmax(ends - starts))
    start, length = int(starts[longest]), int(ends[longest] - starts[longest]) + period
    count = length // period
    return Repeat(start, period, count) if count >= min_count else None


def outermost_repeat(codes: np.ndarray, min_count: int = 2, min_period: int = 2) -> Repeat | None:
    """The tandem repeat covering the most codes (ties: the shorter unit: a unit of two
    steps covers no more than the steps themselves); None when nothing repeats `min_count` times with a unit of at least
    `min_period` codes (a lone op repeated back to back is a loop inside a layer, not a step)."""
    codes = np.asarray(codes, dtype=np.int64)
    best: Repeat | None = None
    for period, _ in anchor_periods(codes):
        if period < min_period:
            continue
        found = repeat_with_period(codes, period, min_count)
        if found is not None and (best is None or (found.covered, -found.period) > (best.covered, -best.period)):
            best = found
    return best
