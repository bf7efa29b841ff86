"""The stage table's core on arrays: per stage, its runs of consecutive kernels and the wall
time their union covers (the definitions are in tracekit.analysis.throughput's docstring).
Kept apart from the DataFrames so each step's shares (throughput's per_stage column) come
from slices of arrays built once, not from a groupby and a sort per step (a decode trace has
hundreds of steps, ~50 ms of pandas each)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.trace.timeline import union


def runs(start: np.ndarray, end: np.ndarray, key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first row, last row + 1, last end) of each run of consecutive equal keys (rows in start order)."""
    cut = np.flatnonzero(key[1:] != key[:-1]) + 1
    first, last = np.r_[0, cut], np.r_[cut, len(key)]
    return first, last, np.maximum.reduceat(end, first)


def length(intervals: np.ndarray) -> float:
    """Time covered by (n, 2) intervals, overlaps counted once."""
    merged = union(intervals) if len(intervals) else intervals
    return float((merged[:, 1] - merged[:, 0]).sum()) if len(merged) else 0.0


def stage_walls(rows: np.ndarray, cols: dict[str, np.ndarray], out: dict[str, dict[str, float]]) -> None:
    """Add the kernels `rows` (in table order) of one device to `out`: per stage, kernels, runs
    and wall_ns. `cols`: 'start' (as recorded: the sort key), 'start_f' / 'end_f' (float64),
    'label' (str per kernel), 'key' (int per kernel: equal keys continue a run)."""
    rows = rows[np.argsort(cols["start"][rows], kind="stable")]
    start, labels = cols["start_f"][rows], cols["label"][rows]
    add_runs(out, labels, start, *runs(start, cols["end_f"][rows], cols["key"][rows]))


def add_runs(out: dict[str, dict[str, float]], labels: np.ndarray, start: np.ndarray, first: np.ndarray,
             last: np.ndarray, run_end: np.ndarray) -> None:
    """Add each run (kernels first..last, ending at run_end) to its stage's row in `out`:
    kernels, runs and wall_ns (the union of the stage's runs)."""
    spans: dict[str, list] = {}
    for a, b, e in zip(first, last, run_end):
        row = out.setdefault(labels[a], {"kernels": 0, "busy_ns": 0.0, "wall_ns": 0.0, "runs": 0})
        row["kernels"] += int(b - a)
        row["runs"] += 1
        spans.setdefault(labels[a], []).append((start[a], e))
    for name, found in spans.items():  # runs of one stage on concurrent streams overlap: their union
        out[name]["wall_ns"] += length(np.array(found, dtype=np.float64))


def columns(kernels: pd.DataFrame, stage: str, in_steps: bool) -> dict[str, np.ndarray]:
    """The arrays stage_walls reads, built once for a kernel table. With steps a run also ends
    where the owning step changes."""
    label = kernels[stage].astype(object).fillna("unknown").astype(str).to_numpy()
    key = pd.factorize(label)[0].astype(np.int64)
    if in_steps:
        step = kernels["step"].to_numpy().astype(np.int64)
        key = key * (int(step.max(initial=0)) + 2) + step + 1
    return {"start": kernels["start"].to_numpy(), "start_f": kernels["start"].to_numpy(dtype=np.float64),
            "end_f": kernels["end"].to_numpy(dtype=np.float64), "label": label, "key": key,
            "device": kernels["device"].to_numpy()}


def by_device(rows: np.ndarray, device: np.ndarray) -> list[np.ndarray]:
    """`rows` split by device, devices in order of first appearance (groupby(sort=False))."""
    codes, _ = pd.factorize(device[rows])
    return [rows[codes == c] for c in range(int(codes.max(initial=-1)) + 1)]


def per_step_shares(kernels: pd.DataFrame, owner: np.ndarray, step_rows: list[int | None],
                    windows: np.ndarray) -> list[dict[str, float | None]]:
    """Per step (its range row in `step_rows`, its GPU window in `windows`): each stage's
    share of that window, stages by wall time, longest first, as the stage table of the
    step's kernels alone orders them (pandas' descending sort, ties included)."""
    cols = columns(kernels, "stage", in_steps=True)
    order = np.argsort(owner, kind="stable")  # each step's kernels: one slice, in table order
    wanted = np.array([r if r is not None else -2 for r in step_rows], dtype=np.int64)
    bounds, ends = np.searchsorted(owner[order], wanted), np.searchsorted(owner[order], wanted, "right")
    shares = []
    for i, row in enumerate(step_rows):
        mine = order[bounds[i]:ends[i]] if row is not None and row >= 0 else order[:0]
        if not len(mine):
            shares.append({})
            continue
        out: dict[str, dict[str, float]] = {}
        window, step_window = 0.0, length(np.asarray(windows[i: i + 1], dtype=np.float64))
        for rows in by_device(mine, cols["device"]):
            stage_walls(rows, cols, out)
            window += step_window  # summed per device, as the stage table sums it
        names = list(out)
        walls = np.array([out[n]["wall_ns"] for n in names], dtype=np.float64)
        # pandas' sort_values(ascending=False): argsort of the reversed values, reversed back
        at = np.arange(len(walls))[::-1][walls[::-1].argsort(kind="quicksort")][::-1]
        shares.append({names[j]: (out[names[j]]["wall_ns"] / window if window > 0 else None) for j in at})
    return shares
