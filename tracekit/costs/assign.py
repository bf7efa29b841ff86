"""Costs onto kernels: every GPU activity gets FLOPs and bytes, or the reason it has none.

- memcpy / memset: the bytes the trace records (a device-to-device copy reads and writes).
- collective kernels with Kineto collective metadata: the message size it gives.
- other kernels: their op's cost (see tracekit.costs), shared among the op's kernels in
  proportion to their time (a split-K GEMM launches two kernels for one op). A computing
  op's FLOPs and bytes go to its compute kernels, not to the layout transposes and
  workspace fills around them (cuDNN nchwToNhwc, MIOpen batched_transpose): those stay
  unknown with their reason rather than show a transpose at tens of TFLOP/s.
- kernels with no op (launched before the capture began, or by a CUDA graph) take the cost
  of kernels with the same name and launch grid, but only when every such kernel that has
  a cost has the very same cost ("inferred"); otherwise their cost stays unknown.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.costs import op_cost
from tracekit.costs.autograd import conv_hints
from tracekit.costs.classify import classify, is_auxiliary
from tracekit.costs.comm import kernel_collective_cost
from tracekit.costs.cost import Cost, Unknown
from tracekit.costs.dtypes import dominant_matrix_dtype, element_bytes, element_bytes_from_kernel, sized_dtype
from tracekit.costs.memory import ASSUMED_FP32
from tracekit.column_text import as_text
from tracekit.trace import Trace

COST_COLUMNS = ["flops", "bytes_read", "bytes_written", "cost_kind", "dtype", "cost_source", "unknown_reason", "kernel_class"]


def kernel_costs(trace: Trace) -> pd.DataFrame:
    """One row per kernel (same index as trace.kernels) with the COST_COLUMNS."""
    k = trace.kernels
    n = len(k)
    out = {
        "flops": np.full(n, np.nan), "bytes_read": np.full(n, np.nan), "bytes_written": np.full(n, np.nan),
        "cost_kind": np.full(n, None, dtype=object), "dtype": np.full(n, None, dtype=object),
        "cost_source": np.full(n, None, dtype=object), "unknown_reason": np.full(n, None, dtype=object),
    }
    duration = (k["end"] - k["start"]).to_numpy(dtype=np.float64)
    kind = as_text(k["kind"])
    _copies(k, kind, out)
    _collectives(k, kind, out)
    _from_ops(trace, kind, duration, out)
    _from_metadata(trace, kind, duration, out)
    _inferred(k, out)
    _reasons_without_op(k, out)
    frame = pd.DataFrame(out, index=k.index)
    frame["kernel_class"] = classify(k["name"])
    for col in ("cost_kind", "dtype", "cost_source", "unknown_reason"):
        frame[col] = frame[col].astype("category")
    return frame


def _reasons_without_op(k: pd.DataFrame, out: dict) -> None:
    missing = np.isnan(out["flops"]) & (out["unknown_reason"] == None)  # noqa: E711
    reasons = np.select(
        [k["launched_before_capture"].to_numpy(), k["graph_launch"].to_numpy(), k["launch"].to_numpy() < 0],
        ["launched before the capture began: no op was recorded for it",
         "launched by a CUDA/HIP graph: the trace records no op for graph kernels",
         "no launch call was recorded for it"],
        default="no op with recorded shapes encloses its launch",
    )
    out["unknown_reason"][missing] = reasons[missing]


def _set(out: dict, rows: np.ndarray, cost: Cost, share: np.ndarray | float, source: str) -> None:
    out["flops"][rows] = cost.flops * share
    out["bytes_read"][rows] = cost.bytes_read * share
    out["bytes_written"][rows] = cost.bytes_written * share
    out["cost_kind"][rows] = cost.kind
    out["dtype"][rows] = cost.dtype
    out["cost_source"][rows] = source
    out["unknown_reason"][rows] = None


def _copies(k: pd.DataFrame, kind: np.ndarray, out: dict) -> None:
    nbytes = k["bytes"].to_numpy(dtype=np.float64)
    copy = (kind == "memcpy") & (nbytes >= 0)
    dtod = copy & k["copy_kind"].astype(str).isin(["DtoD", "PtoP"]).to_numpy()
    out["flops"][copy] = 0.0
    out["bytes_read"][copy] = np.where(dtod[copy], nbytes[copy], 0.0)  # host side reads are not HBM traffic
    out["bytes_written"][copy] = np.where(dtod[copy], nbytes[copy], nbytes[copy])
    memset = (kind == "memset") & (nbytes >= 0)
    out["flops"][memset] = 0.0
    out["bytes_read"][memset] = 0.0
    out["bytes_written"][memset] = nbytes[memset]
    for mask in (copy, memset):
        out["cost_kind"][mask] = "memory"
        out["dtype"][mask] = "uint8"
        out["cost_source"][mask] = "trace bytes"


def _collectives(k: pd.DataFrame, kind: np.ndarray, out: dict) -> None:
    has_meta = k["collective"].notna().to_numpy() & (kind == "kernel")
    for row in np.flatnonzero(has_meta):
        cost = kernel_collective_cost(
            str(k["collective"].iat[row]), int(k["coll_in_elems"].iat[row]), int(k["coll_out_elems"].iat[row]),
            str(k["coll_dtype"].iat[row]) if pd.notna(k["coll_dtype"].iat[row]) else None, int(k["coll_group_size"].iat[row]),
        )
        if cost is not None:
            _set(out, np.array([row]), cost, 1.0, "collective metadata")


def _from_ops(trace: Trace, kind: np.ndarray, duration: np.ndarray, out: dict) -> None:
    k, ops = trace.kernels, trace.ops
    op = k["op"].to_numpy()
    todo = (op >= 0) & (kind == "kernel") & np.isnan(out["flops"])
    if not todo.any():
        return
    # An op's cost is split over its kernels (not its memcpys / memsets) in proportion to
    # their time; a computing op's cost goes to its compute kernels only, not to the layout
    # transposes and workspace fills a convolution library launches around them.
    # Kernels are grouped by op with one sort; only the cost itself is computed op by op
    # (once per distinct op name and inputs), and it is spread back to kernels in one go.
    rows = np.flatnonzero(todo)
    rows = rows[np.argsort(op[rows], kind="stable")]
    op_rows, group_start, group_size = np.unique(op[rows], return_index=True, return_counts=True)
    group = np.repeat(np.arange(len(op_rows)), group_size)  # per entry of rows: its op's group
    auxiliary = is_auxiliary(k["name"].iloc[rows])
    helpers_in_group = np.bincount(group, weights=auxiliary, minlength=len(op_rows))
    op_names = as_text(ops["name"])
    kernel_names = None
    dims, types, concrete = ops["input_dims"].to_numpy(), ops["input_types"].to_numpy(), ops["concrete_inputs"].to_numpy()
    cache: dict[tuple, Cost | Unknown] = {}
    hints = conv_hints(ops)
    receives = np.ones(len(rows), dtype=bool)  # kernels that take a share of their op's cost
    costs: list[Cost | None] = [None] * len(op_rows)
    for g, op_row in enumerate(op_rows.tolist()):
        # Interned inputs: equal inputs are the same objects, so ids make a cheap cache key.
        hint = hints.get(op_row)
        name = op_names[op_row]
        key = (name, id(dims[op_row]), id(types[op_row]), id(concrete[op_row]), repr(hint) if hint else None)
        cost = cache.get(key)
        if cost is None:
            cost = cache[key] = op_cost(name, dims[op_row], types[op_row], concrete[op_row], hint)
        members = slice(group_start[g], group_start[g] + group_size[g])
        if isinstance(cost, Unknown):
            out["unknown_reason"][rows[members]] = cost.reason
            receives[members] = False
            continue
        if cost.flops > 0 and 0 < helpers_in_group[g] < group_size[g]:
            helpers = np.flatnonzero(auxiliary[members]) + group_start[g]
            out["unknown_reason"][rows[helpers]] = (
                f"layout or workspace kernel of {name}: the op's FLOPs and minimum bytes belong to its "
                "compute kernels, and which tensor this kernel moves is not recorded")
            receives[helpers] = False
        if ASSUMED_FP32 in cost.note:
            kernel_names = as_text(k["name"]) if kernel_names is None else kernel_names
            cost = _element_size_from_kernels(cost, kernel_names, rows[members][receives[members]])
        costs[g] = cost
    taking, their_group = rows[receives], group[receives]
    total = np.bincount(their_group, weights=duration[taking], minlength=len(op_rows))
    count = np.bincount(their_group, minlength=len(op_rows))
    share = np.where(total[their_group] > 0, duration[taking] / np.where(total > 0, total, 1.0)[their_group], 1.0 / np.maximum(count, 1)[their_group])
    known = [c for c in costs if c is not None]
    if not known:
        return
    per_group = {f: np.array([getattr(c, f) if c is not None else np.nan for c in costs], dtype=np.float64)
                 for f in ("flops", "bytes_read", "bytes_written")}
    for f, values in per_group.items():
        out[f][taking] = values[their_group] * share
    for col, f in (("cost_kind", "kind"), ("dtype", "dtype")):
        out[col][taking] = np.array([getattr(c, f) if c is not None else None for c in costs], dtype=object)[their_group]
    out["cost_source"][taking] = "op shapes"
    out["unknown_reason"][taking] = None


METADATA = "trace metadata (Inductor)"


def _from_metadata(trace: Trace, kind: np.ndarray, duration: np.ndarray, out: dict) -> None:
    """torch.compile's kernels: Inductor states each kernel's FLOPs and GB, on the kernel
    (augment_trace) or on the record_function around its launch. Used where op shapes gave
    nothing; the op-level figure is split over the op's kernels by time. Inductor gives one
    byte total, so it is all counted as read. FLOPs need a dtype for their peak: the
    trace's dominant matrix dtype (a compiled model runs in one), noted."""
    k = trace.kernels
    if "meta_flops" not in k:
        return
    todo = (kind == "kernel") & np.isnan(out["flops"])
    flops, nbytes = k["meta_flops"].to_numpy(dtype=np.float64).copy(), k["meta_bytes"].to_numpy(dtype=np.float64).copy()
    op = k["op"].to_numpy()
    from_op = todo & np.isnan(flops) & np.isnan(nbytes) & (op >= 0)
    if from_op.any() and "meta_flops" in trace.ops:
        op_flops, op_bytes = trace.ops["meta_flops"].to_numpy(dtype=np.float64), trace.ops["meta_bytes"].to_numpy(dtype=np.float64)
        rows = np.flatnonzero(from_op)
        total = pd.Series(duration[rows]).groupby(op[rows]).transform("sum").to_numpy()
        share = np.where(total > 0, duration[rows] / np.where(total > 0, total, 1.0), 1.0)
        flops[rows], nbytes[rows] = op_flops[op[rows]] * share, op_bytes[op[rows]] * share
    has = todo & ~(np.isnan(flops) & np.isnan(nbytes))
    if not has.any():
        return
    matrix_dtype = dominant_matrix_dtype(out["cost_kind"], out["dtype"], duration)
    no_bytes = has & np.isnan(nbytes)
    out["unknown_reason"][no_bytes] = "Inductor states FLOPs but not bytes for this kernel"
    rows = np.flatnonzero(has & ~no_bytes)  # one vectorised write: compiled traces have many such kernels
    computes = np.nan_to_num(flops[rows]) > 0
    out["flops"][rows] = np.nan_to_num(flops[rows])
    out["bytes_read"][rows], out["bytes_written"][rows] = nbytes[rows], 0.0  # one total: counted as read
    out["cost_kind"][rows] = np.where(computes, "matrix", "memory")
    out["dtype"][rows] = np.where(computes, matrix_dtype or "unknown", "b8")
    out["cost_source"][rows] = METADATA
    out["unknown_reason"][rows] = None


def _element_size_from_kernels(cost: Cost, kernel_names: np.ndarray, rows: np.ndarray) -> Cost:
    """A tensor-list op (cat, stack) records no dtype, so its cost assumed fp32; the kernels
    it launched are templated on the element size (OpaqueType<2u> for bf16 / fp16)."""
    if ASSUMED_FP32 not in cost.note:
        return cost
    sizes = {element_bytes_from_kernel(n) for n in kernel_names[rows]}
    if len(sizes) != 1 or None in sizes:
        return cost
    size = sizes.pop()
    scale = size / element_bytes("fp32")
    return Cost(cost.flops, cost.bytes_read * scale, cost.bytes_written * scale, cost.kind, sized_dtype(size),
                f"element size {size:g} B from the kernel's OpaqueType")


def _inferred(k: pd.DataFrame, out: dict) -> None:
    unknown = np.isnan(out["flops"]) & (k["op"].to_numpy() < 0) & (as_text(k["kind"]) == "kernel")
    if not unknown.any():
        return
    signature = pd.MultiIndex.from_arrays([k["name"].cat.codes, k["grid_x"], k["grid_y"], k["grid_z"], k["block_x"]])
    known = (out["cost_source"] == "op shapes")
    if not known.any():
        return
    table = pd.DataFrame({
        "sig": pd.factorize(signature)[0],
        "flops": out["flops"], "read": out["bytes_read"], "written": out["bytes_written"],
    })
    sig = table["sig"].to_numpy()
    ref = table[known].groupby("sig").agg(
        flops_min=("flops", "min"), flops_max=("flops", "max"), read_min=("read", "min"), read_max=("read", "max"),
        written=("written", "first"), read=("read", "first"), flops=("flops", "first"),
    )
    same = ref[(ref["flops_min"] == ref["flops_max"]) & (ref["read_min"] == ref["read_max"])]
    first_known = pd.Series(np.flatnonzero(known), index=sig[known]).groupby(level=0).first()
    rows = np.flatnonzero(unknown)
    rows = rows[np.isin(sig[rows], same.index.to_numpy())]
    if not len(rows):
        return
    # Donors have an op and these rows have none, so no row is both: one vectorised copy.
    donor = first_known.reindex(sig[rows]).to_numpy()
    match = same.reindex(sig[rows])
    out["flops"][rows], out["bytes_read"][rows], out["bytes_written"][rows] = (match[c].to_numpy() for c in ("flops", "read", "written"))
    out["cost_kind"][rows], out["dtype"][rows] = out["cost_kind"][donor], out["dtype"][donor]
    out["cost_source"][rows] = "inferred from identical kernels"
