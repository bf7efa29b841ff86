"""`--ncu`: the user's Nsight Compute counters beside the modeled bytes, on the same kernels.

NcuOptions carries the CSV (read once, before the trace: a bad file fails first) and which
bytes the roofline uses. apply() pairs the analysed kernels with ncu's rows
(costs/ncu_compare.py), returns the report's figures, and, with `bytes="measured"`, the
costs with each paired, costed kernel's bytes replaced by what DRAM moved (its FLOPs stay).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracekit.costs.ncu_compare import families, judge, pair, summary, trace_kernels
from tracekit.costs.ncu_read import read_ncu

MEASURED_SOURCE = "Nsight Compute bytes"
FAMILIES_LISTED = 20


@dataclass(frozen=True)
class NcuOptions:
    path: str
    bytes: str = "model"  # "model" or "measured": which bytes the roofline uses
    table: pd.DataFrame = field(default=None, repr=False, compare=False)

    @classmethod
    def read(cls, path: str | os.PathLike, bytes: str = "model") -> "NcuOptions":
        return cls(os.fspath(path), bytes, read_ncu(path))


def apply(options: NcuOptions, kernels: pd.DataFrame, costs: pd.DataFrame) -> tuple[dict, pd.DataFrame]:
    """(the report's figures, costs) for the analysed `kernels` (the trace's table) and their costs."""
    frame = pd.concat([kernels[["kind", "name", "start"]], costs[["bytes_read", "bytes_written", "cost_source"]]], axis=1)
    judged = judge(pair(options.table, trace_kernels(frame), options.path))
    report = {"path": options.path, "bytes": options.bytes, **summary(judged), "ncu_kernels": int(len(options.table)),
              "families": families(judged).head(FAMILIES_LISTED).to_dict("records")}
    if options.bytes != "measured":
        return report, costs
    costs = costs.copy()
    rows = judged.loc[judged["costed"], "row"].to_numpy()
    where = costs.index.get_indexer(rows)
    read, written = judged.loc[judged["costed"], "read"].to_numpy(float), judged.loc[judged["costed"], "written"].to_numpy(float)
    ok = (where >= 0) & ~np.isnan(read) & ~np.isnan(written)
    for column, values in (("bytes_read", read), ("bytes_written", written)):
        col = costs[column].to_numpy(dtype=np.float64, copy=True)
        col[where[ok]] = values[ok]
        costs[column] = col
    source = costs["cost_source"].astype(object).to_numpy(copy=True)
    source[where[ok]] = MEASURED_SOURCE
    costs["cost_source"] = pd.Categorical(source)
    report["kernels_measured"] = int(ok.sum())
    return report, costs
