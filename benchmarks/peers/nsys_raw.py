"""A reference for Nsight Systems exports, which HTA and profile_analysis cannot read: the GPU
activity straight from the SQLite tables (kernels, memcpys, memsets), per device, read with
plain SQL and no tracekit code: count, first start to last end, and the union of the intervals."""

from __future__ import annotations

import sqlite3

import numpy as np

from peers.timeline_side import length, union

TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")


def device_figures(path: str) -> dict[int, dict[str, int]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        present = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        rows = []
        for table in TABLES:
            if table in present:
                rows += con.execute(f"SELECT deviceId, start, end FROM {table}").fetchall()
    finally:
        con.close()
    if not rows:
        return {}
    data = np.array(rows, dtype=np.int64)
    out = {}
    for device in np.unique(data[:, 0]):
        iv = data[data[:, 0] == device][:, 1:]
        out[int(device)] = {"events": len(iv), "window_ns": int(iv[:, 1].max() - iv[:, 0].min()),
                            "busy_ns": length(union(iv))}
    return out
