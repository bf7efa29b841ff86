"""The steps of a trace, and where they came from: the one step finder (find_steps).

Names label what the structure found; a range is a step only if it holds whole forwards. In
order, the first that finds any:

0. the user's `--step RANGE_OR_REGEX`: the outermost ranges or Python frames of that name.
1. the trace's own step ranges (tracekit.trace.step_ownership.step_rows: ProfilerStep, a
   serving engine's or user's step annotation, a diffusion pipeline's call).
2. training: one iteration per optimizer step (`Optimizer.step#AdamW.step`, a
   record_function torch.optim writes around every step), from the end of the previous one
   (the first: from the thread's first op) to its end.
3. the user's own pipeline: the top-level ranges of one thread repeat a cycle of names
   (`denoise_step, denoise_step, kv_recompute, vae_decode` per video chunk): one step per
   cycle, from the previous cycle's end to its own last range's end, so the work that prepares
   a cycle's inputs is that cycle's (the first: from its first op within the lead the later
   cycles show, not from a warm-up before the loop). Only where the cycle holds whole
   forwards: not more cycles than forwards, and no recurring weight read outside its ranges
   (a DiT block's `self_attention`, `cross_attention`, `ffn` skip its modulation and the
   patch embedding: per-layer ranges, never steps). Library and profiler ranges
   (tracekit.structure.library_ranges: NCCL's domain, `aten::` ranges) never form a cycle.
4. a pipeline's loop (tracekit.structure.pipeline): one step per period of the repeat of the
   calls, where a period holds several calls (a guidance pair, a speculative round of drafts
   and a verify, a streaming chunk) or its body is not a token model (a denoiser between a
   text encoder and a VAE); a token model's own loop is its forwards (5).
5. a token model: one step per forward pass (tracekit.structure.forwards: the token embedding's
   indices [B, T]), from its embedding op to the next one's (the last: to the end of the
   thread's last op). In a generation (some forward has T = 1) a forward of T > 1 tokens is
   `prefill`, one of T = 1 is `decode`; otherwise each is a `forward`. Only where the model
   ran two or more forwards.
6. any model: the outermost repeat of the host's top-level ops (name + input shapes) whose
   units read weights (tracekit.structure.repeated_steps): the 8 denoise steps of a video
   DiT profiled with default options, the chunks of a streaming pipeline.
7. without shapes (torch.profiler's defaults): the outermost repeat of the top-level op
   names whose units hold weight ops, the weaker evidence named as the source.

The steps are added to the ranges table as host ranges of domain INFERRED_DOMAIN, so every
stage that reads steps (ownership, the step table, throughput, the model) reads them as any
other step; their names say what they are (`decode#3 [B=1]`, `iteration#0`, `chunk#2`), and
trace.meta["step_source"] says where they came from (STEP_SOURCES).
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pandas as pd

from tracekit.errors import TraceError
from tracekit.trace.autograd import op_states
from tracekit.trace.column_text import as_text, rows_in, rows_where
from tracekit.structure.forwards import token_forwards
from tracekit.trace.frames import Trace
from tracekit.structure.library_ranges import library_ranges
from tracekit.trace.step_ownership import INFERRED_DOMAIN, step_rows
from tracekit.structure.calls import MIN_CALL_READS
from tracekit.structure.pipeline import find_pipeline, loop_steps, steps_from_loop
from tracekit.structure.repeated_steps import holds_layer_stack, holds_whole_forwards, repeated_name_steps, repeated_steps, unit_label, weight_reads

OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#")
Window = tuple[str, int, int, int, int]  # name, start, end, pid, tid


def range_cycles(trace: Trace) -> list[Window]:
    """Steps from the user's top-level ranges repeating one cycle of names (see module doc);
    a library's ranges (library_ranges) are never a cycle's."""
    r = trace.ranges
    if r.empty or "depth" not in r:
        return []
    top = np.flatnonzero(~rows_in(r["domain"], ["python", "gpu", INFERRED_DOMAIN]) & ~library_ranges(trace) & (r["depth"].to_numpy() == 0))
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


def holding_a_call(windows: list[Window], pipeline) -> list[Window]:
    """The windows that hold at least one whole call's reads of a network (MIN_CALL_READS weight
    reads on the calls' thread): a lone embedding lookup after the last forward (a generate
    loop embedding the token it will not feed) is no step. All of them without a pipeline."""
    if pipeline is None:
        return windows
    reads = pipeline.calls.reads
    out = []
    for w in windows:
        if (w[3], w[4]) != (pipeline.calls.pid, pipeline.calls.tid):
            out.append(w)
            continue
        inside = int(np.searchsorted(reads.start, w[2], side="left") - np.searchsorted(reads.start, w[1], side="left"))
        if inside >= MIN_CALL_READS:
            out.append(w)
    return out


STEP_SOURCES = ("ProfilerStep", "annotation", "user's --step", "optimizer", "range cycle", "repeated forward", "pipeline loop",
                "repeated op names (no record_shapes)")


def marked_source(trace: Trace, rows: np.ndarray) -> str:
    """The source of steps the trace marks itself (step_rows): torch.profiler's or another's."""
    names = as_text(trace.ranges["name"])[rows]
    return STEP_SOURCES[0] if all(str(n).startswith("ProfilerStep#") for n in names) else STEP_SOURCES[1]


def user_steps(trace: Trace, step: str) -> list[Window]:
    """Steps the user named (--step): the outermost host ranges or Python frames whose name is
    `step` or matches it as a regular expression, in start order; [] for none."""
    r = trace.ranges
    if r.empty:
        return []
    pattern = re.compile(step)
    hit = rows_where(r["name"], lambda n: n == step or pattern.search(n[:256]) is not None)
    rows = np.flatnonzero(hit & ~rows_in(r["domain"], ["gpu", INFERRED_DOMAIN]))
    if not len(rows):
        return []
    start, end = r["start"].to_numpy(), r["end"].to_numpy()
    rows = rows[np.argsort(start[rows], kind="stable")]
    outer, reach = [], -np.inf
    for i in rows:  # a matching range inside another (a recursive frame) is the same step
        if start[i] >= reach:
            outer.append(int(i))
            reach = end[i]
    names = as_text(r["name"])
    pid, tid = r["pid"].to_numpy(), r["tid"].to_numpy()
    return [(f"{names[i]}#{j}", int(start[i]), int(end[i]), int(pid[i]), int(tid[i])) for j, i in enumerate(outer)]


def cycles_hold_forwards(trace: Trace, cycles: list[Window], reads, forwards: int) -> bool:
    """A cycle of ranges is steps only if it holds whole forwards: no more cycles than the
    forwards the trace shows (`forwards`, 0: unknown), no weight that the run reads again and
    again read outside its ranges, and a stack of layers read inside each cycle
    (tracekit.structure.repeated_steps)."""
    if forwards and len(cycles) > forwards:
        return False
    r = trace.ranges
    pid, tid = cycles[0][3], cycles[0][4]
    lo, hi = cycles[0][1], cycles[-1][2]
    top = np.flatnonzero((r["pid"].to_numpy() == pid) & (r["tid"].to_numpy() == tid) & (r["depth"].to_numpy() == 0)
                         & ~rows_in(r["domain"], ["python", "gpu", INFERRED_DOMAIN])
                         & (r["start"].to_numpy() >= lo) & (r["end"].to_numpy() <= hi))
    windows = [(int(r["start"].iat[i]), int(r["end"].iat[i])) for i in top]
    if holds_whole_forwards(reads, windows, pid, tid) is False:
        return False
    return holds_layer_stack(reads, [(c[1], c[2]) for c in cycles], pid, tid) is not False


def find_steps(trace: Trace, step: str | None = None) -> tuple[list[Window], str | None]:
    """The steps of a trace and where they came from (STEP_SOURCES): the user's --step, the
    trace's own step ranges (then no window is returned: they are in trace.ranges already),
    optimizer iterations, a cycle of ranges that holds whole forwards, the model's forwards
    (token embedding), the outermost repeat of the host ops; ([], None) for none."""
    if step:
        return user_steps(trace, step), STEP_SOURCES[2]
    marked = step_rows(trace)
    if len(marked):
        return [], marked_source(trace, marked)
    iterations = optimizer_iterations(trace)
    if iterations:
        return iterations, STEP_SOURCES[3]
    states = op_states(trace.ops) if len(trace.ops) else None
    forwards = token_forwards(trace.ops, states)
    cycles = range_cycles(trace)
    # the weight reads only where something asks for them (a token model's forwards without
    # ranges are its steps already): they cost a pass over every GEMM's shapes
    reads = weight_reads(trace.ops, states) if cycles or len(forwards) < 2 else None
    # forwards the trace shows within the cycles' span: a token model's embeddings (a text
    # encoder run once before a denoise loop is not in it); the weight reads tell the rest
    inside = int(((forwards["start"] >= cycles[0][1]) & (forwards["start"] < cycles[-1][2])).sum()) if cycles and len(forwards) else 0
    if cycles and cycles_hold_forwards(trace, cycles, reads, inside):
        return cycles, STEP_SOURCES[4]
    pipeline = find_pipeline(trace.ops, states) if states is not None else None
    if steps_from_loop(pipeline):
        windows = loop_steps(pipeline)
        # the user's own function around each period (with_stack: the pipeline's `__call__`) names it
        label = unit_label(trace, [(w[1], w[2]) for w in windows], windows[0][3], windows[0][4])
        if label:
            windows = [(f"{label}#{j}", *w[1:]) for j, w in enumerate(windows)]
        return windows, STEP_SOURCES[6]
    if len(forwards) >= 2:
        windows = holding_a_call(forward_steps(trace, forwards), pipeline)
        if len(windows) >= 2:
            return windows, STEP_SOURCES[5]
    repeated = repeated_steps(trace, reads, states)
    if repeated is not None:
        return repeated.windows, STEP_SOURCES[5]
    if states is not None and not _has_shapes(trace.ops):
        by_names = repeated_name_steps(trace, states)
        if by_names:
            return by_names, STEP_SOURCES[7]
    return [], None


def _has_shapes(ops: pd.DataFrame) -> bool:
    """Whether any op records its input shapes (torch.profiler's record_shapes)."""
    if "input_dims" not in ops:
        return False
    return any(isinstance(d, (list, tuple)) and len(d) for d in ops["input_dims"].to_numpy()[:10_000])


def inferred_windows(trace: Trace) -> list[Window]:
    """The steps of a trace without step ranges (find_steps's windows); [] else."""
    return find_steps(trace)[0]


def library_note(trace: Trace) -> list[str]:
    """Why a trace with ranges has no steps, where its ranges are a library's own or each marks
    one call's work (tracekit.structure.library_ranges)."""
    library = library_ranges(trace)
    if not library.any():
        return []
    names = as_text(trace.ranges["name"])[library]
    shown = sorted({str(n)[:40] for n in names})
    listed = ", ".join(repr(n) for n in shown[:4]) + (f" and {len(shown) - 4} more" if len(shown) > 4 else "")
    return [f"no steps: the trace's {int(library.sum()):,} range(s) named {listed} are a library's or the profiler's own, "
            "or each holds one launch or op at most (one per call, not per iteration): never steps; nothing else in it "
            "repeats as whole forwards (use --step to name a range or Python frame that marks one)"]


def with_inferred_steps(trace: Trace, step: str | None = None) -> Trace:
    """The trace with its steps added to the ranges table where it marks none (or the user's
    --step ranges, which then are the steps), and meta["step_source"] saying where they came
    from (None: no steps)."""
    windows, source = find_steps(trace, step)
    if step and not windows:  # the user said what a step is and the trace holds none: no silent fallback
        raise TraceError(str(trace.meta.get("path") or "trace"), f"--step {step!r} matches no range or Python frame in the trace")
    evidence = None
    if source == STEP_SOURCES[6]:  # the pipeline's loop: which networks, how many calls per step, their roles
        pipeline = find_pipeline(trace.ops)
        evidence = pipeline.evidence() if pipeline is not None else None
    trace = replace(trace, meta={**trace.meta, "step_source": source, "step_evidence": evidence})
    if source is None:
        trace = replace(trace, warnings=[*trace.warnings, *library_note(trace)])
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
