"""tracekit's time figures in the shape HTA reports them, from tracekit's own kernel table and
its own labels (kind, block): HTA's metric definitions, tracekit's data and classification.

HTA's definitions (hta/analyzers/breakdown_analysis.py, communication_analysis.py):
  - kernel_time: first GPU activity start to last end (the GPU-active window), per rank;
  - idle: window minus the union of all GPU activity;
  - compute: union of computation kernels; non_compute = busy - compute;
  - overlap: |comm ∩ compute| / |comm|;
  - kernel-type breakdown: the busy time split by the set of types running at once
    ("COMPUTATION", "COMMUNICATION", "COMPUTATION overlapping COMMUNICATION", "MEMORY", ...).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.trace.timeline import union  # merging intervals is the same under HTA's definitions

COMP, COMM, MEM = "COMPUTATION", "COMMUNICATION", "MEMORY"
ORDER = (COMP, COMM, MEM)  # HTA's bit order: the first type named in a combination


def kernel_types(k: pd.DataFrame) -> np.ndarray:
    """tracekit's labels mapped onto HTA's three types."""
    kind = k["kind"].astype(str).to_numpy()
    block = k["block"].astype(str).to_numpy()
    return np.where(kind != "kernel", MEM, np.where(block == "collective", COMM, COMP))


# HTA 0.5.0's name rules (hta/utils/utils.py), to tell a difference of classification from
# a difference of timing: communication is ^nccl.*Kernel, memory ^Memcpy|^Memset|^dma,
# computation whatever does not match (^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync).
HTA_COMM = re.compile(r"^nccl.*Kernel")
HTA_MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
HTA_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")


def hta_types(names: pd.Series) -> np.ndarray:
    """HTA's kernel type of each name (OTHER for names none of its three rules take)."""
    def one(name: str) -> str:
        if HTA_COMM.match(name):
            return COMM
        if HTA_MEMORY.match(name):
            return MEM
        return "OTHER" if HTA_NOT_COMPUTE.match(name) else COMP
    lookup = {n: one(n) for n in pd.unique(names.astype(str))}
    return names.astype(str).map(lookup).to_numpy()


def length(iv: np.ndarray) -> int:
    return int((iv[:, 1] - iv[:, 0]).sum()) if len(iv) else 0


def intersection(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the intersection of two unions of disjoint sorted intervals."""
    total, i, j = 0, 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i, 0], b[j, 0]), min(a[i, 1], b[j, 1])
        total += max(0, hi - lo)
        if a[i, 1] < b[j, 1]:
            i += 1
        else:
            j += 1
    return int(total)


def type_partition(iv: np.ndarray, types: np.ndarray) -> dict[str, int]:
    """Busy time split by the set of types active at once, named as HTA names them."""
    edges, deltas = [], []
    for bit, t in enumerate(ORDER):
        u = union(iv[types == t])
        edges += [u[:, 0], u[:, 1]]
        deltas += [np.full(len(u), 1 << bit), np.full(len(u), -(1 << bit))]
    if not sum(len(e) for e in edges):
        return {}
    t = np.concatenate(edges)
    d = np.concatenate(deltas)
    order = np.argsort(t, kind="stable")
    t, d = t[order], d[order]
    running = np.cumsum(d)
    seg = np.diff(t)
    out: dict[str, int] = {}
    for state in np.unique(running[:-1]):
        if state <= 0:
            continue
        name = " overlapping ".join(ORDER[b] for b in range(3) if state & (1 << b))
        out[name] = out.get(name, 0) + int(seg[running[:-1] == state].sum())
    return out


def device_figures(k: pd.DataFrame) -> dict[str, float]:
    """HTA's figures for one device's GPU activity, in ns."""
    iv = k[["start", "end"]].to_numpy(dtype=np.int64)
    types = kernel_types(k)
    busy = union(iv)
    comm = union(iv[types == COMM])
    comp = union(iv[types == COMP])
    window = int(iv[:, 1].max() - iv[:, 0].min()) if len(iv) else 0
    comm_ns = length(comm)
    by_hta_names = hta_types(k["name"])
    return {
        "compute_hta_rules_ns": length(union(iv[by_hta_names == COMP])),
        "events": len(k), "window_ns": window, "busy_ns": length(busy), "idle_in_window_ns": window - length(busy),
        "compute_ns": length(comp), "non_compute_ns": length(busy) - length(comp), "comm_ns": comm_ns,
        "overlap_share": intersection(comm, comp) / comm_ns if comm_ns else None,
        "types": type_partition(iv, types),
    }
