"""Op name -> cost function. Each family module registers the ops it knows."""

from __future__ import annotations

from typing import Any, Callable

from tracekit.costs.cost import Cost, CostError, Unknown
from tracekit.costs.inputs import OpInputs

CostFunction = Callable[[OpInputs], Cost]
_REGISTRY: dict[str, CostFunction] = {}


def register(*names: str) -> Callable[[CostFunction], CostFunction]:
    def add(fn: CostFunction) -> CostFunction:
        for name in names:
            if name in _REGISTRY:
                raise ValueError(f"two cost functions for {name}")
            _REGISTRY[name] = fn
        return fn

    return add


def known_ops() -> list[str]:
    return sorted(_REGISTRY)


def op_cost(name: str, dims: Any, types: Any, concrete: Any, hints: dict[str, Any] | None = None,
            strides: Any = None) -> Cost | Unknown:
    """The cost of one op call, or Unknown with the reason."""
    fn = _REGISTRY.get(name)
    if fn is None:
        return Unknown(f"no cost model for {name}")
    try:
        return fn(OpInputs(dims, types, concrete, hints, strides))
    except CostError as exc:
        return Unknown(str(exc))
    except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError) as exc:
        # A malformed trace must cost us one op, never the analysis.
        return Unknown(f"unreadable inputs for {name} ({type(exc).__name__}: {exc})")


def cost_formula(name: str) -> str | None:
    """How `name`'s cost is counted, in one line: the first line of the docstring of the
    family module that registered it (gemm.py: "Matrix multiplies: 2·M·N·K FLOPs ...")."""
    import sys

    fn = _REGISTRY.get(name)
    doc = sys.modules[fn.__module__].__doc__ if fn is not None else None
    return doc.strip().splitlines()[0] if doc and doc.strip() else None
