"""Matrix multiplies: 2·M·N·K FLOPs (+ M·N for a bias add); bytes (MK + KN + MN) × size."""

from __future__ import annotations

import math

from tracekit.costs.cost import Cost, CostError
from tracekit.costs.dtypes import element_bytes
from tracekit.costs.inputs import OpInputs
from tracekit.costs.registry import register


def gemm_cost(batch: int, m: int, n: int, k: int, dtype: str, *, bias_elems: int = 0, out_dtype: str | None = None,
              b_dtype: str | None = None, note: str = "") -> Cost:
    es = element_bytes(dtype)
    out_es = element_bytes(out_dtype or dtype)
    b_es = element_bytes(b_dtype or dtype)
    flops = 2.0 * batch * m * n * k + (batch * m * n if bias_elems else 0)
    read = batch * (m * k * es + k * n * b_es) + bias_elems * out_es
    written = batch * m * n * out_es
    return Cost(flops, read, written, "matrix", dtype, note)


def _mk_kn(a: list[int], b: list[int]) -> tuple[int, int, int]:
    if len(a) != 2 or len(b) != 2:
        raise CostError(f"expected 2-D operands, got {a} and {b}")
    if a[1] != b[0]:
        raise CostError(f"inner dimensions differ: {a} x {b}")
    return a[0], b[1], a[1]


@register("aten::mm")
def mm(x: OpInputs) -> Cost:
    m, n, k = _mk_kn(x.shape(0), x.shape(1))
    return gemm_cost(1, m, n, k, x.dtype(0))


@register("aten::addmm")
def addmm(x: OpInputs) -> Cost:
    # addmm(bias, a, b, beta, alpha)
    m, n, k = _mk_kn(x.shape(1), x.shape(2))
    return gemm_cost(1, m, n, k, x.dtype(1), bias_elems=x.numel(0))


def _bmk(a: list[int], b: list[int]) -> tuple[int, int, int, int]:
    if len(a) != 3 or len(b) != 3 or a[0] != b[0] or a[2] != b[1]:
        raise CostError(f"expected batched operands [B,M,K] x [B,K,N], got {a} x {b}")
    return a[0], a[1], b[2], a[2]


@register("aten::bmm")
def bmm(x: OpInputs) -> Cost:
    batch, m, n, k = _bmk(x.shape(0), x.shape(1))
    return gemm_cost(batch, m, n, k, x.dtype(0))


@register("aten::baddbmm")
def baddbmm(x: OpInputs) -> Cost:
    batch, m, n, k = _bmk(x.shape(1), x.shape(2))
    return gemm_cost(batch, m, n, k, x.dtype(1), bias_elems=x.numel(0))


def _broadcast(a: list[int], b: list[int]) -> list[int]:
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        if da != db and 1 not in (da, db):
            raise CostError(f"batch dimensions do not broadcast: {a} and {b}")
        out.append(max(da, db))
    return out[::-1]


@register("aten::matmul")
def matmul(x: OpInputs) -> Cost:
    a, b = x.shape(0), x.shape(1)
    if not a or not b:
        raise CostError("matmul of a scalar")
    m = a[-2] if len(a) >= 2 else 1
    k = a[-1]
    n = b[-1] if len(b) >= 2 else 1
    kb = b[-2] if len(b) >= 2 else b[0]
    if k != kb:
        raise CostError(f"inner dimensions differ: {a} x {b}")
    batch = math.prod(_broadcast(a[:-2], b[:-2])) if len(a) > 2 or len(b) > 2 else 1
    return gemm_cost(batch, m, n, k, x.dtype(0))


@register("aten::linear")
def linear(x: OpInputs) -> Cost:
    # linear(input [..., K], weight [N, K], bias [N]?)
    a, w = x.shape(0), x.shape(1)
    if len(w) != 2 or not a or a[-1] != w[1]:
        raise CostError(f"linear input {a} does not match weight {w}")
    m = math.prod(a[:-1])
    bias = x.numel(2) if x.has_tensor(2) else 0
    return gemm_cost(1, m, w[0], w[1], x.dtype(0), bias_elems=bias)


@register("aten::mv")
def mv(x: OpInputs) -> Cost:
    a, v = x.shape(0), x.shape(1)
    if len(a) != 2 or len(v) != 1 or a[1] != v[0]:
        raise CostError(f"mv of {a} by {v}")
    return gemm_cost(1, a[0], 1, a[1], x.dtype(0))


@register("aten::addmv")
def addmv(x: OpInputs) -> Cost:
    a, v = x.shape(1), x.shape(2)
    if len(a) != 2 or len(v) != 1 or a[1] != v[0]:
        raise CostError(f"addmv of {a} by {v}")
    return gemm_cost(1, a[0], 1, a[1], x.dtype(1), bias_elems=x.numel(0))


@register("aten::_scaled_mm", "aten::_scaled_mm_v2")
def scaled_mm(x: OpInputs) -> Cost:
    # _scaled_mm(a fp8 [M,K], b fp8 [K,N], scale_a, scale_b, bias?, scale_result?, out_dtype?, ...)
    m, n, k = _mk_kn(x.shape(0), x.shape(1))
    bias = x.numel(4) if x.has_tensor(4) else 0
    out = x.dtype_or_none(4) or "bf16"  # the output takes the bias dtype; bf16 is the usual out_dtype
    scales = sum(x.nbytes(i) for i in (2, 3) if x.has_tensor(i))
    cost = gemm_cost(1, m, n, k, x.dtype(0), bias_elems=bias, out_dtype=out, b_dtype=x.dtype(1))
    return Cost(cost.flops, cost.bytes_read + scales, cost.bytes_written, "matrix", x.dtype(0), "scaled (fp8) GEMM")
