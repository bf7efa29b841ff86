"""Collectives: the bytes each rank sends and receives.

The message size comes from Kineto's collective metadata on the kernel (In/Out msg nelems,
dtype) when present, else from the op's tensor shapes. Bus-bandwidth factors (nccl-tests)
turn it into the traffic the link must carry.
"""

from __future__ import annotations

import math

from tracekit.costs.cost import Cost, CostError
from tracekit.costs.dtypes import canonical, element_bytes
from tracekit.costs.inputs import OpInputs
from tracekit.costs.registry import register


def bus_factor(collective: str, group_size: int) -> float:
    """nccl-tests' busbw / algbw, applied to the larger of the in/out message sizes."""
    n = max(1, group_size)
    name = collective.lower()
    if "all_reduce" in name or "allreduce" in name:
        return 2.0 * (n - 1) / n
    if any(k in name for k in ("all_gather", "allgather", "reduce_scatter", "reducescatter", "all_to_all", "alltoall")):
        return (n - 1) / n
    return 1.0  # broadcast, reduce, send/recv


def collective_cost(collective: str, in_elems: int, out_elems: int, dtype: str, group_size: int) -> Cost:
    es = element_bytes(dtype)
    size = max(in_elems, out_elems) * es
    traffic = size * bus_factor(collective, group_size)
    reduces = "reduce" in collective.lower()
    flops = float(max(in_elems, out_elems)) * (group_size - 1) / max(1, group_size) if reduces else 0.0
    return Cost(flops, traffic, 0.0, "comm", dtype, f"{collective}, group of {group_size}: bus bytes = message x {bus_factor(collective, group_size):.3f}")


def kernel_collective_cost(name: str | None, in_elems: int, out_elems: int, dtype_name: str | None, group_size: int) -> Cost | None:
    """From a kernel's own collective metadata (Kineto), when it has it."""
    dtype = canonical(dtype_name) if dtype_name else None
    if not name or dtype is None or in_elems < 0 or out_elems < 0 or group_size <= 0:
        return None
    return collective_cost(name, in_elems, out_elems, dtype, group_size)


@register("symm_mem::multimem_all_reduce_", "symm_mem::one_shot_all_reduce", "symm_mem::two_shot_all_reduce_",
          "_C_custom_ar::all_reduce", "vllm::all_reduce", "c10d::allreduce_")
def all_reduce(x: OpInputs) -> Cost:
    # The group size is not among the op's inputs: the message bytes are reported as-is.
    tensors = x.tensor_indices()
    if not tensors:
        raise CostError("no tensor to reduce")
    n = x.numel(tensors[0])
    es = element_bytes(x.dtype(tensors[0]))
    return Cost(float(n), n * es, 0.0, "comm", x.dtype(tensors[0]), "all-reduce message bytes (group size not recorded)")


@register("record_param_comms")
def record_param_comms(x: OpInputs) -> Cost:
    """torch.distributed's wrapper: the input tensor (or list) gives the message size; the
    kernel's collective metadata, when present, takes precedence (see kernel_collective_cost)."""
    dims = x.dims[0] if x.dims else None
    if isinstance(dims, list) and dims and all(isinstance(d, list) for d in dims):
        n = sum(math.prod(d) for d in dims)
    else:
        n = x.numel(0)
    dtype = x.dtype_or_none(0) or "fp32"
    return Cost(0.0, n * element_bytes(dtype), 0.0, "comm", dtype, "message bytes from the op's input")
