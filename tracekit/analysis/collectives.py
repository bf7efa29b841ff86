"""Collectives: message size, algorithm and bus bandwidth, link efficiency; and how much
communication the compute hides.

Message bytes come, in this order, from Kineto's collective metadata on the kernel (In/Out
msg nelems, dtype, group size), or from the launching op's tensor (record_param_comms,
symm_mem / custom all-reduce ops). The collective's type comes from the metadata, the
kernel name (ncclKernel_AllReduce_..., multimem_all_reduce), or the `nccl:<op>` range
around the launch. nccl-tests conventions: algbw = size / time, busbw = algbw x factor
(all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; others 1), where size
is the full message (the gathered output for all_gather).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from tracekit.trace.column_text import as_text
from tracekit.costs.comm import bus_factor
from tracekit.costs.dtypes import canonical, element_bytes
from tracekit.trace.timeline import covered_before, union

_TYPES = [  # (normalised type, pattern over metadata / kernel / op / range names)
    ("reduce_scatter", re.compile(r"reduce_?scatter|ReduceScatter", re.I)),
    ("all_reduce", re.compile(r"all_?reduce|AllReduce|cross_device_reduce|custom_ar", re.I)),
    ("all_gather", re.compile(r"all_?gather|AllGather", re.I)),
    # MoE token exchange (DeepEP dispatch / combine, pplx) is an all-to-all
    ("all_to_all", re.compile(r"all_?to_?all|AllToAll|alltoall|all2all|deep_?ep|internode(_ll)?::|intranode::|pplx", re.I)),
    ("broadcast", re.compile(r"broadcast", re.I)),
    ("send_recv", re.compile(r"send_?recv|SendRecv|\bsend\b|\brecv\b|_Send|_Recv", re.I)),
    ("reduce", re.compile(r"(?<!all_)(?<!all)reduce(?!_?scatter)|_Reduce_", re.I)),
]

COLUMNS = ["row", "collective", "group", "group_size", "group_source", "dtype", "message_bytes", "size_source",
           "start", "end", "duration_ns", "algbw_gbps", "busbw_gbps", "link_efficiency"]


def collective_type(*names: str | None) -> str | None:
    for name in names:
        if not name:
            continue
        for label, pattern in _TYPES:
            if pattern.search(name):
                return label
    return None


def collective_table(analysis) -> pd.DataFrame:
    """One row per collective kernel of an Analysis."""
    k = analysis.kernels
    trace = analysis.trace
    comm = k.index[(k["block"] == "collective").to_numpy() & (k["kind"] == "kernel").to_numpy()]
    if not len(comm):
        return pd.DataFrame(columns=COLUMNS)
    meta = analysis.meta
    world = meta.get("world_size")
    groups = {str(g.get("pg_name")): int(g.get("pg_size")) for g in (meta.get("process_groups") or []) if isinstance(g, dict) and g.get("pg_size")}
    ops = trace.ops if trace is not None else None
    range_names = np.array([], dtype=object)
    if trace is not None and len(trace.ranges):
        range_names = as_text(trace.ranges["name"])  # text per distinct name, not per range
        range_names[range_names == None] = "nan"  # noqa: E711  (what astype(str) made of a missing name)
    interconnect = analysis.device.interconnect if analysis.device else float("nan")
    # Plain arrays, read once: a DataFrame row per kernel (k.loc) costs tens of microseconds.
    columns = {c: k[c].to_numpy() for c in ("op_name", "range", "collective", "name", "coll_group_size", "coll_in_elems",
                                            "coll_out_elems", "coll_dtype", "coll_group", "op", "start", "end")}
    rows = []
    for row, position in zip(comm, k.index.get_indexer(comm)):
        r = {c: values[position] for c, values in columns.items()}
        op_name = str(r["op_name"]) if isinstance(r["op_name"], str) else None
        enclosing = range_names[r["range"]] if r["range"] >= 0 and len(range_names) else None
        meta_name = str(r["collective"]) if isinstance(r["collective"], str) else None
        # The range torch.distributed opens (nccl:all_to_all) names what the kernel
        # (ncclKernel_SendRecv, NCCL's building block for all-to-all) is part of.
        kind = collective_type(meta_name, enclosing if enclosing and enclosing.startswith("nccl:") else None, op_name, str(r["name"]))
        if meta_name and r["coll_group_size"] > 0 and r["coll_in_elems"] >= 0:
            dtype = canonical(str(r["coll_dtype"])) or "fp32"
            size = max(r["coll_in_elems"], r["coll_out_elems"]) * element_bytes(dtype)
            group, n, group_source, size_source = str(r["coll_group"]), int(r["coll_group_size"]), "metadata", "metadata"
        else:
            size, dtype = _size_from_op(ops, int(r["op"]))
            group = str(r["coll_group"]) if isinstance(r["coll_group"], str) else ""
            if len(groups) == 1:
                n, group_source = next(iter(groups.values())), "process group"
            elif world:
                n, group_source = int(world), "world size"
            else:
                n, group_source = None, None
            size_source = "op shapes" if size is not None else None
            if size is not None and kind == "all_gather" and n:
                size *= n  # the op's input is one rank's share; the message is the gathered whole
        duration = int(r["end"] - r["start"])
        algbw = size / (duration * 1e-9) if size and duration > 0 else float("nan")
        factor = bus_factor(kind or "", n) if n else float("nan")
        busbw = algbw * factor
        rows.append({
            "row": int(row), "collective": kind, "group": group, "group_size": n, "group_source": group_source, "dtype": dtype,
            "message_bytes": float(size) if size is not None else float("nan"), "size_source": size_source,
            "start": int(r["start"]), "end": int(r["end"]), "duration_ns": duration,
            "algbw_gbps": algbw / 1e9, "busbw_gbps": busbw / 1e9, "link_efficiency": busbw / interconnect if interconnect else float("nan"),
        })
    return pd.DataFrame(rows, columns=COLUMNS)


def _size_from_op(ops: pd.DataFrame | None, op: int) -> tuple[float | None, str | None]:
    if ops is None or op < 0:
        return None, None
    dims, types = ops["input_dims"].iat[op], ops["input_types"].iat[op]
    if not isinstance(dims, list) or not dims:
        return None, None
    first, dtype_name = dims[0], (types[0] if isinstance(types, list) and types else None)
    dtype = canonical(dtype_name) or "fp32"
    if isinstance(first, list) and first and all(isinstance(d, list) for d in first):  # a tensor list
        n = sum(math.prod(d) for d in first)
    elif isinstance(first, list) and first:
        n = math.prod(first)
    else:
        return None, None
    return float(n * element_bytes(dtype)), dtype


def _intersection(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the intersection of two sorted, merged interval lists (timeline.union):
    for each interval of `a`, the length of `b` lying inside it."""
    if not len(a) or not len(b):
        return 0
    return int((covered_before(b, a[:, 1]) - covered_before(b, a[:, 0])).sum())


def overlap_table(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per device: communication time, how much of it compute kernels overlap, and the
    exposed rest (time when only communication runs)."""
    rows = []
    is_kernel = (kernels["kind"] == "kernel").to_numpy()
    is_comm = (kernels["block"] == "collective").to_numpy() & is_kernel
    iv = np.column_stack([kernels["start"].to_numpy(np.int64), kernels["end"].to_numpy(np.int64)])
    for device in np.unique(kernels["device"].to_numpy()) if len(kernels) else ():
        on = kernels["device"].to_numpy() == device
        comm = union(iv[on & is_comm])
        compute = union(iv[on & is_kernel & ~is_comm])
        comm_ns = int((comm[:, 1] - comm[:, 0]).sum()) if len(comm) else 0
        overlapped = _intersection(comm, compute)
        rows.append({"device": int(device), "comm_ns": comm_ns, "overlapped_ns": overlapped, "exposed_ns": comm_ns - overlapped,
                     "overlap_share": overlapped / comm_ns if comm_ns else float("nan")})
    return pd.DataFrame(rows, columns=["device", "comm_ns", "overlapped_ns", "exposed_ns", "overlap_share"])


SUMMARY_COLUMNS = ["collective", "group", "message_bytes", "count", "time_ns", "busbw_gbps", "algbw_gbps", "link_efficiency",
                   "group_size", "size_source", "group_source"]


def collective_summary(c: pd.DataFrame) -> pd.DataFrame:
    """Per (collective, group, message size): count, time, mean bus bandwidth, link efficiency."""
    if c.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    return c.fillna({"collective": "unknown", "group": ""}).groupby(["collective", "group", "message_bytes"], dropna=False).agg(
        count=("row", "size"), time_ns=("duration_ns", "sum"), busbw_gbps=("busbw_gbps", "mean"),
        algbw_gbps=("algbw_gbps", "mean"), link_efficiency=("link_efficiency", "mean"), group_size=("group_size", "first"),
        size_source=("size_source", "first"), group_source=("group_source", "first"),
    ).reset_index().sort_values("time_ns", ascending=False)
