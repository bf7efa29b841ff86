"""Host code behind GPU idle: the Python frames, CPU ops and user/NVTX ranges open on the
launching threads while the GPU sat idle, ranked by the idle time they cover.

For each idle gap (the MAX_GAPS longest, which bounds the work on traces with millions of
gaps; every gap of every trace we have) and each kind
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
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from tracekit.trace.column_text import as_text, rows_where, without_address
from tracekit.trace.step_ownership import SERVING_STEP, STEP

if TYPE_CHECKING:
    from tracekit.analysis.measured import Measured

MAX_GAPS = 20_000  # the longest gaps are charged (all of them in every trace we have); see charges
HOST_COLUMNS = ["kind", "name", "gaps", "idle_ns", "share_of_idle"]
CAUSE_COLUMNS = ["category", "kind", "name", "gaps", "idle_ns"]


@dataclass
class HostRecords:
    """One kind of host record (frames, ops or ranges) on their way to being charged."""
    kind: str
    codes: np.ndarray  # per record: its name's position in `labels`
    labels: np.ndarray  # object array of names (at most 200 characters)
    start: np.ndarray
    end: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
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


def host_records(trace) -> list[HostRecords]:
    """The frames, ops and user ranges of a trace that idle time can be charged to, each
    kind with its records' nearest same-kind ancestors (made once per analysis)."""
    out = []
    tables = []
    if len(trace.ops):
        tables.append(("op", trace.ops, np.ones(len(trace.ops), dtype=bool)))
    r = trace.ranges
    if len(r):
        domain = as_text(r["domain"])
        # every step marker (what step_rows takes on the host, and a serving engine's step
        # annotation beside another step marker too); pipeline calls are frames, not ranges
        is_step = rows_where(r["name"], lambda n: STEP.search(n[:256]) or SERVING_STEP.search(n[:256]))
        tables += [("frame", r, domain == "python"), ("range", r, (domain != "python") & (domain != "gpu") & ~is_step)]
    for kind, table, keep in tables:
        if not keep.any():
            continue
        parent = table["parent"].to_numpy(np.int64) if "parent" in table else np.full(len(table), -1, dtype=np.int64)
        anc = _same_kind_ancestors(parent, keep)
        rows = np.flatnonzero(keep)
        position = np.full(len(table) + 1, -1, dtype=np.int64)
        position[rows] = np.arange(len(rows))
        names = table["name"] if isinstance(table["name"].dtype, pd.CategoricalDtype) else table["name"].astype("category")
        # One label per distinct text (names differing only in an address, or past 200
        # characters, are one name), so charges can group records by their codes.
        text = np.array([without_address(str(c)[:200]) for c in names.cat.categories] + [""], dtype=object)
        labels, code_of = np.unique(text, return_inverse=True)
        codes = names.cat.codes.to_numpy()[rows].astype(np.int64)
        out.append(HostRecords(
            kind=kind, codes=code_of.reshape(-1)[np.where(codes >= 0, codes, len(text) - 1)], labels=labels,
            start=table["start"].to_numpy(np.int64)[rows], end=table["end"].to_numpy(np.int64)[rows],
            pid=table["pid"].to_numpy()[rows], tid=table["tid"].to_numpy()[rows],
            ancestor=position[np.where(anc[rows] >= 0, anc[rows], len(table))]))
    return out


def _launching_threads(a: Measured) -> dict[int, pd.MultiIndex]:
    """Per device: the (pid, tid) pairs of the threads that launched work on it."""
    k = a.kernels
    launch = k["launch"].to_numpy()
    lt = a.trace.launches
    out = {}
    for dev in np.unique(k["device"].to_numpy()):
        rows = launch[(k["device"].to_numpy() == dev) & (launch >= 0)]
        out[int(dev)] = pd.MultiIndex.from_arrays([lt["pid"].to_numpy()[rows], lt["tid"].to_numpy()[rows]]).unique()
    return out


Launching = list[tuple[HostRecords, dict[int, np.ndarray]]]


def launching_records(a: Measured, records: list[HostRecords] | None = None) -> Launching:
    """Per record kind: per device, the mask of its records on the threads that launched work
    on that device (devices with none left out). Made once per analysis: every set of gaps
    (inside the steps, outside their GPU windows) is charged against the same records."""
    trace = a.trace
    if trace is None or not len(trace.launches) or not len(a.kernels):
        return []
    threads_by_device = _launching_threads(a)
    out = []
    for rec in host_records(trace) if records is None else records:
        thread = pd.MultiIndex.from_arrays([rec.pid, rec.tid])
        masks = {dev: mine for dev, threads in threads_by_device.items() if (mine := thread.isin(threads)).any()}
        out.append((rec, masks))
    return out


def charges(a: Measured, gaps: pd.DataFrame, launching: Launching | None = None) -> pd.DataFrame:
    """One row per (gap category, kind, name): the gaps it was charged in and the idle time
    charged to it (CAUSE_COLUMNS). `launching`: launching_records(a), when already made."""
    if not len(gaps):
        return pd.DataFrame(columns=CAUSE_COLUMNS)
    launching = launching_records(a) if launching is None else launching
    # Longest first; equal lengths by device and start, so the gaps kept at the MAX_GAPS cut do
    # not depend on the order the gap table arrived in.
    g = gaps.sort_values(["idle_ns", "device", "start"], ascending=[False, True, True], kind="stable").head(MAX_GAPS)
    categories = pd.Categorical(g["category"].astype(str))
    parts = []
    for which, (rec, masks) in enumerate(launching):
        for dev, mine in masks.items():
            on = (g["device"] == dev).to_numpy()
            if not on.any():
                continue
            part = _charged(rec, mine, g[on], categories.codes[on])
            if part is not None:
                cat, name, n, t = part
                parts.append((cat, np.full(len(cat), which), rec.codes[np.flatnonzero(mine)][name], n, t))
    if not parts:
        return pd.DataFrame(columns=CAUSE_COLUMNS)
    # Summed by integer codes (category, record kind, label): each stands for one text (the
    # kinds of `launching` are distinct, host_records' labels too), so the groups and their
    # sums are those of grouping the texts, at a fraction of the cost of hashing strings.
    cat, which, name, n, t = (np.concatenate(c) for c in zip(*parts))
    summed = pd.DataFrame({"category": cat, "kind": which, "name": name, "gaps": n, "idle_ns": t}).groupby(
        ["category", "kind", "name"], sort=False).agg(gaps=("gaps", "sum"), idle_ns=("idle_ns", "sum")).reset_index()
    which = summed["kind"].to_numpy()
    name = np.empty(len(summed), dtype=object)
    for i, (rec, _) in enumerate(launching):
        name[which == i] = rec.labels[summed["name"].to_numpy()[which == i]]
    out = pd.DataFrame({"category": pd.Series(np.asarray(categories.categories, dtype=object)[summed["category"].to_numpy()], dtype=object),
                        "kind": pd.Series(np.array([rec.kind for rec, _ in launching], dtype=object)[which], dtype=object),
                        "name": pd.Series(name, dtype=object), "gaps": summed["gaps"], "idle_ns": summed["idle_ns"]})
    return out.sort_values(["category", "kind", "name"], kind="stable").reset_index(drop=True)[CAUSE_COLUMNS]


def _charged(rec: HostRecords, mine: np.ndarray, g: pd.DataFrame, category: np.ndarray):
    """Per (gap category, record) of one device's gaps `g` and the records on its launching
    threads (`mine`): (category code, record index in mine, gaps, idle ns charged), or None.

    Every (gap, record) pair that overlaps is enumerated at once: gaps are disjoint, so a
    record overlaps a run of consecutive gaps (sorted by start), found by two binary
    searches. A record's own time in a gap is its overlap minus its same-kind children's."""
    order = np.argsort(g["start"].to_numpy(np.int64), kind="stable")
    gs, ge = g["start"].to_numpy(np.int64)[order], g["end"].to_numpy(np.int64)[order]
    idle, cat = g["idle_ns"].to_numpy(np.float64)[order], category[order]
    rows = np.flatnonzero(mine)
    rs, re = rec.start[rows], rec.end[rows]
    local = np.full(len(rec.start) + 1, -1, dtype=np.int64)
    local[rows] = np.arange(len(rows))
    anc = local[np.where(rec.ancestor[rows] >= 0, rec.ancestor[rows], len(rec.start))]
    lo, hi = np.searchsorted(ge, rs, side="right"), np.searchsorted(gs, re, side="left")
    count = np.clip(hi - lo, 0, None)
    if not count.sum():
        return None
    r = np.repeat(np.arange(len(rows)), count)
    first = np.cumsum(count) - count
    gap = lo[r] + (np.arange(len(r)) - first[r])
    over = (np.minimum(re[r], ge[gap]) - np.maximum(rs[r], gs[gap])).clip(min=0).astype(np.float64)
    # children's overlap, summed onto their parent's (gap, parent) pair: record p's pairs are
    # its gaps lo[p] .. lo[p] + count[p] - 1, at pairs first[p] .. (no search needed)
    child = np.flatnonzero(anc[r] >= 0)
    parent, child_gap = anc[r[child]], gap[child]
    found = (child_gap >= lo[parent]) & (child_gap < lo[parent] + count[parent])
    covered = np.bincount((first[parent] + child_gap - lo[parent])[found], weights=over[child][found], minlength=len(r))
    own = (over - covered).clip(min=0)
    total = np.bincount(gap, weights=own, minlength=len(gs))
    scale = idle / np.maximum((ge - gs).astype(np.float64), total).clip(min=1.0)
    charged = own * scale[gap]
    keep = charged > 0
    slot = cat[gap[keep]].astype(np.int64) * len(rows) + r[keep]
    slots, inverse = np.unique(slot, return_inverse=True)
    return (slots // len(rows), slots % len(rows), np.bincount(inverse, minlength=len(slots)),
            np.bincount(inverse, weights=charged[keep], minlength=len(slots)))


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


# The most specific code first: a Python line, then the CPU op it called, then a user range
# (coarse: DistributedDataParallel.forward, ## backward ##).
SPECIFIC_FIRST = ("frame", "op", "range")
NAMED_SHARE = 0.25  # a record that covers less than this of a cause does not stand for it


def top_by_cause(c: pd.DataFrame, idle_by_cause: dict[str, float]) -> dict[str, dict]:
    """Per gap category: the record that stands for it: the top record of the most specific
    kind (SPECIFIC_FIRST) that covers at least NAMED_SHARE of the category's idle time, else
    the top record of any kind."""
    out = {}
    for category, rows in c.groupby("category", sort=True) if len(c) else ():
        rows = rows.sort_values(["idle_ns", "kind", "name"], ascending=[False, True, True], kind="stable")
        total = idle_by_cause.get(category) or 0.0
        best = rows.iloc[0]
        for kind in SPECIFIC_FIRST:
            mine = rows[rows["kind"] == kind]
            if len(mine) and total and mine.iloc[0]["idle_ns"] >= NAMED_SHARE * total:
                best = mine.iloc[0]
                break
        out[category] = {"kind": best["kind"], "name": best["name"], "idle_ns": float(best["idle_ns"])}
    return out
