"""Shape-derived FLOPs and bytes: one module per op family, a registry from op names.

Families register themselves on import: gemm, attention, conv, elementwise, reduction,
norm, pool, grouped_gemm (mixture-of-experts GEMMs), memory (copies, gathers, embeddings), indexing (advanced indexing by
integer tensors, router ops: topk, sort, histc, bincount), comm (collectives), resample
(upsample), optimizer (fused optimizers).
"""

from tracekit.costs import attention, comm, conv, elementwise, gemm, grouped_gemm, indexing, memory, norm, optimizer, pool, reduction, resample  # noqa: F401  (registration)
from tracekit.costs.cost import Cost, Unknown
from tracekit.costs.registry import known_ops, op_cost

__all__ = ["Cost", "Unknown", "known_ops", "op_cost"]
