"""What to fix first, and the headline: computed from an Analysis, rendered by reports/.

The stages: recoverable kernel time ranked by op, kernel and block (analysis.fix); GPU idle
by cause inside the steps and outside their GPU windows, with the host code behind it, and
launch overhead (analysis.idle, analysis.idle_host); one ranked list of every cause in the
same denominator (analysis.causes); the headline's figures from that list (analysis.headline;
tracekit.reports.headline puts them in words).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pandas as pd

from tracekit.analysis import causes as cause_list
from tracekit.analysis.fix import FIX_COLUMNS, basis as fix_basis, op_shapes, ranked, work as kernel_work
from tracekit.analysis.headline import Headline, cpu_headline, headline
from tracekit.analysis.idle import (first_runs, gaps_of, idle_outside_gpu_windows, idle_table, idle_windows, launch_and_sync_calls,
                                    short_kernels)
from tracekit.analysis.idle_host import charges as idle_charges, host_behind_idle, launching_records, top_by_cause
from tracekit.strict_json import records
from tracekit.trace.grouping import key_of

if TYPE_CHECKING:
    from tracekit.analysis.measured import Measured

__all__ = ["FIX_COLUMNS", "Findings", "compute", "gaps_of", "launch_and_sync_calls"]


@dataclass(frozen=True)
class Findings:
    headline: Headline  # the headline's figures (tracekit.reports.headline words them)
    basis: str  # what the recoverable tables' shares are of: the ranked list's denominator (GPU busy time without one)
    basis_ns: float
    fix_ops: pd.DataFrame = field(default_factory=pd.DataFrame)
    fix_kernels: pd.DataFrame = field(default_factory=pd.DataFrame)
    fix_blocks: pd.DataFrame = field(default_factory=pd.DataFrame)
    idle: pd.DataFrame = field(default_factory=pd.DataFrame)  # one row per category
    idle_window: str = ""  # where idle time was counted
    idle_window_ns: float = 0.0
    short_kernels: dict[str, Any] = field(default_factory=dict)
    idle_host: pd.DataFrame = field(default_factory=pd.DataFrame)  # host code behind GPU idle (analysis.idle_host)
    idle_host_by_cause: dict[str, dict] = field(default_factory=dict)  # per idle category: the host record most behind it
    causes: list[dict[str, Any]] = field(default_factory=list)  # analysis.causes: every cause, ranked, one denominator
    # GPU idle inside the steps' host ranges but outside their GPU windows (a step's host
    # range that outlasts its kernels: a blocking copy, a stalled scheduler)
    outside: dict[str, Any] = field(default_factory=dict)
    denominator: str = ""  # what every share of `causes` is of (analysis.causes.denominator)
    denominator_ns: float = 0.0

    def to_dict(self, top: int = 15) -> dict[str, Any]:
        return {
            "basis": self.basis, "basis_ns": self.basis_ns,
            "denominator": self.denominator, "denominator_ns": self.denominator_ns,
            "causes": self.causes,
            "ops": records(self.fix_ops.head(top)), "kernels": records(self.fix_kernels.head(top)),
            "blocks": records(self.fix_blocks.head(top)),
            "idle": {"window": self.idle_window, "window_ns": self.idle_window_ns, "categories": records(self.idle)},
            "short_kernels": self.short_kernels,
            "idle_host": records(self.idle_host.head(top)),
            "idle_host_by_cause": self.idle_host_by_cause,
            "idle_outside_gpu_windows": self.outside,
        }


def compute(a: Measured) -> Findings:
    k = a.kernels
    basis, basis_ns = fix_basis(a)
    if k.empty:
        return Findings(headline=cpu_headline(a), basis=basis, basis_ns=basis_ns)
    work = kernel_work(k, in_steps=len(a.steps) > 0)
    work["first_run"] = first_runs(k)  # once, for both host-time causes (short kernels, the profiler's row)
    op_name = key_of(k["op_name"], missing="nan")
    linked = (k["op"].to_numpy() >= 0) & (op_name[0] >= 0)
    windows, window_name = idle_windows(a)
    launches = launch_and_sync_calls(a)
    gaps = gaps_of(a, windows, launches)
    window_ns = float(sum(int((w[:, 1] - w[:, 0]).sum()) for w in windows.values()))
    launching = launching_records(a)  # the host records gaps are charged to, once for both sets of gaps
    outside = idle_outside_gpu_windows(a, windows, launches, launching)
    denominator, denominator_ns = cause_list.denominator(a, window_ns, outside)
    if denominator_ns:  # one denominator: the recoverable tables' shares are of the ranked list's
        basis, basis_ns = denominator, denominator_ns
    f = Findings(headline=Headline(kind="gpu"), basis=basis, basis_ns=basis_ns,
                 fix_ops=ranked(work, {"op": op_name, "shapes": op_shapes(a)}, basis_ns, linked),
                 fix_kernels=ranked(work, {"kernel": key_of(k["name"], missing="nan")}, basis_ns),
                 fix_blocks=ranked(work, {"phase": key_of(k["phase"], missing="nan"), "block": key_of(k["block"], missing="nan")}, basis_ns),
                 idle=idle_table(gaps, window_ns), idle_window=window_name, idle_window_ns=window_ns,
                 short_kernels=short_kernels(a, work["first_run"]))
    charged = idle_charges(a, gaps, launching)
    idle_by_cause = dict(zip(f.idle["category"], f.idle["idle_ns"])) if len(f.idle) else {}
    # each stage reads the ones before it (the causes: the idle tables; the headline: the causes)
    f = replace(f, idle_host=host_behind_idle(charged, gaps), idle_host_by_cause=top_by_cause(charged, idle_by_cause),
                outside=outside, denominator=denominator, denominator_ns=denominator_ns)
    f = replace(f, causes=cause_list.ranked(a, f, work))
    return replace(f, headline=headline(a, f))
