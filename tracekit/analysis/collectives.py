"""Collectives: message size, algorithm and bus bandwidth, link efficiency; and how much
communication the compute hides.

Message bytes come, in this order, from Kineto's collective metadata on the kernel (In/Out
msg nelems, dtype, group size), or from the launching op's tensor (record_param_comms,
symm_mem / custom all-reduce ops). The collective's type comes from the metadata, the
kernel name (ncclKernel_AllReduce_..., multimem_all_reduce), or the `nccl:<op>` range
around the launch. nccl-tests conventions: algbw = size / time, busbw = algbw x factor
(all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; others 1), where size
is the full message (the gathered output for all_gather, the full input for reduce_scatter).

Sizes from an op follow the op's signature (torch/csrc/distributed/c10d/Ops.cpp and
Functional.cpp): the c10d ops take the output first (`_allgather_base_(Tensor
output_tensor, Tensor input_tensor, ...)`: the first tensor is already the gathered whole;
`_reduce_scatter_base_(output, input)`: the second is the full one); the functional ops take
the input first (`_c10d_functional::all_gather_into_tensor(Tensor input, int group_size, str
group_name)`: one rank's share, times its group size). The group size comes from the
kernel's process group (`distributedInfo.pg_config` ranks in Kineto), then from the op
(a functional op's group_size; record_param_comms ends with the group size), then from
the only process group, then from the world size.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

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
    groups = {str(g.get("pg_name")): _group_size(g) for g in (meta.get("process_groups") or []) if isinstance(g, dict) and g.get("pg_size")}
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
            message = _message_from_op(ops, int(r["op"]), kind)
            group = str(r["coll_group"]) if isinstance(r["coll_group"], str) else ""
            if group in groups:
                n, group_source = groups[group], "process group"
            elif message.group_size:
                n, group_source = message.group_size, "op"
            elif len(groups) == 1:
                n, group_source = next(iter(groups.values())), "process group"
            elif world:
                n, group_source = int(world), "world size"
            else:
                n, group_source = None, None
            size, dtype = message.size, message.dtype
            size_source = "op shapes" if size is not None else None
            if size is not None and message.share_of_group:
                # the op's tensor is one rank's share; the message is the gathered whole
                size = size * n if n else None
                size_source = size_source if n else None
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


def _group_size(group: dict) -> int:
    """A pg_config entry's size: its ranks where listed, else pg_size."""
    ranks = group.get("ranks")
    return len(ranks) if isinstance(ranks, list) and ranks else int(group["pg_size"])


@dataclass(frozen=True)
class _Message:
    size: float | None = None  # bytes of the op's tensor(s) that the message is made of
    dtype: str | None = None
    share_of_group: bool = False  # the tensor is one rank's share of an all_gather: times the group size
    group_size: int | None = None  # the group size the op itself records


# Which argument of an op holds the full message, by the op's signature (see the module
# docstring): the c10d ops put the output first, the functional ops the input.
_FULL_ARGUMENT = {
    "c10d::_allgather_base_": 0, "c10d::allgather_": 0, "c10d::allgather_coalesced_": 0,
    "c10d::allgather_into_tensor_coalesced_": 0,
    "c10d::_reduce_scatter_base_": 1, "c10d::reduce_scatter_": 1, "c10d::reduce_scatter_tensor_coalesced_": 1,
}
# Functional collectives: (concrete input holding group_size) for the ones whose input is a share.
_FUNCTIONAL_GATHER = {"_c10d_functional::all_gather_into_tensor": 1, "_c10d_functional::all_gather_into_tensor_out": 1,
                      "_c10d_functional::all_gather_into_tensor_coalesced": 1, "c10d_functional::all_gather_into_tensor": 1}
_FUNCTIONAL_SCATTER = {"_c10d_functional::reduce_scatter_tensor": 2, "_c10d_functional::reduce_scatter_tensor_coalesced": 2,
                       "_c10d_functional::reduce_scatter_tensor_out": 2, "c10d_functional::reduce_scatter_tensor": 2}


def _message_from_op(ops: pd.DataFrame | None, op: int, kind: str | None) -> _Message:
    """The message of the collective a kernel runs, from the op that launched it or the
    nearest enclosing op whose tensors are recorded. An op whose signature tracekit knows
    gives the size by that signature; another op (record_param_comms, an engine's own
    all_gather) gives its first tensor, one rank's share for an all_gather."""
    if ops is None:
        return _Message()
    names, parents = ops["name"], ops["parent"].to_numpy()
    fallback = None
    while 0 <= op < len(ops):
        name = str(names.iat[op])
        dims, types, concrete = ops["input_dims"].iat[op], ops["input_types"].iat[op], ops["concrete_inputs"].iat[op]
        if name in _FULL_ARGUMENT:
            size, dtype = _tensor_bytes(dims, types, _FULL_ARGUMENT[name])
            if size is not None:
                return _Message(size, dtype)
        elif name in _FUNCTIONAL_GATHER or name in _FUNCTIONAL_SCATTER:
            size, dtype = _tensor_bytes(dims, types, 0)
            n = _concrete_int(concrete, _FUNCTIONAL_GATHER.get(name, _FUNCTIONAL_SCATTER.get(name)))
            if size is not None:
                return _Message(size, dtype, share_of_group=name in _FUNCTIONAL_GATHER, group_size=n)
        elif fallback is None:
            size, dtype = _tensor_bytes(dims, types, 0)
            if size is not None:
                # record_param_comms(..., global rank start, global rank stride, group size)
                n = _concrete_int(concrete, -1) if name == "record_param_comms" else None
                fallback = _Message(size, dtype, share_of_group=kind == "all_gather", group_size=n)
        op = int(parents[op])
    return fallback or _Message()


def _concrete_int(concrete, i: int) -> int | None:
    if not isinstance(concrete, list) or not concrete or not -len(concrete) <= i < len(concrete):
        return None
    try:
        value = int(str(concrete[i]).strip())
    except ValueError:
        return None
    return value if value > 0 else None


def _tensor_bytes(dims, types, i: int) -> tuple[float | None, str | None]:
    """Bytes of argument i: a tensor, or a (nested) list of tensors, summed."""
    if not isinstance(dims, list) or i >= len(dims):
        return None, None
    arg, dtype_name = dims[i], (types[i] if isinstance(types, list) and i < len(types) else None)
    dtype = canonical(dtype_name) or "fp32"

    def elements(shape) -> int | None:
        if not isinstance(shape, list) or not shape:
            return None
        if all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            return math.prod(shape)
        parts = [elements(s) for s in shape]
        return sum(parts) if all(p is not None for p in parts) else None

    n = elements(arg)
    if n is None:
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
