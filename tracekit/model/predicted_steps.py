"""The steps the model predicts, and the kernels each one owns.

A model step is a step range (tracekit.trace.step_ownership: ProfilerStep#N, decode_step, SGLang step[..])
or a serving annotation that carries a batch (vLLM `execute_..._context_..`). When the two
nest (SGLang writes a vLLM-style range around its step[DECODE ..]), they are one step: the
step range owns the kernels, and every annotation of the nest may describe the batch.
A step owns the kernels launched inside its time window in its process (as tracekit.trace.step_ownership).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.model.batch_annotations import ANNOTATION
from tracekit.trace import Trace

from tracekit.trace.column_text import rows_in
from tracekit.trace.step_ownership import kernel_steps, step_rows


def _host_rows(trace: Trace, mask: np.ndarray) -> np.ndarray:
    return np.flatnonzero(mask & ~rows_in(trace.ranges["domain"], ["python", "gpu"]))


def _step_mask(trace: Trace) -> np.ndarray:
    mask = np.zeros(len(trace.ranges), dtype=bool)
    mask[step_rows(trace)] = True
    return mask


def model_steps(trace: Trace) -> list[tuple[int, list[int]]]:
    """(owning range row, range rows that may describe its batch), in time order."""
    r = trace.ranges
    if r.empty:
        return []
    names = r["name"].astype(str)
    distinct = names.unique()
    annotated = names.isin({n for n in distinct if ANNOTATION.search(n[:512])}).to_numpy()
    steps = _step_mask(trace)
    annotations = _host_rows(trace, annotated)
    parent = r["parent"].to_numpy()

    def chain(row: int) -> list[int]:
        out = []
        while row >= 0:
            out.append(row)
            row = parent[row]
        return out

    step_list = [int(s) for s in _host_rows(trace, steps)]
    nests: dict[int, list[int]] = {s: [s] for s in step_list}
    below: dict[int, list[int]] = {}  # range row -> the steps nested inside it
    for s in step_list:
        for a in chain(s)[1:]:
            below.setdefault(a, []).append(s)
    depth = r["depth"].to_numpy()
    for row in annotations:
        row = int(row)
        owner = next((a for a in chain(row) if a in nests), None)  # a step that encloses it, or itself
        if owner is None and row in below:  # an annotation around a step: the innermost step below it owns
            owner = max(below[row], key=lambda s: depth[s])
        if owner is None:
            nests[row] = [row]
        elif row not in nests[owner]:
            nests[owner].append(row)
    return sorted(nests.items(), key=lambda kv: int(r["start"].iat[kv[0]]))


def kernel_owner(trace: Trace, kernels: pd.DataFrame, step_ranges: list[int], step_of: np.ndarray) -> np.ndarray:
    """Per kernel: the owning range row of its model step (one of `step_ranges`), -1 for none.
    `step_of` is tracekit.trace.step_ownership.kernel_steps; annotations that are not steps
    there take the kernels no step owns, by the same rule (no claim by run time)."""
    owner = step_of.copy()
    known = set(np.unique(owner[owner >= 0]).tolist())
    extra = [row for row in step_ranges if row not in known]
    if not extra or not len(kernels):
        return owner
    free = owner < 0
    owner[free] = kernel_steps(trace, kernels, np.asarray(extra, dtype=np.int64), blind_by_time=False)[free]
    return owner
