"""Steps for a trace that marks none: from the structure of what repeats in it.

Used only where the trace has no step range at all (no ProfilerStep, no serving engine's or
user's step annotation: tracekit.trace.step_ownership.step_rows finds none). In order:

1. training: one iteration per optimizer step (`Optimizer.step#AdamW.step`, a
   record_function torch.optim writes around every step), from the end of the previous one
   (the first: from the thread's first op) to its end.
2. the user's own pipeline: the top-level ranges of one thread repeat a cycle of names
   (`denoise_step, denoise_step, kv_recompute, vae_decode` per video chunk): one step per
   cycle, from the previous cycle's end to its own last range's end, so the work that prepares
   a cycle's inputs is that cycle's (the first: from its first op within the lead the later
   cycles show, not from a warm-up before the loop). Their annotations win over what the ops say, unless the cycle is
   finer than the model's forward passes (per-layer ranges).
3. inference: one step per forward pass of the model (tracekit.trace.forwards: the token
   embedding's indices [B, T]), from its embedding op to the next one's (the last: to the
   end of the thread's last op). In a generation (some forward has T = 1) a forward of T > 1
   tokens is `prefill`, one of T = 1 is `decode`; otherwise each is a `forward`. Only where
   the model ran two or more forwards.

The steps are added to the ranges table as host ranges of domain INFERRED_DOMAIN, so every
stage that reads steps (ownership, the step table, throughput, the model) reads them as any
other step; their names say what they are (`decode#3 [B=1]`, `iteration#0`).
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pandas as pd

from tracekit.trace.column_text import as_text, rows_in, rows_where
from tracekit.trace.forwards import token_forwards
from tracekit.trace.frames import Trace
from tracekit.trace.step_ownership import INFERRED_DOMAIN, step_rows

OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#")
Window = tuple[str, int, int, int, int]  # name, start, end, pid, tid


def range_cycles(trace: Trace) -> list[Window]:
    """Steps from the user's top-level ranges repeating one cycle of names (see module doc)."""
    r = trace.ranges
    if r.empty or "depth" not in r:
        return []
    top = np.flatnonzero(~rows_in(r["domain"], ["python", "gpu", INFERRED_DOMAIN]) & (r["depth"].to_numpy() == 0))
    if len(top) < 2:
        return []
    names = as_text(r["name"])
    thread = list(zip(r["pid"].to_numpy()[top].tolist(), r["tid"].to_numpy()[top].tolist()))
    busiest = max(set(thread), key=thread.count)
    rows = top[[t == busiest for t in thread]]
    rows = rows[np.argsort(r["start"].to_numpy()[rows], kind="stable")]
    seq = names[rows].tolist()
    n = len(seq)
    period = next((p for p in range(1, n // 2 + 1) if n % p == 0 and all(seq[i] == seq[i % p] for i in range(n))), None)
    if period is None:
        return []
    start, end = r["start"].to_numpy()[rows], r["end"].to_numpy()[rows]
    firsts = np.arange(0, n, period)
    label = seq[0] if period == 1 else f"{seq[0]}..{seq[period - 1]}"
    # The work between two cycles belongs to the one after it: a loop body prepares its inputs
    # before its first range (the video's noise and KV-cache concat, a training batch's load).
    # The first cycle has no previous one: it takes the lead the later cycles show (their first
    # range's start after the previous cycle's end, the median), and no more of the thread's
    # earlier work (a warm-up before the loop is not the first step's).
    stops = [int(end[f: f + period].max()) for f in firsts]
    leads = [int(start[f]) - stops[j] for j, f in enumerate(firsts[1:])]
    lead = max(0, int(np.median(leads))) if leads else 0
    previous = int(start[0])
    ops = trace.ops
    if lead and {"pid", "tid", "start"} <= set(ops.columns):
        mine = (ops["pid"].to_numpy() == busiest[0]) & (ops["tid"].to_numpy() == busiest[1])
        first = ops["start"].to_numpy()[mine]
        first = first[(first >= previous - 2 * lead) & (first < previous)]  # twice the lead: the first is slower
        previous = int(first.min()) if len(first) else previous  # the first op in the lead
    out = []
    for j, stop in enumerate(stops):
        out.append((f"{label}#{j}", previous, stop, busiest[0], busiest[1]))
        previous = stop
    return out


def optimizer_iterations(trace: Trace) -> list[Window]:
    """Training iterations from the optimizer-step annotations (see the module docstring)."""
    found = []
    for table, domain_ok in ((trace.ranges, lambda t: ~rows_in(t["domain"], ["python", "gpu"])), (trace.ops, None)):
        if table.empty:
            continue
        hit = rows_where(table["name"], lambda n: OPTIMIZER_STEP.search(n[:256]))
        if domain_ok is not None:
            hit &= domain_ok(table)
        if hit.any():
            found.append((table, np.flatnonzero(hit)))
            break
    if not found:
        return []
    table, rows = found[0]
    rows = rows[np.argsort(table["start"].to_numpy()[rows], kind="stable")]
    # Only the outermost hits: a wrapping optimizer (ZeroRedundancyOptimizer around AdamW)
    # records its inner optimizer's step inside its own, one iteration, not two.
    ends = table["end"].to_numpy()[rows]
    reach = np.maximum.accumulate(ends)
    rows = rows[np.r_[True, table["start"].to_numpy()[rows][1:] >= reach[:-1]]] if len(rows) else rows
    pid, tid = int(table["pid"].iat[rows[0]]), int(table["tid"].iat[rows[0]])
    ops = trace.ops
    mine = (ops["pid"].to_numpy() == pid) & (ops["tid"].to_numpy() == tid) if len(ops) else np.zeros(0, dtype=bool)
    first = int(ops["start"].to_numpy()[mine].min()) if mine.any() else int(table["start"].iat[rows[0]])
    out, previous = [], min(first, int(table["start"].iat[rows[0]]))
    for j, i in enumerate(rows):
        end = int(table["end"].iat[i])
        out.append((f"iteration#{j}", previous, end, pid, tid))
        previous = end
    return out


def forward_steps(trace: Trace, forwards: pd.DataFrame | None = None) -> list[Window]:
    """Inference steps, one per forward pass of the model (see the module docstring);
    `forwards`: token_forwards(trace.ops), when the caller has it."""
    forwards = token_forwards(trace.ops) if forwards is None else forwards
    if len(forwards) < 2:
        return []
    # the thread that ran most of them (one model, one loop)
    key = list(zip(forwards["pid"].tolist(), forwards["tid"].tolist()))
    pid, tid = max(set(key), key=key.count)
    forwards = forwards[(forwards["pid"] == pid) & (forwards["tid"] == tid)].reset_index(drop=True)
    if len(forwards) < 2:
        return []
    ops = trace.ops
    mine = (ops["pid"].to_numpy() == pid) & (ops["tid"].to_numpy() == tid)
    last_end = int(ops["end"].to_numpy()[mine].max())
    per = forwards["tokens_per_sequence"].to_numpy()
    generation = bool((per == 1).any())
    starts = forwards["start"].to_numpy()
    out = []
    for j in range(len(forwards)):
        b, t = int(forwards["batch"].iat[j]), int(per[j])
        kind = ("decode" if t == 1 else "prefill") if generation else "forward"
        name = f"{kind}#{j} [B={b}]" if kind == "decode" else f"{kind}#{j} [B={b} T={t}]"
        end = int(starts[j + 1]) if j + 1 < len(forwards) else max(last_end, int(forwards["end"].iat[j]))
        out.append((name, int(starts[j]), end, pid, tid))
    return out


def inferred_windows(trace: Trace) -> list[Window]:
    """The steps of a trace without step ranges, by the first rule that finds any; [] else.
    A cycle of ranges finer than the model's forward passes (more cycles than forwards: the
    per-layer `attention`, `mlp` ranges of one forward) is the model's layers, not steps."""
    if len(step_rows(trace)):
        return []
    iterations = optimizer_iterations(trace)
    if iterations:
        return iterations
    forwards = token_forwards(trace.ops)
    cycles = range_cycles(trace)
    if cycles and (not len(forwards) or len(cycles) <= len(forwards)):
        return cycles
    return forward_steps(trace, forwards)


def with_inferred_steps(trace: Trace) -> Trace:
    """The trace with its inferred steps added to the ranges table (itself when none are)."""
    windows = inferred_windows(trace)
    if not windows:
        return trace
    r = trace.ranges
    added = pd.DataFrame({
        "name": [w[0] for w in windows], "domain": INFERRED_DOMAIN,
        "pid": np.array([w[3] for w in windows], dtype=np.int64), "tid": np.array([w[4] for w in windows], dtype=np.int64),
        "start": np.array([w[1] for w in windows], dtype=np.int64), "end": np.array([w[2] for w in windows], dtype=np.int64)})
    for column in r.columns:
        if column not in added:
            added[column] = -1 if column in ("parent", "depth") else None
    added["depth"] = 0
    ranges = pd.concat([r.astype({c: object for c in ("name", "domain")}), added[r.columns]], ignore_index=True)
    for c in ("name", "domain"):
        ranges[c] = ranges[c].astype("category")
    for c in r.columns:
        if c not in ("name", "domain") and r[c].dtype != ranges[c].dtype:
            ranges[c] = ranges[c].astype(r[c].dtype)
    return replace(trace, ranges=ranges)
