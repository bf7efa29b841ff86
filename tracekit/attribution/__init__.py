"""Attribution: every GPU kernel gets exactly one phase and one block, from ordered rules.

Phases come from what encloses the kernel's launch (ranges, Python frames, ops): decode,
prefill, recompute, forward, backward, optimizer, or a user-named phase; "unknown" for a
kernel with no launch and no GPU-side range (launched before the capture began). Blocks: attention,
ffn, collective, norm, embedding, memory, other.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.attribution.inference import infer_missing
from tracekit.attribution.match import Pattern, at_kernels, name_matches, with_ancestors
from tracekit.attribution.rules import DEFAULT_BLOCK, DEFAULT_PHASE, UNKNOWN_PHASE, Rule, Rules, default_rules, load_rules
from tracekit.trace import Trace

__all__ = ["attribute", "load_rules", "default_rules", "Rules"]


class _Matcher:
    def __init__(self, trace: Trace, kernel_class: pd.Series):
        self.trace = trace
        self.kernel_class = kernel_class
        r = trace.ranges
        self._range_domain = r["domain"].astype(str).to_numpy() if len(r) else np.zeros(0, dtype=object)
        self._cache: dict[tuple[str, str], np.ndarray] = {}

    def _tree_flags(self, table: pd.DataFrame, pattern: Pattern, rows_mask: np.ndarray | None) -> np.ndarray:
        own = name_matches(table["name"], pattern) if len(table) else np.zeros(0, dtype=bool)
        if rows_mask is not None:
            own &= rows_mask
        return with_ancestors(own, table["parent"].to_numpy(), table["depth"].to_numpy())

    def field(self, field: str, pattern: Pattern) -> np.ndarray:
        key = (field, pattern.pattern)
        if key in self._cache:
            return self._cache[key]
        t, k = self.trace, self.trace.kernels
        if field == "range":
            flags = self._tree_flags(t.ranges, pattern, self._range_domain != "python")
            # GPU-side annotations enclose by time on the whole device, so a collective's
            # range also spans compute on other streams: they speak only for kernels
            # whose launch (and so CPU-side context) was not captured.
            blind = (k["launch"] < 0).to_numpy()
            hit = at_kernels(flags, k["range"].to_numpy()) | (at_kernels(flags, k["gpu_range"].to_numpy()) & blind)
        elif field == "frame":
            flags = self._tree_flags(t.ranges, pattern, self._range_domain == "python")
            hit = at_kernels(flags, k["frame"].to_numpy())
        elif field == "op":
            hit = at_kernels(self._tree_flags(t.ops, pattern, None), k["op"].to_numpy())
        elif field == "kernel":
            hit = name_matches(k["name"], pattern)
        elif field == "class":
            hit = name_matches(self.kernel_class, pattern)
        else:  # kind
            hit = name_matches(k["kind"], pattern)
        self._cache[key] = hit
        return hit

    def rule(self, rule: Rule) -> np.ndarray:
        hit = np.zeros(len(self.trace.kernels), dtype=bool)
        for field, pattern in rule.patterns.items():
            hit |= self.field(field, pattern)
        return hit


def _first_match(matcher: _Matcher, rules: tuple[Rule, ...], default: str) -> pd.Categorical:
    n = len(matcher.trace.kernels)
    labels = np.full(n, None, dtype=object)
    for rule in rules:
        hit = matcher.rule(rule) & (labels == None)  # noqa: E711
        labels[hit] = rule.label
    labels[labels == None] = default  # noqa: E711
    return pd.Categorical(labels)


def attribute(trace: Trace, kernel_class: pd.Series, rules: Rules | None = None) -> pd.DataFrame:
    """Columns `phase` and `block`, one row per kernel (same index as trace.kernels)."""
    rules = rules or default_rules()
    matcher = _Matcher(trace, kernel_class)
    phase = _first_match(matcher, rules.phase, DEFAULT_PHASE)
    # "forward" is the default only for work a framework op launched (an inference without
    # phase ranges). No launch and no GPU-side range, or a launch outside any op (a CUDA
    # application, an MPI code): nothing says which phase it belongs to.
    k = trace.kernels
    phase = np.asarray(phase, dtype=object)
    no_context = ((k["launch"] < 0) & (k["gpu_range"] < 0)) | ((k["launch"] >= 0) & (k["op"] < 0))
    blind = no_context.to_numpy() & (phase == DEFAULT_PHASE)
    phase = np.where(blind, UNKNOWN_PHASE, phase)
    block = np.asarray(_first_match(matcher, rules.block, DEFAULT_BLOCK), dtype=object)
    phase, block = infer_missing(k, kernel_class, phase, block)
    return pd.DataFrame({"phase": pd.Categorical(phase), "block": pd.Categorical(block)}, index=k.index)
