"""Blocks of a program with no ML structure: the program's own units, not layer parts.

The blocks attention / ffn / norm / ... describe a model's layers; `other` means "an ML
program's kernel that could not be placed". A hydrodynamics mini-app (CloverLeaf), an MPI
saxpy, a benchmark of one fused kernel has no layers, and calling 97% of its time `other`
says nothing. What an expert reading such a trace wants is the time split by what the
program does.

The decision is made from the trace's structure, once per trace: a program has ML
structure when a framework op (torch's aten ops, from Kineto or emit_nvtx) launched any of
its kernels, when its GEMMs' weight shapes gave model widths, or when a block rule placed a
kernel in a layer part (an attention kernel by its name, a norm module's frame). Without
any of these, each kernel still in `other` takes its program unit:

- the innermost user (NVTX) range enclosing its launch, where such ranges enclose at least
  half of the program's kernel time (the program marked what it does; a library's few
  ranges around its own internals, nvFuser's allocation ranges, do not describe the program);
- else its kernel function: the function a kernel template was instantiated for when its
  first template argument is a function-local lambda (`clover::par_ranged2d_kernel<
  PdV_kernel(...)::[lambda(int, int) (instance 1)]>` is CloverLeaf's `PdV_kernel`, the
  pattern of Kokkos / SYCL / stdpar-style `parallel_for` launchers), else the kernel's own
  name without namespaces, template arguments and parameters (`saxpy`, `reduce_kernel`); a
  vendor library's GEMM (class gemm: cuBLAS' `nvjet_*`, `sm90_xmma_*`) is `gemm`.

The names come from the trace: they reach reports only through the reports' escaping.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.attribution.rules import DEFAULT_BLOCK
from tracekit.trace.cpp_text import closing_bracket, drop_scope_params, split_template_args

LAYER_PARTS = ("attention", "ffn", "norm", "embedding", "lm_head")
RANGE_COVER = 0.5  # user ranges describe the program when they enclose at least this share of its kernel time
MAX_NAME = 4096  # characters of a kernel name parsed (names are bounded work)
MAX_UNIT = 80  # characters of a unit's name
MAX_UNITS = 30  # blocks listed by name; the smaller units share one block
SMALLER = "smaller kernel functions"
PROGRAM_BASIS = "the program's own units (no framework ops or model structure in this trace)"
NAMELESS = ("<unnamed>::", "(anonymous namespace)::", "{anonymous}::")
LAMBDAS = ("::[lambda", "::{lambda")  # how nvcc and clang name a lambda inside its function


def has_ml_structure(trace, rule_block: np.ndarray, widths) -> bool:
    """Does the trace hold an ML program (see the module docstring)?"""
    k = trace.kernels
    return bool(widths is not None or (k["op"].to_numpy() >= 0).any() or np.isin(rule_block, LAYER_PARTS).any())


def _first_bracket(text: str) -> int:
    """The first '<' or '(' (len(text) when none)."""
    found = [i for i in (text.find("<"), text.find("(")) if i >= 0]
    return min(found) if found else len(text)


def _last_component(qualified: str) -> str:
    """`clover::par_ranged2d_kernel` -> `par_ranged2d_kernel`; a return type before it dropped."""
    name = qualified.strip().split(" ")[-1] if qualified.strip() else ""
    return name.rsplit("::", 1)[-1]


def kernel_function(name: str) -> str:
    """A kernel's function (module docstring): a launcher's lambda's enclosing function, else
    the kernel's own unqualified name."""
    text = str(name)[:MAX_NAME]
    for nameless in NAMELESS:
        text = text.replace(nameless, "")
    at = _first_bracket(text)
    base = _last_component(text[:at]) or text[:MAX_UNIT]
    if at < len(text) and text[at] == "<":
        close = closing_bracket(text, at)  # -1: a name cut short, its arguments read to the end
        args = split_template_args(text[at + 1:close if close >= 0 else len(text)])
        # `build_field(global_variables &)::[lambda(int, int) (instance 1)]` -> `build_field::[lambda…]`
        first = drop_scope_params(args[0]) if args else ""
        for lam in LAMBDAS:
            if lam in first:
                base = _last_component(first.split(lam)[0]) or base
                break
    return base[:MAX_UNIT]


def _range_units(trace, todo: np.ndarray, duration: np.ndarray) -> np.ndarray | None:
    """Per kernel: the innermost user range enclosing its launch, when such ranges enclose at
    least RANGE_COVER of the `todo` kernels' time; None otherwise."""
    k, r = trace.kernels, trace.ranges
    if r.empty or not todo.any():
        return None
    inner = k["range"].to_numpy()
    inner = np.where(inner >= 0, inner, k["gpu_range"].to_numpy())
    inside = todo & (inner >= 0)
    total = float(duration[todo].sum())
    if not total or float(duration[inside].sum()) < RANGE_COVER * total:
        return None
    names = r["name"].astype(str).to_numpy()
    out = np.full(len(k), None, dtype=object)
    out[inside] = [str(n)[:MAX_UNIT] for n in names[inner[inside]]]
    return out


def program_blocks(trace, kernel_class: np.ndarray, block: np.ndarray, rule_block: np.ndarray,
                   widths) -> tuple[np.ndarray, str | None]:
    """(`block`, what the blocks are): for a program with no ML structure, its kernels still in
    `other` take their program unit (module docstring), and the basis says so; None otherwise."""
    k = trace.kernels
    todo = (block == DEFAULT_BLOCK) & (k["kind"].astype(str).to_numpy() == "kernel")
    if not todo.any() or has_ml_structure(trace, rule_block, widths):
        return block, None
    duration = np.clip((k["end"] - k["start"]).to_numpy(), 0, None)
    units = _range_units(trace, todo, duration)
    names = k["name"] if isinstance(k["name"].dtype, pd.CategoricalDtype) else k["name"].astype("category")
    by_code = np.array([kernel_function(c) for c in names.cat.categories] + [DEFAULT_BLOCK], dtype=object)
    function = by_code[names.cat.codes.to_numpy()]
    function = np.where(np.asarray(kernel_class, dtype=object) == "gemm", "gemm", function)
    unit = function if units is None else np.where(units != None, units, function)  # noqa: E711 (elementwise)
    # the largest units by time keep their names; a program of hundreds of functions lists MAX_UNITS
    time = pd.Series(duration[todo]).groupby(unit[todo]).sum().sort_values(ascending=False, kind="stable")
    keep = set(time.index[:MAX_UNITS])
    out = block.copy()
    out[todo] = [u if u in keep else SMALLER for u in unit[todo]]
    return out, PROGRAM_BASIS
