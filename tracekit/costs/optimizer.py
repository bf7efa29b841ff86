"""Fused optimizers: `_fused_adam_`, `_fused_adamw_`, `_fused_sgd_` (one multi-tensor kernel
over every parameter).

Per parameter element, with element size e (the parameters' dtype):
- Adam / AdamW reads param, grad, exp_avg, exp_avg_sq (and max_exp_avg_sq with amsgrad)
  and writes param, exp_avg, exp_avg_sq (and max_exp_avg_sq): 4e read + 3e written;
  ≈ 15 FLOPs (weight decay 2, the two moments 7, the update 6), bound by memory.
- SGD with momentum reads param, grad, momentum buffer and writes param and buffer
  (3e + 2e), 4 FLOPs; without momentum 2e + 1e, 2 FLOPs.

torch.profiler usually records the tensor lists with no shapes (`TensorList`, dims []).
The parameters are then known from the backward that made their gradients: autograd runs
one `AccumulateGrad` per parameter, and it records the gradient's shape and dtype. A fused
optimizer call takes the gradients accumulated since the previous optimizer call, when it
is the only optimizer call between two backwards (several calls would share them in a way
the trace does not record). Gradient accumulation over several backwards before one step
runs AccumulateGrad once per backward: those counts would be a multiple of the parameters,
so this reads one backward per optimizer step.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from tracekit.costs.cost import Cost, CostError
from tracekit.costs.dtypes import canonical, element_bytes
from tracekit.costs.inputs import OpInputs
from tracekit.costs.registry import register
from tracekit.trace.column_text import as_text

ADAM = ("aten::_fused_adam_", "aten::_fused_adamw_", "aten::_fused_adam", "aten::_fused_adamw")
SGD = ("aten::_fused_sgd_", "aten::_fused_sgd")
ACCUMULATE_GRAD = "torch::autograd::AccumulateGrad"


def _parameters(x: OpInputs) -> tuple[float, str]:
    """(elements, dtype) of the parameter list: from its recorded shapes, else from the hint."""
    dims = x.dims[0] if x.dims else None
    if isinstance(dims, list) and dims and all(isinstance(d, list) for d in dims) and any(dims):
        return float(sum(math.prod(d) for d in dims)), canonical(x.types[0]) or "fp32"
    hint = x.hints.get("parameters")
    if hint:
        return float(hint[0]), str(hint[1])
    raise CostError("the parameter list's shapes were not recorded, and no AccumulateGrad before it says them")


@register(*ADAM)
def fused_adam(x: OpInputs) -> Cost:
    # (params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1, beta2, weight_decay, eps,
    #  amsgrad, maximize, ...)
    n, dtype = _parameters(x)
    tensors = 5 if x.scalar(11) is True else 4
    es = element_bytes(dtype)
    return Cost(15.0 * n, tensors * n * es, (tensors - 1) * n * es, "vector", dtype, "fused Adam: params, grads, moments")


@register(*SGD)
def fused_sgd(x: OpInputs) -> Cost:
    # (params, grads, momentum_buffer_list, weight_decay, momentum, lr, dampening, nesterov, maximize, ...)
    n, dtype = _parameters(x)
    momentum = (x.scalar(4) or 0) != 0
    es = element_bytes(dtype)
    return Cost((4.0 if momentum else 2.0) * n, (3 if momentum else 2) * n * es, (2 if momentum else 1) * n * es,
                "vector", dtype, "fused SGD")


def parameter_hints(ops: pd.DataFrame) -> dict[int, dict[str, Any]]:
    """op row of a fused optimizer call -> {"parameters": (elements, dtype)} from the
    AccumulateGrad calls since the previous optimizer call (see the module docstring)."""
    if not len(ops):
        return {}
    names = as_text(ops["name"])
    optimizer = np.flatnonzero(np.isin(names, ADAM + SGD))
    accumulate = np.flatnonzero(names == ACCUMULATE_GRAD)
    if not len(optimizer) or not len(accumulate):
        return {}
    start = ops["start"].to_numpy()
    optimizer = optimizer[np.argsort(start[optimizer], kind="stable")]
    dims, types = ops["input_dims"].to_numpy(), ops["input_types"].to_numpy()
    # per optimizer call: the AccumulateGrads that started after the call before it
    before = np.searchsorted(start[optimizer], start[accumulate], side="left")
    count = np.bincount(before, minlength=len(optimizer) + 1)
    # consecutive calls with no AccumulateGrad between them share one backward: ambiguous
    alone = (count[:-1] > 0) & np.append(count[1:-1] > 0, True)
    hints: dict[int, dict[str, Any]] = {}
    for i in np.flatnonzero(alone).tolist():
        mine = accumulate[before == i]
        sizes = [(math.prod(dims[a][0]), canonical(types[a][0])) for a in mine.tolist()
                 if isinstance(dims[a], list) and dims[a] and isinstance(dims[a][0], list) and isinstance(types[a], list)]
        dtypes = {d for _, d in sizes}
        if sizes and len(sizes) == len(mine) and len(dtypes) == 1 and None not in dtypes:
            hints[int(optimizer[i])] = {"parameters": (sum(n for n, _ in sizes), dtypes.pop())}
    return hints
