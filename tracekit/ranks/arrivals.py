"""The collectives of a multi-rank job, matched across ranks: who arrives last, by how much,
who waits for whom, and the bus bandwidth each rank saw.

A collective kernel starts on a rank when that rank reaches the collective; it cannot finish
before the last rank has reached it too, so the ranks that arrive early spend the gap inside
the kernel, waiting. For one collective instance (the same call on every rank: the k-th
collective of its type and process group) the rank whose kernel starts last is the one the
others wait for. Across instances, the rank that is late most often and by the most time is
the straggler; the waiting of the others (exposed communication) is its effect, not a sign
that they are slow.

Start times are put on one clock with each rank's absolute trace origin; without it nothing
here can be computed, and the tables stay empty.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

INSTANCE_KEY = ["collective", "group", "instance"]
SKEW_COLUMNS = ["collective", "group", "instance", "ranks", "skew_ns", "first_rank", "last_rank", "message_bytes"]
ARRIVAL_COLUMNS = ["rank", "instances", "last_count", "late_ns", "mean_late_ns", "wait_ns", "caused_wait_ns"]
BUSBW_COLUMNS = ["collective", "group", "message_bytes", "instances", "ranks", "busbw_min_gbps", "busbw_median_gbps",
                 "busbw_max_gbps", "min_rank", "max_rank"]


def matched_collectives(results, shared_only: bool = True) -> pd.DataFrame:
    """One row per collective kernel per rank, with its instance number and its start on
    the common clock (ns after the earliest start); only instances that more than one rank
    took part in, unless `shared_only` is False."""
    frames = []
    for r in results:
        c = r.analysis.collectives
        if c is None or c.empty or r.origin_abs_ns is None:
            continue
        c = c[c["collective"].notna()].sort_values("start", kind="stable")
        group = c["group"].fillna("").astype(str)
        frames.append(pd.DataFrame({
            "rank": r.rank, "collective": c["collective"].to_numpy(), "group": group.to_numpy(),
            "instance": c.groupby([c["collective"], group]).cumcount().to_numpy(),
            "abs_start": c["start"].to_numpy(dtype=np.int64) + int(r.origin_abs_ns),
            "duration_ns": c["duration_ns"].to_numpy(dtype=np.int64),
            "message_bytes": c["message_bytes"].to_numpy(dtype=np.float64),
            "busbw_gbps": c["busbw_gbps"].to_numpy(dtype=np.float64),
        }))
    if len(frames) < 2:
        return pd.DataFrame(columns=["rank", *INSTANCE_KEY, "abs_start", "duration_ns", "message_bytes", "busbw_gbps"])
    rows = pd.concat(frames, ignore_index=True)
    # Nanoseconds since 1970 need 61 bits; a median in float64 would round them to 256 ns.
    # From the earliest start on, the medians are exact to the nanosecond.
    rows["abs_start"] -= rows["abs_start"].min()
    if not shared_only:
        return rows
    ranks_in = rows.groupby(INSTANCE_KEY)["rank"].transform("nunique")
    return rows[ranks_in > 1].reset_index(drop=True)


def unequal_counts(rows: pd.DataFrame) -> list[str]:
    """Collective types (and groups) that the ranks hold different numbers of: instances are
    matched by order, so past the first missing one the matching may pair different calls."""
    if rows.empty:
        return []
    per_rank = rows.groupby(["collective", "group", "rank"]).size()
    spread = per_rank.groupby(level=["collective", "group"]).agg(["min", "max"])
    odd = spread[spread["min"] != spread["max"]]
    return [f"{kind}{f' ({group})' if group else ''}: {lo} to {hi} per rank" for (kind, group), (lo, hi) in odd.iterrows()]


def collective_skew(rows: pd.DataFrame) -> pd.DataFrame:
    """Per instance: how many ranks, the spread of their start times, the first and the last."""
    if rows.empty:
        return pd.DataFrame(columns=SKEW_COLUMNS)
    g = rows.groupby(INSTANCE_KEY)
    out = g.agg(ranks=("rank", "nunique"), first=("abs_start", "min"), last=("abs_start", "max"),
                message_bytes=("message_bytes", "max")).reset_index()
    first = rows.loc[g["abs_start"].idxmin(), [*INSTANCE_KEY, "rank"]].rename(columns={"rank": "first_rank"})
    last = rows.loc[g["abs_start"].idxmax(), [*INSTANCE_KEY, "rank"]].rename(columns={"rank": "last_rank"})
    out = out.merge(first, on=INSTANCE_KEY).merge(last, on=INSTANCE_KEY)
    out["skew_ns"] = out["last"] - out["first"]
    return out[SKEW_COLUMNS].sort_values("skew_ns", ascending=False, kind="stable").reset_index(drop=True)


def arrival_table(rows: pd.DataFrame, ranks: list[int]) -> pd.DataFrame:
    """Per rank, over the instances it took part in: how often it started last; how late it
    was (the sum of its start minus the instance's median start, where positive); how long
    it waited for the last rank (last start minus its own start); and the waiting it caused:
    all ranks' waits at the instances where it came last."""
    if rows.empty:
        return pd.DataFrame({"rank": ranks, **{c: np.nan for c in ARRIVAL_COLUMNS[1:]}}, columns=ARRIVAL_COLUMNS)
    g = rows.groupby(INSTANCE_KEY)["abs_start"]
    rows = rows.assign(
        late=np.maximum(rows["abs_start"] - g.transform("median"), 0.0),
        wait=g.transform("max") - rows["abs_start"],
        is_last=False,
    )
    last_rows = g.idxmax()  # one last rank per instance (the first of any tie)
    rows.loc[last_rows, "is_last"] = True
    caused = pd.Series(rows.groupby(INSTANCE_KEY)["wait"].sum().to_numpy(), index=rows.loc[last_rows, "rank"].to_numpy())
    per = rows.groupby("rank").agg(instances=("instance", "size"), last_count=("is_last", "sum"), late_ns=("late", "sum"),
                                   wait_ns=("wait", "sum"))
    per["caused_wait_ns"] = caused.groupby(level=0).sum().reindex(per.index).fillna(0.0)
    per["mean_late_ns"] = per["late_ns"] / per["instances"]
    per = per.reindex(ranks)
    per.index.name = "rank"
    return per.reset_index()[ARRIVAL_COLUMNS]


def busbw_spread(rows: pd.DataFrame) -> pd.DataFrame:
    """Per collective type, group and message size: each rank's bus bandwidth (its total
    bytes over its total kernel time, x the type's bus factor), then min / median / max over
    the ranks. A rank that arrives early waits inside the kernel, so its busbw reads low;
    the max is closest to what the links delivered."""
    sized = rows[rows["message_bytes"].notna() & rows["busbw_gbps"].notna()]
    if sized.empty:
        return pd.DataFrame(columns=BUSBW_COLUMNS)
    # busbw x time = factor x bytes: summing it and dividing by the summed time gives the
    # time-weighted busbw of the rank's instances of this size.
    per_rank = sized.assign(weighted=sized["busbw_gbps"] * sized["duration_ns"]).groupby(
        ["collective", "group", "message_bytes", "rank"]).agg(
        instances=("instance", "size"), weighted=("weighted", "sum"), time=("duration_ns", "sum")).reset_index()
    per_rank = per_rank[per_rank["time"] > 0]
    per_rank["busbw"] = per_rank["weighted"] / per_rank["time"]
    out = []
    for (kind, group, size), part in per_rank.groupby(["collective", "group", "message_bytes"], sort=False):
        part = part.sort_values(["busbw", "rank"], kind="stable")
        out.append({"collective": kind, "group": group, "message_bytes": size, "instances": int(part["instances"].max()),
                    "ranks": len(part), "busbw_min_gbps": float(part["busbw"].iloc[0]),
                    "busbw_median_gbps": float(part["busbw"].median()), "busbw_max_gbps": float(part["busbw"].iloc[-1]),
                    "min_rank": int(part["rank"].iloc[0]), "max_rank": int(part["rank"].iloc[-1])})
    return pd.DataFrame(out, columns=BUSBW_COLUMNS).sort_values(["collective", "message_bytes"]).reset_index(drop=True)
