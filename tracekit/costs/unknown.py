"""Unknown is not zero: the one rule for sums of costs that only some kernels have.

A figure built from kernels whose costs cover less than half of the time it describes is
not a measurement. Such figures become NaN here (null in JSON, "—" in tables) and the
coverage is reported beside them, so a block with one costed memset among uncosted GEMMs
never shows "0 FLOP at 0.0% of peak".
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.common.format import MIN_COVERAGE



def known_sum(values: pd.Series) -> float:
    """Sum of the known values; NaN (unknown) when none is known, not 0."""
    return values.sum(min_count=1)


def covered(modeled_ns, total_ns) -> np.ndarray:
    """Share of the time that has a cost, NaN where there is no time at all."""
    modeled = np.asarray(modeled_ns, dtype=np.float64)
    total = np.asarray(total_ns, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(total > 0, modeled / np.where(total > 0, total, 1.0), np.nan)


def mask_unknown(frame: pd.DataFrame, coverage: pd.Series | np.ndarray, columns: list[str]) -> pd.DataFrame:
    """Blank `columns` on the rows whose coverage is below MIN_COVERAGE (or unknown)."""
    low = ~(np.asarray(coverage, dtype=np.float64) >= MIN_COVERAGE)
    if not low.any():
        return frame
    frame = frame.copy()
    for column in columns:
        if pd.api.types.is_numeric_dtype(frame[column].dtype):
            frame[column] = frame[column].astype(np.float64).where(~low, np.nan)
        else:
            frame[column] = frame[column].astype(object).where(~low, None)
    return frame


def majority_bound(time_by_bound: dict[str, pd.Series], modeled_ns: pd.Series) -> np.ndarray:
    """A group's bound: the bound (compute, memory, comm) of most of its modeled kernel time;
    None when none of its time has a roofline (a 0 ns block is not "compute")."""
    labels = list(time_by_bound)
    stacked = np.column_stack([np.asarray(time_by_bound[b], dtype=np.float64) for b in labels])
    winner = np.array(labels, dtype=object)[np.argmax(stacked, axis=1)] if len(stacked) else np.array([], dtype=object)
    return np.where(np.asarray(modeled_ns, dtype=np.float64) > 0, winner, None)
