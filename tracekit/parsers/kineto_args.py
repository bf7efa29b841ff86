"""The `args` of Kineto's events, decoded by msgspec: what a kernel, copy or memset
(`KernelArgs`), a runtime call (`LaunchArgs`) and a CPU op (`OpArgs`) carry, and Inductor's
own FLOP and byte counts as columns where unknown is NaN, not zero."""

from __future__ import annotations

from operator import attrgetter
from typing import Any

import msgspec
import numpy as np

_NULL = msgspec.Raw(b"null")
_NAN = float("nan")
ARG_LABEL = {"correlation": "correlation", "external_id": "External id", "sequence": "Sequence number", "registers": "registers per thread",
             "shared_memory": "shared memory", "in_elems": "In msg nelems", "out_elems": "Out msg nelems", "group_size": "Group size"}


class KernelArgs(msgspec.Struct):
    correlation: int = -1
    device: int = -1
    stream: int = -1
    grid: list[int] = []
    block: list[int] = []
    registers: int = msgspec.field(name="registers per thread", default=-1)
    shared_memory: int = msgspec.field(name="shared memory", default=-1)
    bytes: int = -1
    kind: str = ""  # AMD: "Dispatch Kernel", "DtoH", ...
    collective: str | None = msgspec.field(name="Collective name", default=None)
    in_elems: int = msgspec.field(name="In msg nelems", default=-1)
    out_elems: int = msgspec.field(name="Out msg nelems", default=-1)
    group_size: int = msgspec.field(name="Group size", default=-1)
    dtype: str | None = None
    group: str | None = msgspec.field(name="Process Group Name", default=None)
    # torch.compile: Inductor's own count for the kernel (also what profile_analysis.augment_trace writes)
    kernel_flop: Any = None  # any JSON value: a bad one makes this figure unknown, not the event
    kernel_num_gb: Any = None


class LaunchArgs(msgspec.Struct):
    correlation: int = -1
    kernel: Any = None  # ROCm names the launched kernel (a graph capture's nodes); any JSON value: a non-string is None


class OpArgs(msgspec.Struct):
    # Kept raw and decoded once per distinct value (tracekit.tables.Interner): a loop repeats the
    # same shapes every step, so millions of ops share a few thousand distinct lists.
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=_NULL)
    input_types: msgspec.Raw = msgspec.field(name="Input type", default=_NULL)
    concrete_inputs: msgspec.Raw = msgspec.field(name="Concrete Inputs", default=_NULL)
    input_strides: msgspec.Raw = msgspec.field(name="Input Strides", default=_NULL)
    external_id: int = msgspec.field(name="External id", default=-1)
    sequence: int = msgspec.field(name="Sequence number", default=-1)
    # Inductor's record_function around each Triton launch carries its FLOPs and GB
    kernel_flop: Any = None  # any JSON value: a bad one makes this figure unknown, not the event
    kernel_num_gb: Any = None


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) < 1e30 else _NAN


def metadata_costs(args: list[Any]) -> dict[str, np.ndarray]:
    """Inductor's `kernel_flop` / `kernel_num_gb` (GB = 1e9 bytes) as FLOPs and bytes; a value
    that is not a finite, non-negative number is unknown (NaN), not zero. Most events carry
    neither: only the few that do are looked at one by one."""
    return {"meta_flops": _finite_column(list(map(attrgetter("kernel_flop"), args))),
            "meta_bytes": _finite_column(list(map(attrgetter("kernel_num_gb"), args))) * 1e9}


def _finite_column(values: list[Any]) -> np.ndarray:
    out = np.full(len(values), np.nan)
    if values.count(None) == len(values):
        return out
    for i in np.flatnonzero(np.array([v is not None for v in values], dtype=bool)):
        number = _number(values[i])
        out[i] = number if number >= 0 else np.nan  # NaN stays NaN; -x and inf (>= 1e30 is NaN already) too
    return out


def decode_json(raw: bytes) -> Any:
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
