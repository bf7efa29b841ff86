"""What an advanced-indexing op selects, read from the ops it runs inside itself.

torch.profiler records `aten::index(self, indices)` with the index list as a TensorList
whose shapes it leaves empty, and no outputs. The op's own children say both: torch builds
the gather (`make_info` in ATen/native/TensorAdvancedIndexing.cpp, on CPU and CUDA alike)
by restriding `self` to the result's shape with `as_strided(self, size, strides)` (its
concrete `size` is the result's shape: indexed dimensions replaced by the indices'
broadcast shape) and by reshaping each index tensor (`reshape` / `view` of an index, its
input dims are the index's shape). An integer index's shape fixes the result; a boolean
mask is turned into integer indices by `nonzero` first, so the recorded size is the count
the mask selected at run time, also read from the trace.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tracekit.trace.column_text import as_text

INDEX_OPS = ("aten::index",)
RESTRIDE = "aten::as_strided"
INDEX_RESHAPES = ("aten::reshape", "aten::view", "aten::_reshape_alias", "aten::expand")
MASK_TO_INDICES = "aten::nonzero"


def _int_list(value: Any) -> list[int] | None:
    text = str(value).strip() if value is not None else ""
    if not text.startswith("["):
        return None
    try:
        out = [int(v) for v in text.strip("[]").split(",") if v.strip()]
    except ValueError:
        return None
    return out if all(v >= 0 for v in out) else None


def index_hints(ops: pd.DataFrame) -> dict[int, dict[str, Any]]:
    """op row of an aten::index -> {"index_result": shape, "index_shapes": [shape, ...],
    "index_from_mask": bool} where its children recorded them."""
    if not len(ops) or "parent" not in ops:
        return {}
    names = as_text(ops["name"])
    wanted = np.flatnonzero(np.isin(names, INDEX_OPS))
    if not len(wanted):
        return {}
    parent = ops["parent"].to_numpy()
    children = np.flatnonzero(np.isin(parent, wanted))
    dims, concrete = ops["input_dims"].to_numpy(), ops["concrete_inputs"].to_numpy()
    hints: dict[int, dict[str, Any]] = {}
    for child in children[np.argsort(ops["start"].to_numpy()[children], kind="stable")].tolist():
        row = int(parent[child])
        hint = hints.setdefault(row, {"index_shapes": [], "index_from_mask": False})
        name, own = names[child], dims[row]
        self_shape = own[0] if isinstance(own, list) and own else None
        if name == MASK_TO_INDICES:
            hint["index_from_mask"] = True
        elif name == RESTRIDE and "index_result" not in hint:
            child_dims, values = dims[child], concrete[child]
            if isinstance(child_dims, list) and child_dims and child_dims[0] == self_shape and isinstance(values, list) and len(values) > 1:
                size = _int_list(values[1])
                if size is not None:
                    hint["index_result"] = size
        elif name in INDEX_RESHAPES and "index_result" in hint:
            # after the restride: the index tensors, each reshaped to broadcast against the result
            shape = dims[child][0] if isinstance(dims[child], list) and dims[child] else None
            if isinstance(shape, list) and all(isinstance(d, int) for d in shape):
                hint["index_shapes"].append(shape)
    return {row: hint for row, hint in hints.items() if "index_result" in hint}
