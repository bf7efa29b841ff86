"""The sketch of a set of durations that a summary stores: at most SKETCH_POINTS values,
point i being the quantile (i + 0.5) / K of the calls, so each point stands for an equal share
of them (with fewer calls than that, the durations themselves). Made by the analysis (a
kernel's or op's calls), resampled by compare.noise (is a change beyond the noise)."""

from __future__ import annotations

import numpy as np

SKETCH_POINTS = 20


def sketch(durations: np.ndarray, points: int = SKETCH_POINTS) -> list[float]:
    """At most `points` values that stand for equal shares of `durations`."""
    d = np.sort(np.asarray(durations, dtype=np.float64))
    if len(d) > points:
        d = np.quantile(d, (np.arange(points) + 0.5) / points)
    return [round(float(x), 1) for x in d]
