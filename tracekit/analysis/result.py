"""Analysis: everything a report shows, complete when tracekit.analysis.pipeline.build returns it.

`Measured` holds the tables measured from the trace (kernels with their costs, roofline and
labels; ops; blocks; steps; devices; coverage). The judgment stages (collectives, findings,
the model's prediction) read a `Measured` and their results complete the `Analysis`, so
nothing is filled in afterwards and reports read only an Analysis. Both are frozen: a
variant (a rank's analysis without its trace, a test's hostile names) is a
`dataclasses.replace` copy. `to_dict` only arranges what build computed (the duration and
call sketches included).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from tracekit.analysis.findings import Findings
from tracekit.analysis.measured import HostEvents, Measured
from tracekit.analysis.plausibility import Flag
from tracekit.analysis.throughput import Throughput
from tracekit.model.predict import Prediction
from tracekit.strict_json import SCHEMA_VERSION, clean, records



@dataclass(frozen=True, kw_only=True)
class Analysis(Measured):
    kernel_summary: pd.DataFrame  # every kernel name by time, kernels only (rollup.kernel_summary)
    collectives: pd.DataFrame  # one row per collective kernel
    collective_summary: pd.DataFrame  # per collective, group and message size
    overlap: pd.DataFrame  # communication hidden by compute, per device
    findings: Findings  # the headline and what to fix first
    model: Prediction | None = None  # with --model
    throughput: Throughput | None = None  # analysis.throughput: per step items/s, per stage share of wall time
    copy_summary: pd.DataFrame = field(default_factory=pd.DataFrame)  # memcpy / memset by name (share of copy time)
    flags: list[Flag] = field(default_factory=list)  # figures past a physical limit, with why (analysis.plausibility)
    # compare.noise's input, for every row a summary can list: per kernel name (kernel_summary)
    # its calls' durations, per (op, input shapes) (ops) its calls' GPU time (common.sketch);
    # op_sketches is None where the ops were not linked to kernels (no trace, no kernels)
    kernel_sketches: dict[str, list[float]] = field(default_factory=dict, repr=False)
    op_sketches: dict[tuple[str, str], list[float]] | None = field(default=None, repr=False)
    host: HostEvents | None = field(default=None, repr=False)  # the host timeline (reports.perfetto)

    @property
    def prediction(self) -> pd.DataFrame:
        """Predicted vs measured per step (tracekit.model.predict.PREDICTED_STEP_COLUMNS); empty without --model."""
        return self.model.steps if self.model is not None else pd.DataFrame()

    def top_kernels(self, n: int) -> pd.DataFrame:
        return self.kernel_summary.head(n).reset_index(drop=True)

    def _kernel_records(self, top: int) -> list[dict[str, Any]]:
        """The top kernels, each with the sketch of its calls' durations build made (compare.noise)."""
        return [{**r, "duration_sketch_ns": self.kernel_sketches.get(r["name"])} for r in records(self.top_kernels(top))]

    def _op_records(self, top: int) -> list[dict[str, Any]]:
        """The top ops, each with the sketch of its calls' GPU time build made (compare.noise)."""
        rows = records(self.ops.head(top))
        if self.op_sketches is None:
            return rows
        return [{**r, "call_sketch_ns": self.op_sketches.get((r["op"], r["shapes"]))} for r in rows]

    def to_dict(self, top: int = 15) -> dict[str, Any]:
        """summary.json's figures as a dict: strict JSON values (an unknown figure is None, never
        NaN). The words (the headline, each cause's sentence) are the reports': summary.json is
        tracekit.reports.summary_json.summary, this dict with them."""
        return clean({
            "schema_version": SCHEMA_VERSION,
            "trace": {k: self.meta.get(k) for k in ("path", "format", "schema", "rank", "world_size", "span_ns", "tool_versions", "step_source",
                                                         "step_evidence", "blocks_basis")},
            "device": {"key": self.device.key, "name": self.device.name, "memory_gbps": self.device.memory_gbps,
                       "sustained_bandwidth_factor": self.sustained, "source": self.device.source} if self.device else None,
            "coverage": self.coverage,
            # what in the trace cannot be true, per activity kind, and what the analysis did (trace.health)
            "health": list(self.meta.get("health") or []),
            "blocks": records(self.blocks),
            "devices": records(self.devices),
            "steps": records(self.steps),
            "overlap": records(self.overlap),
            "collectives": records(self.collective_summary),
            "top_kernels": self._kernel_records(top),
            "top_ops": self._op_records(top),
            "top_copies": records(self.copy_summary.head(top)),
            # How long the full lists are, so a reader (tracekit diff) knows whether an item
            # missing from a top list is absent or only below the cut.
            "listed_of": {"top_kernels": len(self.kernel_summary), "top_copies": len(self.copy_summary), "top_ops": len(self.ops)},
            "what_to_fix_first": self.findings.to_dict(top),
            "warnings": self.warnings,
            "flags": [f.to_dict() for f in self.flags],
            **({"capture": self.meta["capture"]} if self.meta.get("capture") is not None else {}),
            **({"model": self.model.to_dict()} if self.model is not None else {}),
            **({"throughput": _throughput_dict(self.throughput)} if self.throughput is not None else {}),
        })


def _throughput_dict(t: Throughput) -> dict[str, Any]:
    d = t.denoise_steps
    return {"steps": records(t.steps), "stages": records(t.stages), "total": t.total,
            **({"denoise_steps": records(d)} if d is not None and len(d) else {})}
