"""Is a change beyond the noise? A bootstrap interval for the ratio new / base of a per-step
or per-call figure, and a verdict: faster, slower, or within noise.

Samples are what one capture holds: each step's duration, or each call's duration. A stored
summary keeps a kernel's or op's calls as a *sketch*: at most SKETCH_POINTS durations, point
i being the quantile (i + 0.5) / K of its calls, so each point stands for an equal share of
them (with fewer calls than that, the durations themselves). A resample of n calls from a
sketch is a multinomial draw over its points, so the cost does not grow with n.

The interval is the 2.5th to 97.5th percentile of the ratio over BOOTSTRAP resamples, with
a fixed seed: the same two runs always give the same verdict. A change is `slower` (or
`faster`) only when the whole interval lies on one side of 1 *and* the change is at least
`min_change` (default 2%): the spread inside one capture understates the spread between
runs (clocks, temperature, neighbours), so a sub-percent change that is statistically clear
is still not a change a person should act on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

BOOTSTRAP = 2000
SEED = 0
DEFAULT_MIN_CHANGE = 0.02
MAX_DRAWS = 1 << 40  # calls drawn per resample of a mean at most (see _resampled)
LEVEL = 0.95

FASTER, SLOWER, WITHIN = "faster", "slower", "within noise"


@dataclass(frozen=True)
class Samples:
    """A distribution of per-step or per-call durations: values, their weights (shares that
    add up to 1), and how many observations they describe."""

    values: np.ndarray
    weights: np.ndarray
    n: int

    @staticmethod
    def exact(values: Sequence[float]) -> "Samples | None":
        v = np.asarray([x for x in values if x is not None], dtype=np.float64)
        v = v[np.isfinite(v)]
        if not len(v):
            return None
        return Samples(v, np.full(len(v), 1.0 / len(v)), len(v))

    @staticmethod
    def sketched(points: Sequence[float] | None, n: int | None) -> "Samples | None":
        """A stored sketch of `n` calls; None when there is none (an older summary)."""
        if not points or not n or n < 1:
            return None
        v = np.asarray([p for p in points if isinstance(p, (int, float)) and not isinstance(p, bool)], dtype=np.float64)
        v = v[np.isfinite(v)]
        if not len(v):
            return None
        return Samples(v, np.full(len(v), 1.0 / len(v)), int(n))

    @staticmethod
    def merged(parts: list["Samples"]) -> "Samples | None":
        """Several kernels taken as one (variants of one kernel): weights by call counts."""
        parts = [p for p in parts if p is not None]
        if not parts:
            return None
        total = sum(p.n for p in parts)
        values = np.concatenate([p.values for p in parts])
        weights = np.concatenate([p.weights * (p.n / total) for p in parts])
        return Samples(values, weights, total)


def _resampled(s: Samples, statistic: str, rng: np.random.Generator) -> np.ndarray:
    if statistic == "mean":
        # The spread of a resampled mean shrinks as 1/sqrt(n): past MAX_DRAWS calls it is below
        # a millionth of the mean, so drawing more changes no verdict (and numpy's multinomial
        # takes at most a 64-bit count: 10**30 calls overflowed).
        n = max(1, min(int(s.n), MAX_DRAWS))
        counts = rng.multinomial(n, s.weights, size=BOOTSTRAP)
        return counts @ s.values / n
    # median: for exact samples (steps); fewer resamples when there are many steps
    rounds = int(min(BOOTSTRAP, max(200, 4_000_000 // max(s.n, 1))))
    draws = rng.choice(s.values, size=(rounds, s.n), replace=True, p=s.weights)
    return np.median(draws, axis=1)


def interval(base: Samples | None, new: Samples | None, statistic: str = "mean") -> tuple[float, float] | None:
    """The 95% bootstrap interval of statistic(new) / statistic(base); None when either
    side is missing or neither side has more than one observation (no spread to measure)."""
    if base is None or new is None or (base.n < 2 and new.n < 2):
        return None
    rng = np.random.default_rng(SEED)
    b, n = _resampled(base, statistic, rng), _resampled(new, statistic, rng)
    ok = b > 0
    if not ok.any():
        return None
    size = min(len(b), len(n))
    b, n, ok = b[:size], n[:size], ok[:size]
    r = n[ok] / b[ok]
    tail = (1 - LEVEL) / 2
    lo, hi = np.quantile(r, [tail, 1 - tail])
    return float(lo), float(hi)


def verdict(ratio: float | None, bounds: tuple[float, float] | None, min_change: float = DEFAULT_MIN_CHANGE) -> str | None:
    """faster / slower / within noise for a time ratio new / base; None without an interval."""
    if ratio is None or bounds is None:
        return None
    lo, hi = bounds
    if lo > 1 and ratio - 1 >= min_change:
        return SLOWER
    if hi < 1 and 1 - ratio >= min_change:
        return FASTER
    return WITHIN


def compare(base: Samples | None, new: Samples | None, point: float | None, statistic: str = "mean",
            min_change: float = DEFAULT_MIN_CHANGE) -> dict:
    """The interval and verdict of a ratio `point` (new / base) as JSON-ready fields."""
    bounds = interval(base, new, statistic)
    return {"interval": list(bounds) if bounds else None, "verdict": verdict(point, bounds, min_change),
            "samples": [base.n if base else 0, new.n if new else 0]}
