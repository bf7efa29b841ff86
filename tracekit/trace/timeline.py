"""Busy and idle time per device, with overlapping streams counted once.

Each GPU activity gets an exclusive share of time, by a documented priority (TIERS):
time covered by compute kernels belongs to compute; copies and memsets keep what compute
does not cover; communication kernels keep only the time nothing else covers (their
exposed time: a collective that spins while it waits for its peers is waiting, not
working). Within a tier, the part of an interval that an earlier-starting activity of the
same tier already covers goes to that one. Exclusive times add up to the union of busy
intervals, so per device: sum(exclusive) + idle = span, exactly.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

# Priority of the time two activities share: lower tier wins.
TIERS = {"compute": 0, "copy": 1, "comm": 2}


def activity_tiers(kind: np.ndarray, is_comm: np.ndarray) -> np.ndarray:
    """Per activity: its tier (TIERS) from its kind (kernel / memcpy / memset) and whether
    it is a communication kernel."""
    kind = np.asarray(kind).astype(str)
    return np.where(kind != "kernel", TIERS["copy"], np.where(np.asarray(is_comm, dtype=bool), TIERS["comm"], TIERS["compute"]))


def exclusive_time(kernels: pd.DataFrame, tiers: np.ndarray | None = None) -> np.ndarray:
    """Per activity: the time it alone is charged with (see the module docstring). Without
    `tiers` every activity is one tier (the earliest-starting one takes shared time)."""
    out = np.zeros(len(kernels), dtype=np.int64)
    start, end = kernels["start"].to_numpy(np.int64), kernels["end"].to_numpy(np.int64)
    tiers = np.zeros(len(kernels), dtype=np.int64) if tiers is None else np.asarray(tiers, dtype=np.int64)
    device_of = kernels["device"].to_numpy()
    for device in np.unique(device_of) if len(kernels) else ():
        on = device_of == device
        above = np.zeros((0, 2), dtype=np.int64)  # union of the higher-priority tiers on this device
        for tier in np.unique(tiers[on]):
            rows = np.flatnonzero(on & (tiers == tier))
            rows = rows[np.lexsort((end[rows], start[rows]))]
            s, e = start[rows], end[rows]
            # the furthest end reached by any activity of this tier that started before this one
            covered = np.maximum.accumulate(np.r_[s[0], e[:-1]])
            lo = np.maximum(s, covered)
            own = np.clip(e - lo, 0, None)
            if len(above):
                own = own - _covered_between(above, lo, np.maximum(lo, e))
            out[rows] = own
            above = union(np.r_[above, np.column_stack([s, e])])
    return out


def _covered_between(merged: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per [lo, hi): the length of it that the merged intervals cover."""
    return covered_before(merged, hi) - covered_before(merged, lo)


DEVICE_COLUMNS = ["device", "active_start_ns", "active_ns", "busy_ns", "idle_ns", "span_ns", "idle_span_ns", "kernel_time_ns",
                  "copies_time_ns", "overlap_ns"]


def device_time(kernels: pd.DataFrame, exclusive: np.ndarray, span_ns: int) -> pd.DataFrame:
    """Per device: busy (union of activity); idle within the GPU-active window (first to last
    GPU activity on the device: what HTA and TraceLens call idle, and what a user can act on);
    and idle over the whole capture span, which also counts host time before the first and
    after the last kernel (model loading, warm-up on the CPU). busy + idle_span = span.
    `kernel_time_ns` sums kernels only, `copies_time_ns` memcpy and memset; `overlap_ns` is
    the time two or more activities ran at once (their sum minus busy)."""
    if not len(kernels):
        return pd.DataFrame(columns=DEVICE_COLUMNS)
    # per device (sorted), with integer sums, minima and maxima: exact in any order
    devices, device = np.unique(kernels["device"].to_numpy(), return_inverse=True)
    device = device.reshape(-1)
    start, end = kernels["start"].to_numpy(np.int64), kernels["end"].to_numpy(np.int64)
    is_kernel = (kernels["kind"] == "kernel").to_numpy() if "kind" in kernels else np.ones(len(kernels), dtype=bool)
    active_start = np.full(len(devices), np.iinfo(np.int64).max)
    active_end = np.full(len(devices), np.iinfo(np.int64).min)
    np.minimum.at(active_start, device, start)
    np.maximum.at(active_end, device, end)
    per = pd.DataFrame({
        "device": devices, "busy_ns": _int_sums(device, exclusive, len(devices)),
        "kernel_time_ns": _int_sums(device, np.where(is_kernel, end - start, 0), len(devices)),
        "copies_time_ns": _int_sums(device, np.where(is_kernel, 0, end - start), len(devices)), "active_start_ns": active_start, "active_end": active_end,
    })
    per["active_ns"] = per["active_end"] - per["active_start_ns"]
    per["idle_ns"] = per["active_ns"] - per["busy_ns"]
    per["span_ns"] = span_ns
    per["idle_span_ns"] = span_ns - per["busy_ns"]
    per["overlap_ns"] = per["kernel_time_ns"] + per["copies_time_ns"] - per["busy_ns"]
    return per[DEVICE_COLUMNS]


def _int_sums(group: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, group, np.asarray(values, dtype=np.int64))
    return out


# -- GPU idle time, split by its cause (in the style of HolisticTraceAnalysis' idle-time breakdown)

IDLE_CATEGORIES = ("host_wait", "sync", "queued", "other")
# A gap is "queued" when the work that ends it was launched at least this long before it
# started, and for at least half of the gap: it sat behind other work (an event wait,
# another stream), not behind the host.
QUEUED_MIN_NS = 50_000


def union(intervals: np.ndarray) -> np.ndarray:
    """Sorted, merged [start, end) intervals of an (n, 2) array."""
    if not len(intervals):
        return np.zeros((0, 2), dtype=np.int64)
    iv = intervals[np.argsort(intervals[:, 0], kind="stable")]
    ends = np.maximum.accumulate(iv[:, 1])
    new = np.r_[True, iv[1:, 0] > ends[:-1]]
    return np.column_stack([iv[new, 0], np.maximum.reduceat(iv[:, 1], np.flatnonzero(new))])


def difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Merged [start, end) intervals of a minus those of b."""
    a, b = union(np.asarray(a, dtype=np.int64).reshape(-1, 2)), union(np.asarray(b, dtype=np.int64).reshape(-1, 2))
    if not len(a) or not len(b):
        return a
    points = np.unique(np.r_[a.ravel(), b.ravel()])
    lo, hi = points[:-1], points[1:]
    mid = lo + (hi - lo) // 2

    def inside(iv):  # whether each elementary segment lies in the merged intervals iv
        i = np.searchsorted(iv[:, 0], mid, side="right") - 1
        return (i >= 0) & (mid < iv[np.maximum(i, 0), 1])

    keep = inside(a) & ~inside(b) & (hi > lo)
    return union(np.column_stack([lo[keep], hi[keep]]))


def intersection(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Merged [start, end) intervals covered by both a and b."""
    return difference(a, difference(a, b))


def covered_before(window: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Length of the (merged) window intervals that lies before each time t."""
    if not len(window):
        return np.zeros(len(t), dtype=np.int64)
    lengths = np.r_[0, np.cumsum(window[:, 1] - window[:, 0])]
    i = np.searchsorted(window[:, 0], t, side="right")  # windows starting at or before t
    inside = np.clip(t - window[np.maximum(i - 1, 0), 0], 0, None)
    inside = np.minimum(inside, window[np.maximum(i - 1, 0), 1] - window[np.maximum(i - 1, 0), 0])
    return np.where(i > 0, lengths[np.maximum(i - 1, 0)] + inside, 0)


def idle_gaps(kernels: pd.DataFrame, launch_start: np.ndarray, sync_calls: np.ndarray,
              windows: dict[int, np.ndarray], launch_end: np.ndarray | None = None) -> pd.DataFrame:
    """Every stretch in which a device runs nothing (all its streams idle), clipped to the
    window in which idleness counts (the steps), and why the GPU waited, in this order:

      sync       the host sat in a synchronising call (cudaDeviceSynchronize, hipStreamSynchronize,
                 a blocking cudaMemcpy / hipMemcpyWithStream, ...) for at least half of the gap,
                 and the closing activity was submitted after the gap opened or was queued:
                 only the time the call is in progress counts, not a call that merely returns
                 in it;
      queued     a gap of QUEUED_MIN_NS or more whose closing activity had been submitted well
                 before it started (its launch call had returned at least QUEUED_MIN_NS and
                 half the gap before): the work was there but did not start, with nothing
                 running on the device (an event wait on other work, a graph's launch latency);
      host_wait  the closing activity was submitted after the gap opened (its launch call was
                 still running, or had not begun): the GPU had run out of work because the
                 host was late (launch-bound; a launch call that itself takes milliseconds,
                 lazy module loading, counts here);
      other      nothing recorded explains it: launch latency, or the activity has no launch
                 call in the trace (graph replays, work issued before the capture).

    `launch_start[i]` / `launch_end[i]` are kernel i's launch call's start and end (-1 when
    none; without `launch_end` the start stands for both); `sync_calls` an (n, 3) array of
    synchronising calls' [start, end, host pid] (only the processes that launched work on a
    device count for it; pid -1 counts for all); `windows[device]` merged [start, end)
    intervals.
    """
    cols = ["device", "start", "end", "idle_ns", "category", "next_row"]
    out = []
    start, end = kernels["start"].to_numpy(), kernels["end"].to_numpy()
    device = kernels["device"].to_numpy()
    pid = kernels["pid"].to_numpy() if "pid" in kernels else np.full(len(kernels), -1)
    sync_calls = np.asarray(sync_calls, dtype=np.int64).reshape(-1, 3)
    ends = launch_start if launch_end is None else np.where(launch_start >= 0, np.maximum(launch_end, launch_start), -1)
    for dev in np.unique(device) if len(kernels) else ():
        rows = np.flatnonzero(device == dev)
        hosts = np.unique(pid[rows])
        mine = sync_calls if (hosts < 0).any() else sync_calls[np.isin(sync_calls[:, 2], hosts) | (sync_calls[:, 2] < 0)]
        blocked = union(mine[:, :2]) if len(mine) else np.zeros((0, 2), dtype=np.int64)
        rows = rows[np.argsort(start[rows], kind="stable")]
        s, reach = start[rows], np.maximum.accumulate(end[rows])  # the furthest any earlier activity reached
        window = windows.get(int(dev), np.zeros((0, 2), dtype=np.int64))
        lo = min(int(window[0, 0]), int(s[0])) if len(window) else int(s[0])
        hi = max(int(window[-1, 1]), int(reach[-1])) if len(window) else int(reach[-1])
        # the stretch before each activity (from the window's start for the first) and after the last
        g_start, g_end, nxt = np.r_[lo, reach], np.r_[s, hi], np.r_[rows, -1]
        gap = np.flatnonzero(g_end > g_start)
        if not len(gap):
            continue
        g_start, g_end, nxt = g_start[gap], g_end[gap], nxt[gap]
        idle = covered_before(window, g_end) - covered_before(window, g_start)
        length = g_end - g_start
        in_sync = covered_before(blocked, g_end) - covered_before(blocked, g_start)
        launched = np.where(nxt >= 0, launch_start[np.maximum(nxt, 0)], -1)
        submitted = np.where(nxt >= 0, ends[np.maximum(nxt, 0)], -1)  # when the launch call returned
        has_launch = launched >= 0
        waited = g_end - submitted  # from the submission to the start of the work
        queued = has_launch & (length >= QUEUED_MIN_NS) & (waited >= QUEUED_MIN_NS) & (2 * np.minimum(waited, length) >= length)
        late = has_launch & (submitted > g_start)  # not yet submitted when the GPU went idle
        # A host blocked in a synchronising call for half the gap holds it, even where the next
        # work was submitted before: with nothing running on the device, that work was queued
        # behind nothing on it (a blocking copy of pageable memory holds the GPU idle so).
        synced = (late | queued) & (2 * in_sync >= length)
        category = np.where(synced, "sync", np.where(queued, "queued", np.where(late, "host_wait", "other")))
        keep = idle > 0
        out.append(pd.DataFrame({"device": int(dev), "start": g_start[keep], "end": g_end[keep], "idle_ns": idle[keep],
                                 "category": category[keep], "next_row": nxt[keep]}))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=cols)
