"""Grouped GEMMs: the experts of a mixture-of-experts layer in one launch.

`torch._grouped_mm(a [R, K], b [E, K, N], offs [E])` multiplies each of the R routed rows
(tokens x top-k) by the weight of the expert `offs` assigns it to: 2·R·K·N FLOPs. Its bytes
are the rows in and out, and the weights of the experts the rows touch, not of all E: with
R rows spread over E experts, at most min(E, R) are touched, and under uniform routing
E·(1 − (1 − 1/E)^R) on average (28.4 of 128 for R = 32; 128 of 128 for a 4,096-row prefill).
`offs` holds the routing only on the device, so the count is that expectation, and the
cost's note says so with its bound; `--model` runs replace it where the engine's routed
batch is known (model/).

A grouped GEMM launches a setup kernel before the GEMM (`prepare_grouped_gemm_data` in
ATen's cuda/GroupMM.cu writes, per group, the A / B / C pointers, the problem shape and
the strides CUTLASS reads): it gets that small cost, the GEMM kernel gets the op's.
"""

from __future__ import annotations

from tracekit.costs.classify import GEMM_SETUP
from tracekit.costs.cost import Cost, CostError
from tracekit.costs.dtypes import element_bytes
from tracekit.costs.gemm import gemm_cost
from tracekit.costs.inputs import OpInputs
from tracekit.costs.registry import register

EXPECTED_EXPERTS = "grouped GEMM, estimate"  # the start of every note whose weight bytes are an expectation
# per group: pointers to A, B, C and two scale arrays (8 B each), the problem shape (3 x 4 B),
# three strides (8 B each) written; one offset (4 B) read
SETUP_WRITTEN_PER_GROUP = 5 * 8 + 3 * 4 + 3 * 8
SETUP_READ_PER_GROUP = 4


def expected_experts(experts: int, rows: int) -> float:
    """Distinct experts R rows touch on average when each picks one of E uniformly."""
    if experts <= 0 or rows <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - 1.0 / experts) ** rows)


def experts_note(experts: int, rows: int) -> str:
    touched = expected_experts(experts, rows)
    return (f"{EXPECTED_EXPERTS}: the weights of {touched:.1f} of {experts} experts, the average for {rows} routed rows "
            f"under uniform routing (routing not recorded; at least 1, at most {min(experts, rows)})")


@register("aten::_grouped_mm", "aten::_scaled_grouped_mm")
def grouped_mm(x: OpInputs) -> Cost:
    a, b = x.shape(0), x.shape(1)
    if len(a) == 2 and len(b) == 3 and a[1] == b[1]:
        # rows routed to experts: a [R, K] x b [E, K, N] -> [R, N]
        rows, k, experts, n = a[0], a[1], b[0], b[2]
        touched = expected_experts(experts, rows)
        flops = 2.0 * rows * k * n
        read = rows * k * element_bytes(x.dtype(0)) + touched * k * n * element_bytes(x.dtype(1))
        written = rows * n * element_bytes(x.dtype(0))
        return Cost(flops, read, written, "matrix", x.dtype(0), experts_note(experts, rows))
    if len(a) == 3 and len(b) == 3 and a[0] == b[0] and a[2] == b[1]:
        return gemm_cost(a[0], a[1], b[2], a[2], x.dtype(0), note="grouped GEMM (batched)")
    if len(a) == 2 and len(b) == 2 and a[1] == b[0] and x.has_tensor(2):
        # K grouped (a weight gradient): a [M, K_total] x b [K_total, N] -> [G, M, N]
        groups = x.numel(2)
        cost = gemm_cost(1, a[0], b[1], a[1], x.dtype(0))
        return Cost(cost.flops, cost.bytes_read, groups * a[0] * b[1] * element_bytes(x.dtype(0)), "matrix", x.dtype(0),
                    "grouped GEMM (K grouped)")
    raise CostError(f"grouped GEMM shapes not understood: {a} x {b}")


def setup_kernel_cost(name: str, dims, types) -> Cost | None:
    """The setup kernel of a grouped GEMM op (inputs a, b, offs): its per-group arrays."""
    if not GEMM_SETUP.search(name[:512]) or not isinstance(dims, list) or len(dims) < 2:
        return None
    b = dims[1]
    if not isinstance(b, list) or len(b) != 3 or not all(isinstance(d, int) for d in b):
        return None
    groups = b[0]
    return Cost(0.0, float(groups * SETUP_READ_PER_GROUP), float(groups * SETUP_WRITTEN_PER_GROUP), "memory", "uint8",
                "grouped GEMM setup: per-group pointers, shapes and strides")
