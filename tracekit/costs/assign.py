"""Costs onto kernels: every GPU activity gets FLOPs and bytes, or the reason it has none.

- memcpy / memset: the bytes the trace records (a device-to-device copy reads and writes).
- collective kernels with Kineto collective metadata: the message size it gives.
- other kernels: their op's cost (see tracekit.costs), shared among the op's kernels in
  proportion to their time, except a split-K GEMM's two kernels, each costed on what it
  moves (tracekit.costs.split_k). A computing
  op's FLOPs and bytes go to its compute kernels, not to the layout transposes and
  workspace fills around them (cuDNN nchwToNhwc, MIOpen batched_transpose): those stay
  unknown with their reason rather than show a transpose at tens of TFLOP/s.
- graph-replayed kernels: no cost from the op around the graph launch; the op they had at
  capture time where graph-capture pairing found it (tracekit.trace.capture_pairing).
- kernels launched before the capture began: the cost of the kernel at the same place of a
  later iteration, where the stream repeats their sequence (tracekit.costs.repeated);
- kernels with no op (launched before the capture began, or by a CUDA graph) take the cost
  of kernels with the same name and launch grid, but only when every such kernel that has
  a cost has the very same cost ("inferred"); a kernel whose grid the trace did not record
  (Kineto leaves it out for kernels launched before the capture) is compared by name alone,
  under the same rule; otherwise their cost stays unknown.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.costs import op_cost
from tracekit.costs.autograd import conv_hints
from tracekit.costs.optimizer import parameter_hints
from tracekit.costs.repeated import from_repeated_sequence
from tracekit.costs.split_k import apply_split_k
from tracekit.costs.classify import classify, is_auxiliary
from tracekit.costs.comm import kernel_collective_cost
from tracekit.costs.cost import Cost, Unknown
from tracekit.costs.inductor import inductor_kernel_cost, is_inductor_kernel
from tracekit.costs.dtypes import dominant_matrix_dtype, element_bytes, element_bytes_from_kernel, sized_dtype
from tracekit.costs.layout import layout_kernel_cost
from tracekit.costs.grouped_gemm import setup_kernel_cost
from tracekit.costs.index_shapes import index_hints
from tracekit.costs.list_dtypes import list_dtype_hints
from tracekit.costs.memory import ASSUMED_FP32, LIST_DTYPE_FROM_PRODUCER
from tracekit.trace.column_text import as_text
from tracekit.trace.grouping import combine
from tracekit.trace import Trace

COST_COLUMNS = ["flops", "bytes_read", "bytes_written", "cost_kind", "dtype", "cost_source", "unknown_reason", "cost_estimate",
                "kernel_class"]
# A cost whose note says it is an estimate (a grouped GEMM's expected experts) keeps the note
# on its kernels: coverage reports the time so costed, with the note's bound.
ESTIMATE = "estimate"


def kernel_costs(trace: Trace) -> pd.DataFrame:
    """One row per kernel (same index as trace.kernels) with the COST_COLUMNS."""
    k = trace.kernels
    n = len(k)
    out = {
        "flops": np.full(n, np.nan), "bytes_read": np.full(n, np.nan), "bytes_written": np.full(n, np.nan),
        "cost_kind": np.full(n, None, dtype=object), "dtype": np.full(n, None, dtype=object),
        "cost_source": np.full(n, None, dtype=object), "unknown_reason": np.full(n, None, dtype=object),
        "cost_estimate": np.full(n, None, dtype=object),
    }
    duration = (k["end"] - k["start"]).to_numpy(dtype=np.float64)
    kind = as_text(k["kind"])
    _copies(k, kind, out)
    _collectives(k, kind, out)
    helpers = _from_ops(trace, kind, duration, out)
    apply_split_k(k, trace.ops, out, "op shapes")
    _from_metadata(trace, kind, duration, out)
    _from_inductor_arguments(trace, kind, out)
    _layout_kernels(trace, helpers, out)
    from_repeated_sequence(k, out)
    _inferred(k, out)
    _reasons_without_op(k, out)
    frame = pd.DataFrame(out, index=k.index)
    frame["kernel_class"] = classify(k["name"])
    for col in ("cost_kind", "dtype", "cost_source", "unknown_reason", "cost_estimate"):
        frame[col] = frame[col].astype("category")
    return frame


def _layout_kernels(trace: Trace, helpers: dict[int, Cost], out: dict) -> None:
    """Layout kernels left out of their op's cost (see _from_ops) whose launch names the
    tensor they move (costs/layout.py). A forward op's result is the output its cost wrote."""
    if not helpers:
        return
    k, ops = trace.kernels, trace.ops
    op = k["op"].to_numpy()
    dims, types = ops["input_dims"].to_numpy(), ops["input_types"].to_numpy()
    names, op_names = as_text(k["name"]), as_text(ops["name"])
    grid = k[["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]].to_numpy()
    for i, own in helpers.items():
        o = int(op[i])
        output = (int(own.bytes_written // element_bytes(own.dtype)), own.dtype) \
            if "backward" not in str(op_names[o]) and own.bytes_written > 0 else None
        g = grid[i]
        cost = layout_kernel_cost(str(names[i]), tuple(g[:3]), tuple(g[3:]), dims[o], types[o], output) \
            or setup_kernel_cost(str(names[i]), dims[o], types[o])
        if cost is not None:
            _set(out, np.array([i]), cost, 1.0, "op shapes")


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
    dtod = copy & k["copy_kind"].isin(["DtoD", "PtoP"]).to_numpy()
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
    rows = np.flatnonzero(has_meta)
    if not len(rows):
        return
    # the fields as plain arrays, read once (not one pandas lookup per field per kernel)
    name, in_elems, out_elems, dtype, group_size = (k[c].to_numpy()[rows] for c in (
        "collective", "coll_in_elems", "coll_out_elems", "coll_dtype", "coll_group_size"))
    for i, row in enumerate(rows.tolist()):
        cost = kernel_collective_cost(str(name[i]), int(in_elems[i]), int(out_elems[i]),
                                      str(dtype[i]) if pd.notna(dtype[i]) else None, int(group_size[i]))
        if cost is not None:
            _set(out, np.array([row]), cost, 1.0, "collective metadata")


def _from_ops(trace: Trace, kind: np.ndarray, duration: np.ndarray, out: dict) -> dict[int, Cost]:
    """Kernels costed from their op; returns the layout / workspace kernels left out of their
    op's cost, each with that op's cost (kernel row -> Cost), for _layout_kernels."""
    k, ops = trace.kernels, trace.ops
    op = k["op"].to_numpy()
    # A graph replay's kernels are not the work of the op around the graph launch
    # (CompiledFunctionBackward, Torch-Compiled Region): they keep the graph's reason, unless
    # graph-capture pairing gave them the op that launched them at capture time.
    captured = k["capture_op"].to_numpy(dtype=bool) if "capture_op" in k else np.zeros(len(k), dtype=bool)
    todo = (op >= 0) & (kind == "kernel") & np.isnan(out["flops"]) & (~k["graph_launch"].to_numpy(dtype=bool) | captured)
    if not todo.any():
        return {}
    # An op's cost is split over its kernels (not its memcpys / memsets) in proportion to
    # their time; a computing op's cost goes to its compute kernels only, not to the layout
    # transposes and workspace fills a convolution library launches around them.
    # Kernels are grouped by op with one sort; the cost itself is computed once per distinct
    # op name and inputs, and everything per op or per kernel is done on arrays.
    rows = np.flatnonzero(todo)
    rows = rows[np.argsort(op[rows], kind="stable")]
    op_rows, group_start, group_size = np.unique(op[rows], return_index=True, return_counts=True)
    group = np.repeat(np.arange(len(op_rows)), group_size)  # per entry of rows: its op's group
    auxiliary = is_auxiliary(k["name"].iloc[rows])
    helpers_in_group = np.bincount(group, weights=auxiliary, minlength=len(op_rows))
    op_names = as_text(ops["name"])
    call, costs = _costs_per_call(ops, op_rows, op_names)  # per group: index into costs
    unknown = np.array([isinstance(c, Unknown) for c in costs] + [False])[call]
    receives = ~unknown[group]  # kernels that take a share of their op's cost
    out["unknown_reason"][rows[~receives]] = np.array([c.reason if isinstance(c, Unknown) else None for c in costs],
                                                      dtype=object)[call[group[~receives]]]
    computes = np.array([isinstance(c, Cost) and c.flops > 0 for c in costs])[call]
    split = ~unknown & computes & (helpers_in_group > 0) & (helpers_in_group < group_size)
    helper = split[group] & auxiliary
    helpers = {int(r): costs[c] for r, c in zip(rows[helper].tolist(), call[group[helper]].tolist())}
    if helper.any():
        out["unknown_reason"][rows[helper]] = [
            f"layout or workspace kernel of {name}: the op's FLOPs and minimum bytes belong to its "
            "compute kernels, and which tensor this kernel moves is not recorded" for name in op_names[op_rows[group[helper]]]]
        receives &= ~helper
    call, costs = _element_size_from_kernels(k, rows, group, receives, call, costs)
    taking, their_group = rows[receives], group[receives]
    total = np.bincount(their_group, weights=duration[taking], minlength=len(op_rows))
    count = np.bincount(their_group, minlength=len(op_rows))
    share = np.where(total[their_group] > 0, duration[taking] / np.where(total > 0, total, 1.0)[their_group], 1.0 / np.maximum(count, 1)[their_group])
    if unknown.all():
        return helpers
    known = [c if isinstance(c, Cost) else None for c in costs]
    cost_of = call[their_group]  # per taking kernel: its cost
    for f in ("flops", "bytes_read", "bytes_written"):
        out[f][taking] = np.array([getattr(c, f) if c is not None else np.nan for c in known], dtype=np.float64)[cost_of] * share
    for col, f in (("cost_kind", "kind"), ("dtype", "dtype")):
        out[col][taking] = np.array([getattr(c, f) if c is not None else None for c in known], dtype=object)[cost_of]
    out["cost_source"][taking] = "op shapes"
    out["unknown_reason"][taking] = None
    out["cost_estimate"][taking] = np.array([c.note if c is not None and ESTIMATE in c.note else None for c in known],
                                            dtype=object)[cost_of]
    return helpers


def _costs_per_call(ops: pd.DataFrame, op_rows: np.ndarray, op_names: np.ndarray) -> tuple[np.ndarray, list]:
    """The cost of each op call in `op_rows`, computed once per distinct (name, inputs):
    per call an index into the list of distinct costs (Cost or Unknown)."""
    dims, types, concrete = ops["input_dims"].to_numpy(), ops["input_types"].to_numpy(), ops["concrete_inputs"].to_numpy()
    strides = ops["input_strides"].to_numpy() if "input_strides" in ops else np.full(len(ops), None, dtype=object)
    hints = {**conv_hints(ops), **parameter_hints(ops), **list_dtype_hints(ops), **index_hints(ops)}
    name_codes = (ops["name"] if isinstance(ops["name"].dtype, pd.CategoricalDtype) else ops["name"].astype("category")).cat.codes.to_numpy()
    # Interned inputs: equal inputs are the same objects, so ids make a cheap key.
    columns = [name_codes[op_rows].astype(np.int64)] + [np.fromiter(map(id, column[op_rows]), dtype=np.int64, count=len(op_rows))
                                                         for column in (dims, types, concrete, strides)]
    if hints:
        hint_text = [repr(hints[r]) if hints.get(r) else "" for r in op_rows.tolist()]
        columns.append(pd.factorize(np.array(hint_text, dtype=object))[0].astype(np.int64))
    _, first, call = np.unique(combine(columns), return_index=True, return_inverse=True)
    costs = []
    for op_row in op_rows[first].tolist():
        hint = hints.get(op_row)
        costs.append(op_cost(op_names[op_row], dims[op_row], types[op_row], concrete[op_row], hint, strides[op_row]))
    return call.reshape(-1), costs


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


INDUCTOR_ARGUMENTS = "Inductor kernel arguments"


def _from_inductor_arguments(trace: Trace, kind: np.ndarray, out: dict) -> None:
    """Inductor kernels (triton_poi_* / triton_red_* / triton_per_*) that neither op shapes
    nor Inductor's metadata costed: from the record_function Inductor opens around each
    launch, named after the kernel, whose inputs are the kernel's tensor arguments (see
    tracekit.costs.inductor). A kernel under its own launcher record takes that record's
    cost; one without (a CUDA-graph replay of a kernel recorded at capture time) takes the
    cost of the records of that name when they all agree."""
    k, ops = trace.kernels, trace.ops
    todo = (kind == "kernel") & np.isnan(out["flops"])
    if not todo.any() or not len(ops):
        return
    names = k["name"] if isinstance(k["name"].dtype, pd.CategoricalDtype) else k["name"].astype("category")
    wanted = {str(n) for n in names.cat.categories if is_inductor_kernel(str(n))}
    if not wanted:
        return
    op_names = as_text(ops["name"])
    launchers = np.flatnonzero(np.isin(op_names, list(wanted)))
    if not len(launchers):
        return
    dims, types, concrete = ops["input_dims"].to_numpy(), ops["input_types"].to_numpy(), ops["concrete_inputs"].to_numpy()
    strides = ops["input_strides"].to_numpy() if "input_strides" in ops else np.full(len(ops), None, dtype=object)
    per_op = {int(r): inductor_kernel_cost(dims[r], types[r], concrete[r], strides[r]) for r in launchers.tolist()}
    by_name: dict[str, set] = {}
    for r, cost in per_op.items():
        by_name.setdefault(str(op_names[r]), set()).add(cost)
    kernel_names, op = as_text(k["name"]), k["op"].to_numpy()
    for row in np.flatnonzero(todo).tolist():
        name = str(kernel_names[row])
        if name not in by_name:
            continue
        own = per_op.get(int(op[row])) if op[row] >= 0 and str(op_names[op[row]]) == name else None
        costs = by_name[name]
        cost = own if own is not None else (next(iter(costs)) if len(costs) == 1 else None)
        if isinstance(cost, Cost):
            _set(out, np.array([row]), cost, 1.0, INDUCTOR_ARGUMENTS)
        elif isinstance(cost, Unknown):
            out["unknown_reason"][row] = cost.reason


def _element_size_from_kernels(k: pd.DataFrame, rows: np.ndarray, group: np.ndarray, receives: np.ndarray,
                                call: np.ndarray, costs: list) -> tuple[np.ndarray, list]:
    """A tensor-list op (cat, stack) records no dtype, so its cost assumed fp32; the kernels
    it launched are templated on the element size (OpaqueType<2u> for bf16 / fp16). Where
    every kernel of a call that takes its cost names the same size, the call's cost is
    rescaled to it: `call` (per group, an index into `costs`) and `costs` are extended."""
    # a dtype assumed, or read from the producing op: the kernel's own element size overrides both
    assumed = np.array([isinstance(c, Cost) and (ASSUMED_FP32 in c.note or LIST_DTYPE_FROM_PRODUCER in c.note)
                        for c in costs] + [False])[call]
    if not assumed.any():
        return call, costs
    names = k["name"] if isinstance(k["name"].dtype, pd.CategoricalDtype) else k["name"].astype("category")
    size_by_code = np.array([element_bytes_from_kernel(str(n)) or np.nan for n in names.cat.categories] + [np.nan])
    size = size_by_code[names.cat.codes.to_numpy()[rows]]
    mine = receives & assumed[group]
    n_groups = len(call)
    members = np.bincount(group[mine], minlength=n_groups)
    unnamed = np.bincount(group[mine], weights=np.isnan(size[mine]), minlength=n_groups)
    lowest, highest = np.full(n_groups, np.inf), np.full(n_groups, -np.inf)
    named = mine & ~np.isnan(size)  # a NaN in minimum.at warns; groups with one are left alone (unnamed > 0)
    np.minimum.at(lowest, group[named], size[named])
    np.maximum.at(highest, group[named], size[named])
    rescaled = np.flatnonzero(assumed & (members > 0) & (unnamed == 0) & (lowest == highest))
    call, costs = call.copy(), list(costs)
    by_cost_and_size: dict[tuple[int, float], int] = {}
    for g in rescaled.tolist():
        key = (int(call[g]), float(lowest[g]))
        if key not in by_cost_and_size:
            cost, size_g = costs[key[0]], key[1]
            scale = size_g / element_bytes(cost.dtype)  # from the dtype the cost assumed
            costs.append(Cost(cost.flops, cost.bytes_read * scale, cost.bytes_written * scale, cost.kind, sized_dtype(size_g),
                              f"element size {size_g:g} B from the kernel's OpaqueType"))
            by_cost_and_size[key] = len(costs) - 1
        call[g] = by_cost_and_size[key]
    return call, costs


INFERRED, INFERRED_BY_NAME = "inferred from identical kernels", "inferred from kernels of the same name"


def _inferred(k: pd.DataFrame, out: dict) -> None:
    """Kernels with no op take the cost of identical kernels (same name and launch grid)
    costed from op shapes, when every one of them has the very same cost. Kineto often
    records no grid for kernels launched before the capture: those are compared by name
    alone, and borrow only when every donor of that name (whatever its grid) agrees."""
    unknown = np.isnan(out["flops"]) & (k["op"].to_numpy() < 0) & (as_text(k["kind"]) == "kernel")
    if not unknown.any():
        return
    known = (out["cost_source"] == "op shapes")
    if not known.any():
        return
    names = k["name"] if isinstance(k["name"].dtype, pd.CategoricalDtype) else k["name"].astype("category")
    name = names.cat.codes.to_numpy().astype(np.int64)
    full = combine([name, *(k[c].to_numpy() for c in ("grid_x", "grid_y", "grid_z", "block_x"))])
    grid_known = (k["grid_x"].to_numpy() >= 0)
    _borrow(full, known, unknown & grid_known, out, INFERRED)
    _borrow(name, known, unknown & ~grid_known, out, INFERRED_BY_NAME)


def _borrow(sig: np.ndarray, known: np.ndarray, rows: np.ndarray, out: dict, source: str) -> None:
    """`rows` take the cost of the `known` kernels with the same signature, when all of
    those agree on FLOPs, bytes read and bytes written (NaN counts as a value)."""
    if not rows.any():
        return
    donors = np.flatnonzero(known)
    table = pd.DataFrame({"sig": sig[donors], "flops": out["flops"][donors], "read": out["bytes_read"][donors],
                          "written": out["bytes_written"][donors], "donor": donors})
    grouped = table.groupby("sig", sort=False)
    agree = (grouped[["flops", "read", "written"]].nunique(dropna=False) == 1).all(axis=1)
    first = grouped["donor"].first()[agree]
    wanted = np.flatnonzero(rows)
    donor = first.reindex(sig[wanted]).to_numpy()
    keep = ~np.isnan(donor)
    wanted, donor = wanted[keep], donor[keep].astype(np.int64)
    keep = ~np.isnan(out["flops"][donor])
    wanted, donor = wanted[keep], donor[keep]
    if not len(wanted):
        return
    # Donors have an op and these rows have none, so no row is both: one vectorised copy.
    for f in ("flops", "bytes_read", "bytes_written", "cost_kind", "dtype", "cost_estimate"):
        out[f][wanted] = out[f][donor]
    out["cost_source"][wanted] = source
    out["unknown_reason"][wanted] = None
