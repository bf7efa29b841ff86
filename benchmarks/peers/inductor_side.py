"""PyTorch's own per-kernel FLOPs and GB (torch._inductor.analysis.profile_analysis), matched
with tracekit's costs of the same kernels.

profile_analysis's `augment_trace` gives every kernel event the `kernel_flop` and
`kernel_num_gb` of the CPU op whose `External id` it carries (the innermost op around the
launch): the op's whole count on each of its kernels. tracekit shares an op's cost among the
kernels it launched, so the two are compared per op (per External id): tracekit's sum over the
op's kernels against profile_analysis's value for the op.

Bytes are compared under profile_analysis's own definitions, computed from tracekit's parts:
  - mm, addmm, bmm, baddbmm: `2*(M*K + N*K + M*N)*itemsize` (+ the addend, and for bmm the first
    input again): twice tracekit's read+written bytes of the GEMM operands;
  - every other op (its `_default_estimate_gb`): the inputs only, so tracekit's `bytes_read`;
  - convolution: input elements read per output element plus weights, in elements not bytes:
    not comparable, shown but not diffed.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

import numpy as np
import pandas as pd

MM_FAMILY = {"mm", "addmm", "bmm", "baddbmm"}
CONV_FAMILY = {"convolution", "_convolution", "cudnn_convolution", "_slow_conv2d_forward", "convolution_overrideable"}


def augment(data: dict[str, Any]) -> tuple[pd.DataFrame, list[str]]:
    """Run profile_analysis's augment on the raw trace; one row per kernel event it reached.

    Their `_augment_trace_helper` stops the whole trace at the first op its formulas cannot
    take (an exception), so when it raises, the same per-kernel steps run again with their own
    `_calculate_flops` / `_estimate_gb`, one kernel at a time, and the failures are counted."""
    from torch._inductor.analysis import profile_analysis as pa

    logging.getLogger(pa.__name__).setLevel(logging.ERROR)
    notes: list[str] = []
    events = data["traceEvents"]
    try:
        pa._augment_trace_helper(data)
    except Exception as exc:  # their crash is a finding; the per-kernel loop below recovers
        notes.append(f"augment_trace raised {type(exc).__name__}: {str(exc)[:160]}")
    ops: dict[Any, dict] = {}
    for e in events:
        args = e.get("args")
        if e.get("cat") == "cpu_op" and isinstance(args, dict) and "External id" in args:
            ops.setdefault(args["External id"], e)
    rows = []
    failures: dict[str, int] = defaultdict(int)
    for e in events:
        if e.get("cat") != "kernel" or not isinstance(e.get("args"), dict):
            continue
        args = e["args"]
        op = ops.get(args.get("External id"))
        if op is None:
            continue
        if "kernel_flop" not in args:  # their helper stopped before this kernel
            try:
                flops = pa._calculate_flops(op) or pa._calculate_flops(e)
                gb = pa._estimate_gb(op)
            except Exception as exc:
                failures[f"{op['name']}: {type(exc).__name__}"] += 1
                continue
            args["kernel_flop"], args["kernel_num_gb"] = flops, gb
        rows.append({
            "name": e["name"], "ts": float(e["ts"]), "correlation": args.get("correlation"), "device": args.get("device"),
            "external_id": args["External id"], "op": op["name"], "shapes": str(op["args"].get("Input Dims")),
            "types": op["args"].get("Input type"), "their_size_factor": _their_size_factor(pa, op["args"].get("Input type")),
            "inductor_flops": float(args["kernel_flop"]),
            "inductor_gb": float(args["kernel_num_gb"]),
        })
    if failures:
        notes.append("per-kernel failures: " + ", ".join(f"{k} x{v}" for k, v in sorted(failures.items())))
    kernels_seen = sum(1 for e in events if e.get("cat") == "kernel")
    if kernels_seen == 0:
        cats = {e.get("cat") for e in events}
        if "Kernel" in cats:
            notes.append("no event with cat 'kernel': the 2021 schema says 'Kernel'/'Operator' and 'external id', "
                         "which profile_analysis does not read")
    return pd.DataFrame(rows), notes


def _their_size_factor(pa, types: Any) -> float:
    """profile_analysis's element size over the true one, for the op's first tensor type."""
    for t in types or ():
        dtype = pa._dtype_map.get(t) if isinstance(t, str) else None
        if dtype is not None:
            return pa._get_size_from_string(t) / dtype.itemsize
    return 1.0


def match(inductor: pd.DataFrame, tk: pd.DataFrame) -> pd.DataFrame:
    """Pair profile_analysis's kernel rows with tracekit's kernel rows: same name and
    correlation id, then the n-th by start time within that pair (graph replays and
    legacy traces reuse correlation ids)."""
    if inductor.empty:
        return inductor
    ours = tk[tk["kind"] == "kernel"][["name", "correlation", "start", "flops", "bytes_read", "bytes_written", "op_name",
                                        "cost_source"]].copy()
    ours["name"] = ours["name"].astype(str)
    ours["correlation"] = pd.to_numeric(ours["correlation"], errors="coerce")
    ours = ours.sort_values("start")
    ours["nth"] = ours.groupby(["name", "correlation"]).cumcount()
    theirs = inductor.copy()
    theirs["correlation"] = pd.to_numeric(theirs["correlation"], errors="coerce")
    theirs = theirs.sort_values("ts")
    theirs["nth"] = theirs.groupby(["name", "correlation"]).cumcount()
    return theirs.merge(ours, on=["name", "correlation", "nth"], how="left", validate="one_to_one")


def per_op(matched: pd.DataFrame) -> pd.DataFrame:
    """One row per CPU op (External id): profile_analysis's value once, tracekit's summed over
    the op's kernels (null when tracekit has no cost for any of them)."""
    if matched.empty:
        return matched
    g = matched.groupby("external_id", sort=False).agg(
        op=("op", "first"), shapes=("shapes", "first"), types=("types", "first"), kernels=("name", "size"),
        matched=("start", "count"), inductor_flops=("inductor_flops", "first"), inductor_gb=("inductor_gb", "first"),
        size_factor=("their_size_factor", "first"),
        tk_flops=("flops", lambda s: s.sum(min_count=1)), tk_read=("bytes_read", lambda s: s.sum(min_count=1)),
        tk_written=("bytes_written", lambda s: s.sum(min_count=1)), tk_source=("cost_source", "first"),
    ).reset_index()
    g["family"] = g["op"].str.replace("aten::", "", regex=False)
    g["tk_bytes_their_def"] = np.where(g["family"].isin(MM_FAMILY), 2 * (g["tk_read"] + g["tk_written"]),
                                       np.where(g["family"].isin(CONV_FAMILY), np.nan, g["tk_read"])) * g["size_factor"]
    g["inductor_bytes"] = g["inductor_gb"] * 1e9
    g["flop_diff"] = _rel(g["tk_flops"], g["inductor_flops"].where(g["inductor_flops"] > 0))
    g["byte_diff"] = _rel(g["tk_bytes_their_def"], g["inductor_bytes"].where(g["inductor_bytes"] > 0))
    g["reason"] = [reason(o, t, f, b) for o, t, f, b in zip(g["op"], g["types"], g["flop_diff"], g["byte_diff"])]
    return g


def summary_rows(ops: pd.DataFrame) -> list[dict[str, Any]]:
    """Per op name: FLOPs where profile_analysis has a count, bytes under its definition."""
    rows = []
    if ops.empty:
        return rows
    flop_ops = ops[ops["inductor_flops"] > 0]
    for name, g in flop_ops.groupby("op"):
        both = g[g["tk_flops"].notna()]
        rows.append({"metric": f"FLOPs {name} ({len(g)} ops, {len(both)} costed by tracekit)",
                     "tracekit": both["tk_flops"].sum() if len(both) else None,
                     "peer": both["inductor_flops"].sum() if len(both) else g["inductor_flops"].sum(), "unit": "flop"})
    byte_ops = ops[ops["tk_bytes_their_def"].notna() & (ops["inductor_bytes"] > 0)]
    for kind, mask in (("GEMM 2x(A+B+C)", byte_ops["family"].isin(MM_FAMILY)), ("other ops, inputs only", ~byte_ops["family"].isin(MM_FAMILY))):
        g = byte_ops[mask]
        if len(g):
            rows.append({"metric": f"bytes, {kind} ({len(g)} ops)", "tracekit": g["tk_bytes_their_def"].sum(),
                         "peer": g["inductor_bytes"].sum(), "unit": "B"})
    return rows


def mismatches(ops: pd.DataFrame, threshold: float = 0.02) -> pd.DataFrame:
    """Op groups (name + shapes + types) whose FLOPs or bytes differ by more than threshold."""
    if ops.empty:
        return ops
    o = ops
    bad = o[(o["flop_diff"].abs() > threshold) | (o["byte_diff"].abs() > threshold)].copy()
    bad["types"] = bad["types"].astype(str)
    return bad.groupby(["op", "shapes", "types"], sort=False).agg(
        count=("external_id", "size"), tk_flops=("tk_flops", "first"), inductor_flops=("inductor_flops", "first"),
        flop_diff=("flop_diff", "first"), tk_bytes=("tk_bytes_their_def", "first"), inductor_bytes=("inductor_bytes", "first"),
        byte_diff=("byte_diff", "first"), tk_source=("tk_source", "first"), reason=("reason", "first"),
    ).reset_index()


GATHERS = {"index_select", "gather", "embedding", "index"}
DEST_READ = {"copy_", "fill_", "zero_", "_foreach_copy_"}
CACHE_WRITES = {"reshape_and_cache_flash", "reshape_and_cache"}
INT_TYPES = {"long int", "int", "bool", "unsigned char", "signed char", "short int"}


def reason(op: str, types: Any, flop_diff: float, byte_diff: float) -> str:
    """Why tracekit and profile_analysis differ on one op group, where a rule of theirs
    explains it; "unexplained" sends a person to read the trace."""
    family = op.split("::")[-1]
    types = list(types) if isinstance(types, (list, tuple)) else []
    tensor_types = {t for t in types if t and t not in ("Scalar", "ScalarList", "TensorList", "")}
    flop_off = flop_diff == flop_diff and abs(flop_diff) > 0.02
    byte_off = byte_diff == byte_diff and abs(byte_diff) > 0.02
    if flop_off:
        return "unexplained FLOPs"
    if not byte_off:
        return "agree"
    if "TensorList" in types:
        return ("their bug: _default_estimate_gb flattens a tensor list's shapes and multiplies all the dims "
                "together (two [a,b] tensors count a*b*a*b elements)")
    if family in GATHERS:
        return "definition: their default reads every input whole; a gather reads the rows it picks"
    if family in CACHE_WRITES:
        return "definition: their default reads the whole KV cache; the op writes the new tokens' slots"
    if family in DEST_READ:
        return "definition: their default counts the destination as read; a copy/fill only writes it"
    if len(tensor_types) > 1 and tensor_types & INT_TYPES or len(tensor_types - INT_TYPES) > 1:
        return ("their element sizes: 'long int' and 'c10::BFloat16'/'c10::Half' count 1 byte "
                "(_get_size_from_string), so mixed-dtype ops cannot be rescaled by one factor")
    return "unexplained"


def _rel(ours: pd.Series, theirs: pd.Series) -> pd.Series:
    return (ours - theirs) / theirs
