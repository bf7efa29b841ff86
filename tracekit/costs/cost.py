"""What an op costs: FLOPs and the minimum bytes it must move.

Bytes are the minimum traffic: every input read once, every output written once. `kind`
picks the roofline ceiling: matrix (tensor cores), vector (CUDA cores / SIMD), memory
(pure data movement), comm (interconnect).
"""

from __future__ import annotations

from dataclasses import dataclass



@dataclass(frozen=True)
class Cost:
    flops: float
    bytes_read: float
    bytes_written: float
    kind: str
    dtype: str  # the compute dtype: bf16, fp16, fp32, fp8, int8, fp64, ...
    note: str = ""  # how it was counted, when a reader would ask (causal, varlen, ...)

    @property
    def bytes(self) -> float:
        return self.bytes_read + self.bytes_written


@dataclass(frozen=True)
class Unknown:
    """The op's cost cannot be derived; `reason` says why, in words a user can act on."""

    reason: str


class CostError(ValueError):
    """Raised inside a cost function when the op's inputs do not allow a count."""
