"""Attribution itself: the rules applied to a linked Trace (see the package docstring)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.attribution.inference import convolutions, infer_missing
from tracekit.attribution.program_blocks import program_blocks
from tracekit.attribution.roles import role_blocks
from tracekit.attribution.sublayers import sublayer_blocks
from tracekit.attribution.match import Enclosing, NameSearch, Pattern
from tracekit.attribution.rules import DEFAULT_BLOCK, DEFAULT_PHASE, UNKNOWN_PHASE, Rule, Rules, default_rules
from tracekit.trace.autograd import BACKWARD, RECOMPUTE, kernel_states, on_autograd_threads, op_states
from tracekit.trace.column_text import as_text
from tracekit.trace.grouping import combine
from tracekit.trace.step_ownership import INFERRED_DOMAIN, kernel_steps, step_rows
from tracekit.trace.intervals import NO_ROW
from tracekit.trace import Trace
from tracekit.attribution.widths import Widths, infer_widths


class _Matcher:
    """Per (field, pattern): which kernels a rule's pattern matches. Names are searched once
    per distinct name (NameSearch); trees are walked once per tree (Enclosing)."""

    def __init__(self, trace: Trace, kernel_class: pd.Series):
        self.trace = trace
        self.kernel_class = kernel_class
        self._cache: dict[tuple[str, str], np.ndarray] = {}
        self._trees: dict[str, Enclosing] = {}
        self._searches: dict[str, NameSearch] = {}

    def _search(self, what: str) -> NameSearch:
        if what not in self._searches:
            k = self.trace.kernels
            column = {"ranges": lambda: self.trace.ranges["name"], "ops": lambda: self.trace.ops["name"],
                      "kernel": lambda: k["name"], "class": lambda: self.kernel_class, "kind": lambda: k["kind"]}[what]()
            self._searches[what] = NameSearch(pd.Series(column))
        return self._searches[what]

    def _tree(self, field: str) -> Enclosing:
        if field not in self._trees:
            t, k = self.trace, self.trace.kernels
            if field == "op":
                self._trees[field] = Enclosing(t.ops, self._search("ops"), [k["op"].to_numpy()], None)
            else:
                python = (t.ranges["domain"] == "python").to_numpy()
                # GPU-side annotations enclose by time on the whole device, so a collective's
                # range also spans compute on other streams: they speak only for kernels
                # whose launch (and so CPU-side context) was not captured.
                pointers = [k["range"].to_numpy(), np.where(k["launch"].to_numpy() < 0, k["gpu_range"].to_numpy(), NO_ROW)] \
                    if field == "range" else [k["frame"].to_numpy()]
                self._trees[field] = Enclosing(t.ranges, self._search("ranges"), pointers, ~python if field == "range" else python)
        return self._trees[field]

    def field(self, field: str, pattern: Pattern) -> np.ndarray:
        key = (field, pattern.pattern)
        if key in self._cache:
            return self._cache[key]
        if field in ("range", "frame", "op"):
            hit = np.logical_or.reduce(self._tree(field).hits(pattern))
        else:  # kernel, class, kind: the kernel's own names
            search = self._search(field)
            hit = search.hits(pattern)[search.codes]
        self._cache[key] = hit
        return hit

    def rule(self, rule: Rule) -> np.ndarray:
        hit = np.zeros(len(self.trace.kernels), dtype=bool)
        for field, pattern in rule.patterns.items():
            hit |= self.field(field, pattern)
        return hit


def _first_match(matcher: _Matcher, rules: tuple[Rule, ...], default: str) -> tuple[np.ndarray, np.ndarray]:
    """(labels, matched): the first matching rule's label per kernel, `default` where no
    rule matched (matched False there)."""
    n = len(matcher.trace.kernels)
    labels = np.full(n, None, dtype=object)
    unset = np.ones(n, dtype=bool)
    for rule in rules:
        hit = matcher.rule(rule) & unset
        labels[hit] = rule.label
        unset &= ~hit
    labels[unset] = default
    return labels, ~unset


BACKWARD_THREAD_SHARE, BACKWARD_THREAD_MIN = 0.9, 10


def _backward_threads(trace: Trace, phase: np.ndarray, matched: np.ndarray, states: np.ndarray) -> np.ndarray:
    """Kernels no rule placed, launched on a thread that does backward work: backward.

    PyTorch runs a CUDA/HIP backward pass on its own autograd thread. Work launched there
    outside an `evaluate_function` op (DDP's reducer copying buckets into gradients, a
    gradient hook) matches no backward rule and would default to forward. Such a thread runs
    autograd node ops (structure: `states`, tracekit.trace.autograd), and its placed
    kernels are at least BACKWARD_THREAD_SHARE backward (of BACKWARD_THREAD_MIN or more;
    recomputation counts, it runs there too). A thread without autograd ops never is, whatever
    a user's range placed there: an inference pipeline's `kv_recompute` stage on the main
    thread makes nothing on it backward."""
    k = trace.kernels
    launch = k["launch"].to_numpy()
    has = launch >= 0
    if not has.any() or not len(trace.launches):
        return phase
    rows = launch[has]
    pid, tid = (trace.launches[c].to_numpy(np.int64)[rows] for c in ("pid", "tid"))
    thread = np.full(len(k), -1, dtype=np.int64)
    thread[has] = combine([pid, tid])
    autograd = np.zeros(len(k), dtype=bool)
    autograd[has] = on_autograd_threads(trace.ops, states, pid, tid)
    n = int(thread.max()) + 1
    placed = has & matched
    backward = np.bincount(thread[placed & np.isin(phase, ["backward", "recompute"])], minlength=n)
    total = np.bincount(thread[placed], minlength=n)
    on_backward_thread = (total >= BACKWARD_THREAD_MIN) & (backward >= BACKWARD_THREAD_SHARE * np.maximum(total, 1))
    move = has & ~matched & autograd & on_backward_thread[np.maximum(thread, 0)]
    return np.where(move, "backward", phase)


def _autograd_phases(phase: np.ndarray, matched: np.ndarray, kernel_state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Structure before names: a kernel a recomputed forward op launched is recompute, one an
    autograd node launched is backward, unless a rule placed it in another phase (a user's
    own phase, the optimizer): only the forward / backward names are overruled."""
    overrulable = ~matched | np.isin(phase, ["forward", "backward"])
    recompute = (kernel_state == RECOMPUTE) & overrulable
    backward = (kernel_state == BACKWARD) & ~matched
    phase = np.where(recompute, "recompute", np.where(backward, "backward", phase))
    return phase, matched | recompute | backward


# what the blocks are, in the labels' attrs (the reports say it under the blocks table)
BLOCKS_BASIS = "blocks_basis"
LAYER_BASIS = "a model's layer parts (attention, ffn, norm, ...): other is an ML program's kernel no rule or structure placed"

GENERATION_STEP = re.compile(r"^(prefill|decode)#\d+ ")


def _generation_phases(trace: Trace, phase: np.ndarray, matched: np.ndarray) -> np.ndarray:
    """Kernels no rule placed, owned by a step inferred from a generation's forwards
    (tracekit.structure.steps: `prefill#0 [B=1 T=512]`, `decode#1 [B=1]`): that step's kind."""
    r = trace.ranges
    if r.empty:
        return phase
    steps = step_rows(trace)
    steps = steps[as_text(r["domain"])[steps] == INFERRED_DOMAIN] if len(steps) else steps
    names = as_text(r["name"])
    kinds = {int(s): m.group(1) for s in steps if (m := GENERATION_STEP.match(names[s]))}
    if not kinds:
        return phase
    owner = kernel_steps(trace, trace.kernels, np.array(sorted(kinds), dtype=np.int64))
    out = phase.copy()
    for s, kind in kinds.items():
        out[(owner == s) & ~matched & (phase == DEFAULT_PHASE)] = kind
    return out


def _step_phases(trace: Trace, phase: np.ndarray, matched: np.ndarray) -> np.ndarray:
    """Kernels of unknown phase (a CUDA-graph replay: launched by cudaGraphLaunch, no op) owned
    by a step whose other kernels are all of one phase: that phase. A serving step replays its
    layers as a graph and runs its lm_head eagerly; both are the step's one forward (or decode),
    not two phases. A step of several phases (training) leaves them unknown."""
    unknown = (phase == UNKNOWN_PHASE) & ~matched
    if not unknown.any() or trace.ranges.empty:
        return phase
    owner = kernel_steps(trace, trace.kernels)
    known = (owner >= 0) & (phase != UNKNOWN_PHASE)
    if not known.any():
        return phase
    steps, step_code = np.unique(owner[known], return_inverse=True)
    phases, phase_code = np.unique(phase[known].astype(str), return_inverse=True)
    seen = np.zeros((len(steps), len(phases)), dtype=bool)
    seen[step_code, phase_code] = True
    single = seen.sum(axis=1) == 1
    step_phase = np.where(single, phases[seen.argmax(axis=1)], UNKNOWN_PHASE)
    at = np.searchsorted(steps, owner)
    hit = unknown & (owner >= 0) & (at < len(steps))
    hit[hit] &= steps[at[hit]] == owner[hit]
    out = phase.copy()
    out[hit] = step_phase[at[hit]]
    return out


def attribute(trace: Trace, kernel_class: pd.Series, rules: Rules | None = None, widths: Widths | None = None) -> pd.DataFrame:
    """Columns `phase` and `block`, one row per kernel (same index as trace.kernels).
    `widths`: the model's (attribution.widths.from_architecture); default: inferred from the trace."""
    rules = rules or default_rules()
    matcher = _Matcher(trace, kernel_class)
    phase, matched = _first_match(matcher, rules.phase, DEFAULT_PHASE)
    states = op_states(trace.ops)
    phase, matched = _autograd_phases(phase, matched, kernel_states(trace.kernels, states))
    # "forward" is the default only for work a framework op launched (an inference without
    # phase ranges). No launch and no GPU-side range, or a launch outside any op (a CUDA
    # application, an MPI code, an extension's cuLaunchKernel): nothing says which phase it
    # belongs to. A rule that matched (a user's `forward` rule, a range open at launch time)
    # is never overridden by this fallback, whatever its label.
    k = trace.kernels
    no_context = ((k["launch"] < 0) & (k["gpu_range"] < 0)) | ((k["launch"] >= 0) & (k["op"] < 0))
    blind = no_context.to_numpy() & ~matched
    phase = np.where(blind, UNKNOWN_PHASE, phase)
    phase = _backward_threads(trace, phase, matched, states)
    phase = _generation_phases(trace, phase, matched)
    phase = _step_phases(trace, phase, matched)
    rule_block, _ = _first_match(matcher, rules.block, DEFAULT_BLOCK)
    widths = widths if widths is not None else (infer_widths(trace) if len(k) else None)
    conv = convolutions(k, trace.ops["name"])  # (per kernel: a convolution's; asked twice below)
    phase, block = infer_missing(trace, kernel_class, phase, rule_block, widths, conv)
    # last: what position placed, the launching op's role corrects (norm is normalisation work)
    hidden = widths.hidden if widths is not None else None
    block = role_blocks(trace, np.asarray(kernel_class, dtype=object), block, rule_block, hidden, phase)
    # GEMMs still unplaced (no shapes) by the sub-layer they sit in (attribution.sublayers)
    block = sublayer_blocks(k, np.asarray(kernel_class, dtype=object), block, conv)
    # a program with no ML structure: its blocks are its own units (attribution.program_blocks)
    block, basis = program_blocks(trace, np.asarray(kernel_class, dtype=object), block, rule_block, widths)
    labels = pd.DataFrame({"phase": pd.Categorical(phase), "block": pd.Categorical(block)}, index=k.index)
    labels.attrs[BLOCKS_BASIS] = basis or LAYER_BASIS
    return labels
