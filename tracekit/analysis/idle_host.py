"""Host code behind GPU idle: the Python frames, CPU ops and user/NVTX ranges open on the
launching threads while the GPU sat idle, ranked by the idle time they cover.

For each of the longest idle gaps (MAX_GAPS; they hold nearly all idle time), and for each
kind of host record (frame, op, range), the innermost record (deepest) overlapping the gap on
a thread that launches work on that device is charged with the idle time it overlaps. HTA
gives categories; this names the code.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.trace.column_text import as_text

MAX_GAPS = 200
HOST_COLUMNS = ["kind", "name", "gaps", "idle_ns", "share_of_idle"]


def _records(trace) -> list[tuple[str, pd.DataFrame]]:
    out = [("op", trace.ops)] if len(trace.ops) else []
    r = trace.ranges
    if len(r):
        domain = as_text(r["domain"])
        out += [("frame", r[domain == "python"]), ("range", r[(domain != "python") & (domain != "gpu")])]
    return out


def host_behind_idle(a, gaps: pd.DataFrame, top: int = 15) -> pd.DataFrame:
    trace = a.trace
    if trace is None or not len(gaps) or not len(trace.launches):
        return pd.DataFrame(columns=HOST_COLUMNS)
    k = a.kernels
    launch = k["launch"].to_numpy()
    lt = trace.launches
    threads_by_device = {}
    for dev in np.unique(k["device"].to_numpy()):
        rows = launch[(k["device"].to_numpy() == dev) & (launch >= 0)]
        threads_by_device[int(dev)] = set(zip(lt["pid"].to_numpy()[rows].tolist(), lt["tid"].to_numpy()[rows].tolist()))
    total = float(gaps["idle_ns"].sum())
    # Longest first; equal lengths by device and start, so the gaps kept at the MAX_GAPS cut do
    # not depend on the order the gap table arrived in (a quicksort tie-break did, before).
    g = gaps.sort_values(["idle_ns", "device", "start"], ascending=[False, True, True], kind="stable").head(MAX_GAPS)
    charged: dict[tuple[str, str], list[float]] = {}
    for kind, table in _records(trace):
        if not len(table):
            continue
        names = as_text(table["name"])
        start, end = table["start"].to_numpy(np.int64), table["end"].to_numpy(np.int64)
        depth = table["depth"].to_numpy() if "depth" in table else np.zeros(len(table))
        thread = list(zip(table["pid"].to_numpy().tolist(), table["tid"].to_numpy().tolist()))
        for dev in threads_by_device:
            mine = np.array([t in threads_by_device[dev] for t in thread], dtype=bool)
            if not mine.any():
                continue
            for gap in g[g["device"] == dev].itertuples():
                length = gap.end - gap.start
                over = np.minimum(end, gap.end) - np.maximum(start, gap.start)
                hit = np.flatnonzero(mine & (over > 0))
                if not len(hit) or length <= 0:
                    continue
                inner = hit[depth[hit] == depth[hit].max()]
                best = inner[np.argmax(over[inner])]
                slot = charged.setdefault((kind, str(names[best])[:200]), [0, 0.0])
                slot[0] += 1
                slot[1] += gap.idle_ns * float(over[best]) / length
    rows = [{"kind": kind, "name": name, "gaps": n, "idle_ns": t, "share_of_idle": t / total if total else np.nan}
            for (kind, name), (n, t) in charged.items()]
    out = pd.DataFrame(rows, columns=HOST_COLUMNS)
    return out.sort_values("idle_ns", ascending=False, kind="stable").head(top).reset_index(drop=True)
