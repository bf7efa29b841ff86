"""PyTorch's own per-kernel FLOPs and GB (torch._inductor.analysis.profile_analysis), matched
with tracekit's costs of the same kernels.

profile_analysis's `augment_trace` gives every kernel event the `kernel_flop` and
`kernel_num_gb` of the CPU op whose `External id` it carries (the innermost op around the
launch): the op's whole count on each of its kernels. tracekit shares an op's cost among the
kernels it launched, so the two are compared per op (per External id): tracekit's sum over the
op's kernels against profile_analysis's value for the op.

Bytes are compared under profile_analysis's own definitions, with one of its bugs taken out:
`_get_size_from_string` looks the Kineto type string up as a torch attribute, so only "float",
"int", "double" and "bool" get their size; "c10::BFloat16", "c10::Half" and "long int" count
1 byte. "pa bytes, true sizes" is its count with each element at its real size:
  - mm, addmm, bmm, baddbmm: `2*(M*K + N*K + M*N)*itemsize` (+ the addend; bmm adds its first
    input again): compared with twice tracekit's read+written bytes;
  - every other op (`_default_estimate_gb`): every tensor argument counted as read (scalars are
    not memory): compared with tracekit's bytes_read;
  - convolution: input elements read per output element plus weights, in elements: not compared.
"""

from __future__ import annotations

import logging
import math
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
        failed = False
        if "kernel_flop" not in args:  # their helper stopped before this kernel
            try:
                flops = pa._calculate_flops(op) or pa._calculate_flops(e)
                gb = pa._estimate_gb(op)
            except Exception as exc:
                failures[f"{op['name']}: {type(exc).__name__}"] += 1
                failed = True
                flops, gb = float("nan"), float("nan")
            args["kernel_flop"], args["kernel_num_gb"] = flops, gb
        if failed and op["name"] not in ATTENTION and op["name"] != CONV_BACKWARD:
            continue
        rows.append({
            "name": e["name"], "ts": float(e["ts"]), "correlation": args.get("correlation"), "device": args.get("device"),
            "external_id": args["External id"], "op": op["name"], "shapes": str(op["args"].get("Input Dims")),
            "types": op["args"].get("Input type"),
            "pa_true_bytes": _true_size_bytes(pa, op, float(args["kernel_num_gb"]) * 1e9),
            "inductor_flops": float(args["kernel_flop"]),
            "inductor_gb": float(args["kernel_num_gb"]),
            **attention_reference(op), **conv_reference(pa, op),
        })
    if failures:
        notes.append("per-kernel failures: " + ", ".join(f"{k} x{v}" for k, v in sorted(failures.items())))
    kernels = [e for e in events if e.get("cat") == "kernel" and isinstance(e.get("args"), dict)]
    unlinked = sum(1 for e in kernels if e["args"].get("External id") not in ops)
    if unlinked:
        same = sum(1 for e in kernels if e["args"].get("External id") not in ops
                   and e["args"].get("External id") == e["args"].get("correlation"))
        notes.append(f"{unlinked} of {len(kernels)} kernels carry an External id no cpu_op has"
                     + (f" ({same} equal to their correlation id)" if same else "")
                     + "; profile_analysis links a kernel to its op only by External id (extern_mapping[id][0] "
                       "on an empty list is its IndexError)")
    kernels_seen = len(kernels)
    if kernels_seen == 0:
        cats = {e.get("cat") for e in events}
        if "Kernel" in cats:
            notes.append("no event with cat 'kernel': the 2021 schema says 'Kernel'/'Operator' and 'external id', "
                         "which profile_analysis does not read")
    return pd.DataFrame(rows), notes


# Attention ops whose recorded shapes torch's own sdpa_flop_count can take. profile_analysis
# hands flop_registry the recorded dims as lists where its attention formulas want tensors
# (AttributeError: 'list' object has no attribute 'shape'); and _flash_attention_forward's
# formula reads q as (batch, heads, seq, dim) while the op's recorded q is (batch, seq, heads,
# dim). So the reference here is sdpa_flop_count on (batch, heads, seq, dim) shapes.
ATTENTION = {
    # name: (layout of q/k/v, index of is_causal in Concrete Inputs, index of cum_seq_q)
    "aten::_flash_attention_forward": ("BSHD", 8, 3),
    "aten::_scaled_dot_product_flash_attention": ("BHSD", 4, None),
    "aten::_scaled_dot_product_efficient_attention": ("BHSD", 5, None),
    "aten::_scaled_dot_product_cudnn_attention": ("BHSD", 6, None),
}


def attention_reference(op: dict) -> dict[str, Any]:
    """torch.utils.flop_counter.sdpa_flop_count on the op's recorded shapes (every (query, key)
    pair: it does not count causal masking), with the causal flag and sequence lengths."""
    spec = ATTENTION.get(op["name"])
    if spec is None:
        return {}
    from torch.utils.flop_counter import sdpa_flop_count

    layout, causal_at, cum_at = spec
    dims = op["args"].get("Input Dims") or []
    concrete = op["args"].get("Concrete Inputs") or []
    if len(dims) < 3 or any(not isinstance(d, list) or len(d) != 4 for d in dims[:3]):
        return {}
    if cum_at is not None and cum_at < len(dims) and dims[cum_at]:  # varlen: lengths not recorded
        return {}
    q, k, v = ([d[0], d[2], d[1], d[3]] if layout == "BSHD" else list(d) for d in dims[:3])
    try:
        flops = float(sdpa_flop_count(q, k, v))
    except Exception:
        return {}
    causal = concrete[causal_at] == "True" if causal_at < len(concrete) else None
    return {"ref_flops": flops, "ref_name": "sdpa_flop_count", "causal": causal, "sq": q[2], "sk": k[2]}


# Convolution ops: (index of stride, padding, dilation, groups in the op's arguments)
CONVOLUTIONS = {
    "aten::miopen_convolution": (4, 3, 5, 6),  # (self, weight, bias, padding, stride, dilation, groups, ...)
    "aten::cudnn_convolution": (3, 2, 4, 5),  # (self, weight, padding, stride, dilation, groups, ...)
    "aten::convolution": (3, 4, 5, 8),  # (input, weight, bias, stride, padding, dilation, transposed, out_pad, groups)
    "aten::_convolution": (3, 4, 5, 8),
}
CONV_BACKWARD = "aten::convolution_backward"  # (grad_out, input, weight, bias_sizes, stride, padding, dilation,
#                                                transposed, output_padding, groups, output_mask)


def _ints(text: Any) -> list[int] | None:
    try:
        return [int(v) for v in str(text).strip("[]").split(",") if v.strip()]
    except ValueError:
        return None


def conv_reference(pa, op: dict) -> dict[str, Any]:
    """torch.utils.flop_counter's convolution formulas on the op's recorded shapes, the output
    size from stride, padding and dilation; and what profile_analysis's conv_adapter makes of
    the same convolution (its output size ignores padding and dilation)."""
    from torch.utils import flop_counter as fc

    name = op["name"]
    dims = op["args"].get("Input Dims") or []
    concrete = op["args"].get("Concrete Inputs") or []
    if name == CONV_BACKWARD and len(dims) >= 3 and len(concrete) >= 11:
        stride, pad, dil, mask = _ints(concrete[4]), _ints(concrete[5]), _ints(concrete[6]), concrete[10]
        if concrete[7] == "True" or any(not v for v in (stride, pad, dil)) or not mask:
            return {}
        output_mask = [m.strip() == "True" for m in str(mask).strip("[]").split(",")]
        try:
            flops = fc.conv_backward_flop(dims[0], dims[1], dims[2], None, stride, pad, dil, False, [0] * len(stride), 1,
                                          output_mask, out_val=(dims[1], dims[2], None))
        except Exception:
            return {}
        return {"ref_flops": float(flops), "ref_name": "torch conv_backward_flop"}
    spec = CONVOLUTIONS.get(name)
    if spec is None or len(dims) < 2 or len(concrete) <= max(spec):
        return {}
    x, w = dims[0], dims[1]
    stride, pad, dil = (_ints(concrete[i]) for i in spec[:3])
    if name in ("aten::convolution", "aten::_convolution") and concrete[6] == "True":
        return {}  # transposed
    if not isinstance(x, list) or not isinstance(w, list) or len(x) != len(w) or \
            any(v is None or len(v) != len(x) - 2 for v in (stride, pad, dil)):
        return {}  # stride/padding not recorded (no 'Concrete Inputs'): no reference
    spatial = [(xi + 2 * p - d * (k - 1) - 1) // s + 1 for xi, k, s, p, d in zip(x[2:], w[2:], stride, pad, dil)]
    out = [x[0], w[0]] + spatial
    ref = float(fc.conv_flop_count(x, w, out, transposed=False))
    # profile_analysis's path for aten::convolution: conv_adapter + flop_registry[aten.convolution]
    as_convolution = ["", "", "", str(stride), str(pad), str(dil), "False", "[0]", str(spec and concrete[spec[3]])]
    try:
        import torch

        args, kwargs = pa.conv_adapter(tuple([x, w, None, stride, pad, dil, False]), tuple(as_convolution))
        theirs = float(pa.flop_registry[torch.ops.aten.convolution](*args, **kwargs))
    except Exception:
        theirs = float("nan")
    return {"ref_flops": ref, "ref_name": "torch conv_flop_count", "pa_conv_adapter_flops": theirs}


def _true_size_bytes(pa, op: dict, their_bytes: float) -> float:
    """profile_analysis's byte count for the op with every element at its real size; NaN
    where it has no byte definition (convolution) or the sizes are not recorded (tensor lists)."""
    family = op["name"].split("::")[-1]
    dims, types = op["args"].get("Input Dims") or [], op["args"].get("Input type") or []
    if family in CONV_FAMILY:
        return float("nan")
    if family in MM_FAMILY:  # one element size throughout: rescale their count
        t = types[1] if family in ("addmm", "baddbmm", "bmm") and len(types) > 1 else (types[0] if types else "")
        dtype = pa._dtype_map.get(t)
        return their_bytes * dtype.itemsize / pa._get_size_from_string(t) if dtype is not None else float("nan")
    total = 0.0
    for d, t in zip(dims, types):
        if t == "TensorList":
            return float("nan")
        dtype = pa._dtype_map.get(t) if isinstance(t, str) else None
        if dtype is None or not isinstance(d, list) or not d:  # scalars, lists of scalars, None
            continue
        total += math.prod(d) * dtype.itemsize
    return total


def on_tracekit_links(a) -> pd.DataFrame:
    """profile_analysis's formulas (_calculate_flops, _estimate_gb) on the op tracekit links to
    each kernel, for traces where its own External-id link finds nothing. Ops without
    'Concrete Inputs' get empty ones: its _calculate_flops returns 0 without that key."""
    from torch._inductor.analysis import profile_analysis as pa

    k = a.kernels
    ops = a.trace.ops if a.trace is not None else None
    if ops is None or ops.empty:
        return pd.DataFrame()
    linked = k[(k["op"] >= 0) & (k["kind"] == "kernel")]
    rows = []
    cache: dict[int, dict] = {}
    for r in linked.itertuples():
        op_row = int(r.op)
        if op_row not in cache:
            o = ops.iloc[op_row]
            dims = o["input_dims"] if isinstance(o["input_dims"], list) else None
            if dims is None:
                cache[op_row] = {}
                continue
            types = list(o["input_types"]) if isinstance(o["input_types"], list) else [""] * len(dims)
            concrete = list(o["concrete_inputs"]) if isinstance(o["concrete_inputs"], list) else [""] * len(dims)
            event = {"name": str(o["name"]), "args": {"Input Dims": dims, "Input type": types, "Concrete Inputs": concrete}}
            try:
                flops, gb = float(pa._calculate_flops(event)), float(pa._estimate_gb(event))
            except Exception:
                flops, gb = float("nan"), float("nan")
            cache[op_row] = {"op": str(o["name"]), "shapes": str(dims), "types": types, "inductor_flops": flops,
                             "inductor_gb": gb, "pa_true_bytes": _true_size_bytes(pa, event, gb * 1e9),
                             **attention_reference(event), **conv_reference(pa, event)}
        if cache[op_row]:
            rows.append({"name": str(r.name), "external_id": op_row, "start": r.start, "flops": r.flops,
                         "bytes_read": r.bytes_read, "bytes_written": r.bytes_written, "cost_source": r.cost_source,
                         **cache[op_row]})
    return pd.DataFrame(rows)


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
        pa_true_bytes=("pa_true_bytes", "first"),
        **{c: (c, "first") for c in ("ref_flops", "ref_name", "causal", "sq", "sk", "pa_conv_adapter_flops") if c in matched.columns},
        tk_flops=("flops", lambda s: s.sum(min_count=1)), tk_read=("bytes_read", lambda s: s.sum(min_count=1)),
        tk_written=("bytes_written", lambda s: s.sum(min_count=1)), tk_source=("cost_source", "first"),
    ).reset_index()
    g["family"] = g["op"].str.replace("aten::", "", regex=False)
    mm = g["family"].isin(MM_FAMILY)
    g["tk_bytes_their_def"] = np.where(mm, 2 * (g["tk_read"] + g["tk_written"]), g["tk_read"])
    g["inductor_bytes"] = g["inductor_gb"] * 1e9
    g["flop_diff"] = _rel(g["tk_flops"], g["inductor_flops"].where(g["inductor_flops"] > 0))
    g["byte_diff"] = _rel(g["tk_bytes_their_def"], g["pa_true_bytes"].where(g["pa_true_bytes"] > 0))
    # Their default counts every tensor argument as read: outputs passed in (copy_'s
    # destination, fill_, out=, vLLM's out-first ops) included. tracekit's read+written then matches.
    g["all_args_match"] = ~mm & (_rel(g["tk_read"] + g["tk_written"], g["pa_true_bytes"]).abs() <= 0.02)
    g["reason"] = [reason(o, t, f, b, m, _dims(sh), tkf, paf, tkb, pab) for o, t, f, b, m, sh, tkf, paf, tkb, pab in
                   zip(g["op"], g["types"], g["flop_diff"], g["byte_diff"], g["all_args_match"], g["shapes"], g["tk_flops"],
                       g["inductor_flops"], g["tk_bytes_their_def"], g["pa_true_bytes"])]
    if "ref_flops" in g.columns:
        attn = g["ref_flops"].notna()
        g.loc[attn, "flop_diff"] = _rel(g.loc[attn, "tk_flops"], g.loc[attn, "ref_flops"])
        g.loc[attn, "reason"] = [reference_reason(d, g_.get("causal"), g_.get("sq"), g_.get("sk"), g_.get("ref_name"))
                                 for d, (_, g_) in zip(g.loc[attn, "flop_diff"], g[attn].iterrows())]
    return g


def reference_reason(diff: float, causal: Any, sq: Any, sk: Any, ref_name: Any = None) -> str:
    """tracekit counts the (query, key) pairs a causal mask keeps; torch's formula every pair.
    For Sq = Sk = S the expected ratio is (S + 1) / (2 S): checked, not assumed."""
    if diff != diff:
        return "unexplained FLOPs (tracekit has no cost)"
    if abs(diff) <= 0.02:
        return "agree"
    if causal and sq == sk and sq:
        expected = (sq + 1) / (2 * sq) - 1
        if abs(diff - expected) <= 0.005:
            return (f"definition: causal: tracekit counts S(S+1)/2 of the S^2 (query, key) pairs (S={int(sq)}); "
                    "torch's sdpa_flop_count counts all")
    return "unexplained FLOPs"


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
    if "ref_flops" in ops.columns:
        for ref_name, ref in ops[ops["ref_flops"].notna()].groupby("ref_name"):
            if ref_name == "sdpa_flop_count":
                continue
            costed = ref[ref["tk_flops"].notna()]
            rows.append({"metric": f"FLOPs convolution, {ref_name} on the recorded shapes ({len(ref)} ops, {len(costed)} costed "
                                   "by tracekit)", "tracekit": costed["tk_flops"].sum(min_count=1),
                         "peer": costed["ref_flops"].sum(), "unit": "flop"})
        if "pa_conv_adapter_flops" in ops.columns:
            conv = ops[ops["pa_conv_adapter_flops"].notna() & ops["tk_flops"].notna()]
            if len(conv):
                rows.append({"metric": f"FLOPs convolution, profile_analysis's conv_adapter (as on aten::convolution) ({len(conv)} ops)",
                             "tracekit": conv["tk_flops"].sum(), "peer": conv["pa_conv_adapter_flops"].sum(), "unit": "flop"})
        attn = ops[ops["ref_flops"].notna() & (ops.get("ref_name") == "sdpa_flop_count")]
        if len(attn):
            rows.append({"metric": f"FLOPs attention, torch sdpa_flop_count (no causal) on the recorded shapes ({len(attn)} ops)",
                         "tracekit": attn["tk_flops"].sum(min_count=1), "peer": attn["ref_flops"].sum(), "unit": "flop"})
            causal = attn[attn["causal"] == True]  # noqa: E712 (object column)
            if len(causal) and len(causal) < len(attn) or len(causal) and causal["sq"].eq(causal["sk"]).all():
                expected = (causal["ref_flops"] * (causal["sq"] + 1) / (2 * causal["sq"])).where(causal["sq"] == causal["sk"])
                rows.append({"metric": f"FLOPs attention, causal ops, torch x (S+1)/2S ({len(causal)} ops)",
                             "tracekit": causal["tk_flops"].sum(min_count=1), "peer": expected.sum(min_count=1), "unit": "flop"})
    byte_ops = ops[ops["tk_bytes_their_def"].notna() & (ops["pa_true_bytes"] > 0)]
    mm = byte_ops["family"].isin(MM_FAMILY)
    for kind, g in (("GEMM 2x(A+B+C)", byte_ops[mm]), ("other ops, tensor args as read", byte_ops[~mm])):
        if not len(g):
            continue
        rows.append({"metric": f"bytes, {kind}, true sizes ({len(g)} ops)", "tracekit": g["tk_bytes_their_def"].sum(),
                     "peer": g["pa_true_bytes"].sum(), "unit": "B"})
        plain = g[g["reason"].isin(["agree", "unexplained"])]
        if 0 < len(plain) < len(g):
            rows.append({"metric": f"bytes, {kind}, true sizes, ops no rule explains ({len(plain)} ops)",
                         "tracekit": plain["tk_bytes_their_def"].sum(), "peer": plain["pa_true_bytes"].sum(), "unit": "B"})
    return rows


def mismatches(ops: pd.DataFrame, threshold: float = 0.02) -> pd.DataFrame:
    """Op groups (name + shapes + types) whose FLOPs or bytes differ by more than threshold."""
    if ops.empty:
        return ops
    o = ops
    their_bug = o["reason"].str.startswith("their bug") & (o["inductor_bytes"] > 0)  # e.g. tensor lists: no true-size figure
    bad = o[(o["flop_diff"].abs() > threshold) | (o["byte_diff"].abs() > threshold) | their_bug].copy()
    bad["types"] = bad["types"].astype(str)
    return bad.groupby(["op", "shapes", "types"], sort=False).agg(
        count=("external_id", "size"), tk_flops=("tk_flops", "first"), inductor_flops=("inductor_flops", "first"),
        flop_diff=("flop_diff", "first"), tk_bytes=("tk_bytes_their_def", "first"), inductor_bytes=("inductor_bytes", "first"),
        pa_true_bytes=("pa_true_bytes", "first"),
        byte_diff=("byte_diff", "first"), tk_source=("tk_source", "first"), reason=("reason", "first"),
    ).reset_index()


GATHERS = {"index_select", "gather", "embedding"}
CACHE_WRITES = {"reshape_and_cache_flash", "reshape_and_cache"}
COLLECTIVES = {"record_param_comms", "all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "multimem_all_reduce_"}


def _dims(text: str) -> list | None:
    import ast

    try:
        dims = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return dims if isinstance(dims, list) else None


def _elems(dims: list | None, i: int) -> int | None:
    d = dims[i] if dims and i < len(dims) else None
    return math.prod(d) if isinstance(d, list) and d and all(isinstance(v, int) for v in d) else None


def reason(op: str, types: Any, flop_diff: float, byte_diff: float, all_args_match: bool = False, dims: list | None = None,
           tk_flops: float = float("nan"), pa_flops: float = float("nan"), tk_bytes: float = float("nan"),
           pa_bytes: float = float("nan")) -> str:
    """Why tracekit and profile_analysis differ on one op group, where a rule explains it (the
    GEMM rules are checked against the shapes); "unexplained" sends a person to read the trace."""
    family = op.split("::")[-1]
    types = list(types) if isinstance(types, (list, tuple)) else []
    flop_off = flop_diff == flop_diff and abs(flop_diff) > 0.02
    byte_off = byte_diff == byte_diff and abs(byte_diff) > 0.02
    if flop_off and family in ("addmm", "baddbmm") and dims and len(dims) >= 3:
        a, b = dims[1], dims[2]
        out = (a[0] * b[-1]) if family == "addmm" else (a[0] * a[1] * b[-1])
        if isinstance(out, int) and abs(tk_flops - pa_flops - out) <= 0.5:
            flop_off = False  # the difference is exactly the addend: checked
            if not byte_off:
                return ("definition: tracekit counts the addend's M·N additions in addmm/baddbmm FLOPs; torch's "
                        "flop counter counts 2·M·N·K only (the difference is exactly M·N here)")
    if flop_off:
        return "unexplained FLOPs"
    if byte_off and family == "bmm":
        a_elems = _elems(dims, 0)
        if a_elems is not None and pa_bytes - tk_bytes > 0 and types and \
                abs((pa_bytes - tk_bytes) / a_elems - _itemsize(types[0])) < 1e-9:
            return ("their bug: _estimate_gb for bmm adds the first input once more, as if it were baddbmm's addend "
                    "(the difference is exactly that input's bytes here)")
    if "TensorList" in types:
        return ("their bug: _default_estimate_gb flattens a tensor list's shapes and multiplies all the dims "
                "together (two [a,b] tensors count a*b*a*b elements)")
    if not byte_off:
        return "agree"
    if all_args_match:
        return ("definition: their default counts every tensor argument as read, outputs passed in included "
                "(copy_ destination, fill_, out=, out-first custom ops); tracekit's read+written equals it")
    if family in GATHERS:
        if byte_diff > 0:  # more than every tensor argument read once: more than the minimum traffic
            return ("tracekit's bug: the gather reads more bytes than its whole table and index hold (it counts every "
                    "picked row, repeats included; the minimum traffic is at most the table)")
        return "definition: their default reads the whole table; a gather reads the rows it picks"
    if family in CACHE_WRITES:
        return "definition: their default reads the whole KV cache; the op writes the new tokens' slots"
    if family == "rotary_embedding":
        return "definition: their default reads the whole cos/sin cache; the op reads the rows of its positions"
    if family in COLLECTIVES:
        return "definition: tracekit's collective bytes are the link traffic (ring algorithm), theirs the input tensor"
    return "unexplained"


def _itemsize(type_name: str) -> float:
    from torch._inductor.analysis import profile_analysis as pa

    dtype = pa._dtype_map.get(type_name)
    return float(dtype.itemsize) if dtype is not None else float("nan")


def _rel(ours: pd.Series, theirs: pd.Series) -> pd.Series:
    return (ours - theirs) / theirs
