"""Host code behind GPU idle: the Python frames, CPU ops and user/NVTX ranges open on the
launching threads while the GPU sat idle, ranked by the idle time they cover.

For each of the longest idle gaps (MAX_GAPS; they hold nearly all idle time) and each kind
of host record (frame, op, range), every record open during the gap on a thread that
launches work on that device is charged with its *own* time inside the gap: its overlap
with the gap minus what its children of the same kind cover (self time, as a profiler's
flat view counts it). So a compiler range open across a 350 ms gap is charged 350 ms even
when a 3 µs call runs inside it, and the outer records are charged only where nothing
deeper was open. Where several threads were busy at once, a gap's charges are scaled so
that they never add up to more than the gap. Step ranges (ProfilerStep#N, serving steps)
are markers, not code: they are not charged. HTA gives categories; this names the code.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.trace.column_text import as_text
from tracekit.trace.step_ownership import SERVING_STEP, STEP, step_rows

MAX_GAPS = 200
HOST_COLUMNS = ["kind", "name", "gaps", "idle_ns", "share_of_idle"]
CAUSE_COLUMNS = ["category", "kind", "name", "gaps", "idle_ns"]


@dataclass
class _Records:
    kind: str
    names: np.ndarray  # object array of text
    start: np.ndarray
    end: np.ndarray
    thread: list[tuple[int, int]]
    ancestor: np.ndarray  # index (in these records) of the nearest enclosing record of the same kind, -1 for none


def _same_kind_ancestors(parent: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """For each row of a table, its nearest ancestor among the `keep` rows (-1 for none):
    parents are followed through rows of other kinds (a user range inside a Python frame)."""
    anc = parent.astype(np.int64).copy()
    for _ in range(256):  # deeper stacks than this are cut (the parser bounds depth too)
        walk = (anc >= 0) & ~keep[np.maximum(anc, 0)]
        if not walk.any():
            break
        anc[walk] = parent[anc[walk]]
    return anc


def _records(trace) -> list[_Records]:
    out = []
    tables = []
    if len(trace.ops):
        tables.append(("op", trace.ops, np.ones(len(trace.ops), dtype=bool)))
    r = trace.ranges
    if len(r):
        domain = as_text(r["domain"])
        is_step = np.zeros(len(r), dtype=bool)
        is_step[step_rows(trace)] = True
        # a serving engine's step annotation beside another step marker is a step too
        names = r["name"].astype("category")
        marker = np.array([bool(STEP.search(str(n)[:256]) or SERVING_STEP.search(str(n)[:256])) for n in names.cat.categories] + [False])
        is_step |= marker[names.cat.codes.to_numpy()]
        tables += [("frame", r, domain == "python"), ("range", r, (domain != "python") & (domain != "gpu") & ~is_step)]
    for kind, table, keep in tables:
        if not keep.any():
            continue
        parent = table["parent"].to_numpy(np.int64) if "parent" in table else np.full(len(table), -1, dtype=np.int64)
        anc = _same_kind_ancestors(parent, keep)
        rows = np.flatnonzero(keep)
        position = np.full(len(table) + 1, -1, dtype=np.int64)
        position[rows] = np.arange(len(rows))
        out.append(_Records(
            kind=kind, names=as_text(table["name"])[rows],
            start=table["start"].to_numpy(np.int64)[rows], end=table["end"].to_numpy(np.int64)[rows],
            thread=list(zip(table["pid"].to_numpy()[rows].tolist(), table["tid"].to_numpy()[rows].tolist())),
            ancestor=position[np.where(anc[rows] >= 0, anc[rows], len(table))]))
    return out


def _launching_threads(a) -> dict[int, set]:
    k = a.kernels
    launch = k["launch"].to_numpy()
    lt = a.trace.launches
    out = {}
    for dev in np.unique(k["device"].to_numpy()):
        rows = launch[(k["device"].to_numpy() == dev) & (launch >= 0)]
        out[int(dev)] = set(zip(lt["pid"].to_numpy()[rows].tolist(), lt["tid"].to_numpy()[rows].tolist()))
    return out


def charges(a, gaps: pd.DataFrame) -> pd.DataFrame:
    """One row per (gap category, kind, name): the gaps it was charged in and the idle time
    charged to it (CAUSE_COLUMNS)."""
    trace = a.trace
    if trace is None or not len(gaps) or not len(trace.launches) or not len(a.kernels):
        return pd.DataFrame(columns=CAUSE_COLUMNS)
    threads_by_device = _launching_threads(a)
    # Longest first; equal lengths by device and start, so the gaps kept at the MAX_GAPS cut do
    # not depend on the order the gap table arrived in.
    g = gaps.sort_values(["idle_ns", "device", "start"], ascending=[False, True, True], kind="stable").head(MAX_GAPS)
    charged: dict[tuple[str, str, str], list[float]] = {}
    for rec in _records(trace):
        for dev, threads in threads_by_device.items():
            mine = np.array([t in threads for t in rec.thread], dtype=bool)
            if not mine.any():
                continue
            start, end, names, anc = rec.start[mine], rec.end[mine], rec.names[mine], rec.ancestor[mine]
            # ancestors re-indexed into the `mine` subset (an ancestor on another thread cannot enclose)
            local = np.full(len(rec.start) + 1, -1, dtype=np.int64)
            local[np.flatnonzero(mine)] = np.arange(int(mine.sum()))
            anc = local[np.where(anc >= 0, anc, len(rec.start))]
            for gap in g[g["device"] == dev].itertuples():
                length = gap.end - gap.start
                if length <= 0:
                    continue
                over = (np.minimum(end, gap.end) - np.maximum(start, gap.start)).clip(min=0).astype(np.float64)
                hit = np.flatnonzero(over > 0)
                if not len(hit):
                    continue
                inside = hit[anc[hit] >= 0]
                covered = np.bincount(anc[inside], weights=over[inside], minlength=len(over)) if len(inside) else np.zeros(len(over))
                own = (over[hit] - covered[hit]).clip(min=0)
                total = own.sum()
                if total <= 0:
                    continue
                scale = gap.idle_ns / max(float(length), float(total))
                for i in np.flatnonzero(own > 0):
                    slot = charged.setdefault((gap.category, rec.kind, str(names[hit[i]])[:200]), [0, 0.0])
                    slot[0] += 1
                    slot[1] += own[i] * scale
    rows = [{"category": cat, "kind": kind, "name": name, "gaps": n, "idle_ns": t} for (cat, kind, name), (n, t) in charged.items()]
    return pd.DataFrame(rows, columns=CAUSE_COLUMNS)


def host_behind_idle(c: pd.DataFrame, gaps: pd.DataFrame, top: int = 15) -> pd.DataFrame:
    """The host code behind all idle gaps, from `charges`: ranked by idle time, with its share
    of all idle time (HOST_COLUMNS). Each kind is charged on its own, so a frame and the op
    inside it can both cover the same idle time."""
    total = float(gaps["idle_ns"].sum()) if len(gaps) else 0.0
    if not len(c):
        return pd.DataFrame(columns=HOST_COLUMNS)
    out = c.groupby(["kind", "name"], sort=True).agg(gaps=("gaps", "sum"), idle_ns=("idle_ns", "sum")).reset_index()
    out["share_of_idle"] = out["idle_ns"] / total if total else np.nan
    return out.sort_values("idle_ns", ascending=False, kind="stable").head(top).reset_index(drop=True)[HOST_COLUMNS]


def top_by_cause(c: pd.DataFrame) -> dict[str, dict]:
    """Per gap category: the one record most behind it (kind, name, idle_ns)."""
    if not len(c):
        return {}
    best = c.sort_values(["idle_ns", "kind", "name"], ascending=[False, True, True], kind="stable").drop_duplicates("category")
    return {r["category"]: {"kind": r["kind"], "name": r["name"], "idle_ns": float(r["idle_ns"])} for r in best.to_dict(orient="records")}
