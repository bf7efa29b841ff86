"""The Trace: the tables every parser produces, and the contract with everything after.

Times are int64 nanoseconds from the start of the capture (the earliest event in the
file). Names are pandas Categoricals: a trace repeats a few thousand names millions of
times, so each table holds small integer codes (HTA's symbol table, done by pandas).
The Kineto parser hands over the same columns as numpy arrays first (tables.py): the
DataFrames are built from them after linking, so reading and linking need no pandas.

Row references between tables (kernel -> launch, kernel -> op, op -> parent, ...) are
integer row positions into the other table, -1 when absent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from tracekit.tables import Coded, default_column

if TYPE_CHECKING:  # pandas is imported where a table is built: the parsers and linking run without it
    import pandas as pd

NO_ROW = -1

# Columns of each table, in order, with their dtypes. Tables are built through
# `make_table` (or tables.ColumnTable) so that a table is the same shape whatever the source.
KERNEL_COLUMNS: dict[str, str] = {
    "kind": "category",  # kernel | memcpy | memset
    "name": "category",
    "short_name": "category",  # nsys shortName; None for Kineto
    "device": "int32",
    "stream": "int64",
    "start": "int64",
    "end": "int64",
    "pid": "int64",  # host process that launched it, -1 when the format does not say
    "correlation": "int64",
    "grid_x": "int32", "grid_y": "int32", "grid_z": "int32",
    "block_x": "int32", "block_y": "int32", "block_z": "int32",
    "registers": "int32",
    "shared_memory": "int64",
    "bytes": "int64",  # memcpy / memset bytes, -1 for kernels
    "copy_kind": "category",  # HtoD, DtoH, DtoD, ... for memcpy
    "rank": "int32",
    # collective metadata (Kineto `Collective name`, `In msg nelems`, ...; NCCL NVTX in nsys)
    "collective": "category",
    "coll_in_elems": "int64",
    "coll_out_elems": "int64",
    "coll_group_size": "int32",
    "coll_dtype": "category",
    "coll_group": "category",
    # a cost the trace itself states (Inductor's kernel_flop / kernel_num_gb), NaN when absent
    "meta_flops": "float64",
    "meta_bytes": "float64",
}

LAUNCH_COLUMNS: dict[str, str] = {
    "name": "category",
    "pid": "int64",
    "tid": "int64",
    "start": "int64",
    "end": "int64",
    "correlation": "int64",
}

OP_COLUMNS: dict[str, str] = {
    "name": "category",
    "pid": "int64",
    "tid": "int64",
    "start": "int64",
    "end": "int64",
    "external_id": "int64",
    "sequence": "int64",  # autograd sequence number: links a backward op to its forward op
    "input_dims": "object",  # list per input: list[int] for tensors, [] for scalars / None
    "input_types": "object",  # list[str]: "float", "c10::BFloat16", "Scalar", ...
    "concrete_inputs": "object",  # list[str]: values of scalar inputs, "" for tensors
    "meta_flops": "float64",  # Inductor's kernel_flop on its launch wrapper, NaN when absent
    "meta_bytes": "float64",  # Inductor's kernel_num_gb x 1e9, NaN when absent
}

RANGE_COLUMNS: dict[str, str] = {
    "name": "category",
    # user: record_function / NVTX on a CPU thread; gpu: GPU-side user annotation;
    # python: a Python frame (torch.profiler with_stack); nvtx:<domain> for named domains.
    "domain": "category",
    "pid": "int64",
    "tid": "int64",  # the thread for CPU ranges, the device for GPU ranges
    "start": "int64",
    "end": "int64",
}

# Columns linking adds (see link.py).
LINK_COLUMNS: dict[str, str] = {
    "launch": "int64",  # row in launches, -1 when no launch was captured
    "op": "int64",  # innermost op enclosing the launch on the launching thread
    "range": "int64",  # innermost user range enclosing the launch (walk `parent` for the stack)
    "frame": "int64",  # innermost Python frame enclosing the launch
    "gpu_range": "int64",  # innermost GPU-side annotation enclosing the kernel on its device
    "graph_launch": "bool",  # launched by cudaGraphLaunch / hipGraphLaunch
    "launched_before_capture": "bool",  # no launch row: it was issued before the window opened
}


def make_table(columns: dict[str, str], data: dict[str, Any] | None = None, n: int = 0) -> pd.DataFrame:
    """A table with exactly the contract's columns: values from `data`, defaults elsewhere.

    Defaults say "absent": -1 for integers, None for categories and objects, False for flags.
    """
    import pandas as pd

    data = data or {}
    if data:
        n = len(next(iter(data.values())))
    out = {}
    for col, dtype in columns.items():
        values = data.get(col)
        if values is None:
            values = default_column(dtype, n)
        if isinstance(values, Coded):
            values = values.to_categorical()
        if dtype == "object":
            series = pd.Series(values, dtype=object)
        elif dtype in ("category", "bool"):
            series = pd.Series(values).astype(dtype)
        elif dtype == "float64":
            series = pd.Series(values, dtype=np.float64)
        else:  # integers: rows a source lacks a value for (NaN after a concat) get -1
            series = pd.Series(values)
            if series.hasnans:
                series = series.fillna(-1)
            series = series.astype(dtype)
        out[col] = series.reset_index(drop=True)
    return pd.DataFrame(out, index=pd.RangeIndex(n))


@dataclass
class Trace:
    kernels: pd.DataFrame
    launches: pd.DataFrame
    ops: pd.DataFrame
    ranges: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def range_stack(self, row: int, column: str = "range") -> list[str]:
        """Names of the ranges enclosing kernel `row`, outermost first."""
        names = self.ranges["name"].to_numpy()
        parents = self.ranges["parent"].to_numpy()
        node = int(self.kernels[column].iat[row])
        stack = []
        while node != NO_ROW:
            stack.append(str(names[node]))
            node = int(parents[node])
        return stack[::-1]
