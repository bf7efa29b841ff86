"""Replay a measured GPU timeline with new kernel durations, the host timeline unchanged.

Per (device, stream), in the measured order:

    queued kernel   (launched while its predecessor still ran):   start' = end'(prev) + measured gap
    host-bound one  (the stream was idle when it was launched):    start' = max(start, end'(prev))

and with the host timeline at `pace` of its measured speed (the range's other machine:
tracekit.projection.ranges.HOST) a host-bound kernel starts at t0 + (start − t0) · pace, t0
the stream's first kernel. So a kernel never starts before the host launched it (launch overhead and host-bound gaps do
not move with the GPU), and a slower GPU queues work that a faster one ran at once. Kernels
without a launch event count as queued when they started within QUEUE_GAP_NS of their
predecessor. Dependencies across streams are not modelled (each stream replays alone).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

QUEUE_GAP_NS = 5_000  # no launch seen: a kernel this close behind its predecessor was waiting for it


def launch_starts(kernels: pd.DataFrame, launches: pd.DataFrame | None) -> np.ndarray:
    """Per kernel: when the host launched it (ns), -1 where the trace has no launch for it."""
    launch = kernels["launch"].to_numpy()
    out = np.full(len(kernels), -1, dtype=np.int64)
    if launches is not None and len(launches):
        has = launch >= 0
        out[has] = launches["start"].to_numpy()[launch[has]]
    return out


def replay(kernels: pd.DataFrame, launched: np.ndarray, new_duration: np.ndarray, pace: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(start', end') per kernel row for durations `new_duration` (ns, float), the host at `pace`."""
    start = kernels["start"].to_numpy(dtype=np.int64)
    end = kernels["end"].to_numpy(dtype=np.int64)
    new_start = start.astype(np.float64).copy()
    streams = kernels["device"].astype(np.int64).to_numpy() * (1 << 32) + kernels["stream"].fillna(-1).astype(np.int64).to_numpy()
    order = np.lexsort((end, start, streams))
    s_sorted = streams[order]
    cut = np.flatnonzero(np.diff(s_sorted)) + 1
    for rows in np.split(order, cut):
        st, en, la, du = start[rows].tolist(), end[rows].tolist(), launched[rows].tolist(), new_duration[rows].tolist()
        out_s = [0.0] * len(rows)
        prev_end, prev_new_end = None, None
        for i in range(len(rows)):
            if prev_end is None:
                s_new = float(st[i])
            else:
                gap = st[i] - prev_end
                queued = (la[i] < prev_end) if la[i] >= 0 else (gap <= QUEUE_GAP_NS)
                s_new = prev_new_end + max(gap, 0) if queued else max(st[0] + (st[i] - st[0]) * pace, prev_new_end)
            out_s[i] = s_new
            e_new = s_new + du[i]
            if prev_end is None or en[i] >= prev_end:  # a kernel inside its predecessor's span leaves the tail as it was
                prev_end, prev_new_end = en[i], e_new
            else:
                prev_new_end = max(prev_new_end, e_new)
        new_start[rows] = out_s
    return new_start, new_start + new_duration
