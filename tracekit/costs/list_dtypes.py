"""The element dtype of a tensor-list op (cat, stack) from the op that made its tensors.

torch.profiler records a tensor list's shapes but not its dtype ("TensorList"), and a cat
of non-contiguous inputs runs torch's generic copy kernel, whose name carries no element
type either. The tensors of the list were made just before, on the same thread: the
nearest op that finished before the list op and has a tensor of exactly the size of the
list's first element (same element count) gives the dtype, promoted as torch does (a float
over a bool mask). A comparison's bool result is then read as its inputs' float: an over-
count the kernel's own element size, where it names one, corrects. This is data flow read from
shapes, not a name: `torch.stack((a * cos - b * sin, ...))` takes the bf16 of its `sub`.
Kernels that do name their element size (OpaqueType<2>) still override it (costs/assign.py).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from tracekit.costs.dtypes import canonical, element_bytes
from tracekit.trace.column_text import as_text

LIST_OPS = ("aten::cat", "aten::stack", "aten::_cat")
LOOK_BACK = 16  # ops on the same thread: the producer of a cat's input is close before it


def _numel(shape: Any) -> int | None:
    if isinstance(shape, list) and shape and all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        return math.prod(shape)
    return None


def list_dtype_hints(ops: pd.DataFrame) -> dict[int, dict[str, Any]]:
    """op row of a list op with no recorded dtype -> {"list_dtype": dtype} where a producer says."""
    if not len(ops):
        return {}
    names = as_text(ops["name"])
    listed = np.flatnonzero(np.isin(names, LIST_OPS))
    if not len(listed):
        return {}
    dims, types = ops["input_dims"].to_numpy(), ops["input_types"].to_numpy()
    pid = ops["pid"].to_numpy() if "pid" in ops else np.zeros(len(ops), dtype=np.int64)
    tid, start, end = ops["tid"].to_numpy(), ops["start"].to_numpy(), ops["end"].to_numpy()
    order = np.lexsort((start, tid, pid))
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    hints: dict[int, dict[str, Any]] = {}
    for row in listed.tolist():
        t = types[row]
        if isinstance(t, list) and t and canonical(t[0]):
            continue  # the list's dtype was recorded
        d = dims[row]
        first = d[0][0] if isinstance(d, list) and d and isinstance(d[0], list) and d[0] and isinstance(d[0][0], list) else None
        size = _numel(first)
        if not size:
            continue
        p = position[row]
        for q in order[max(0, p - LOOK_BACK):p][::-1].tolist():
            if pid[q] != pid[row] or tid[q] != tid[row] or end[q] > start[row]:
                continue  # another thread (of any process), or an op around this one (its parent)
            dtype = _dtype_of_size(dims[q], types[q], size)
            if dtype:
                hints[row] = {"list_dtype": dtype}
                break
    return hints


def _dtype_of_size(dims: Any, types: Any, size: int) -> str | None:
    """The dtype the producer's result has, as torch promotes its inputs of that size: a
    floating one over integers and bools, the wider over the narrower (`where(mask, a, b)`
    makes a's dtype, not the mask's)."""
    if not isinstance(dims, list) or not isinstance(types, list):
        return None
    found = [d for shape, t in zip(dims, types) if _numel(shape) == size and (d := canonical(t) if isinstance(t, str) else None)]
    if not found:
        return None
    return max(found, key=lambda d: (d.startswith(("fp", "bf", "tf", "c")), d != "bool", element_bytes(d)))
