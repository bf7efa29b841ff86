"""An op's recorded inputs, validated, with the accessors cost functions need."""

from __future__ import annotations

import math
from typing import Any

from tracekit.costs.cost import CostError
from tracekit.costs.dtypes import canonical, element_bytes

SECTOR_BYTES = 32  # the unit DRAM and L2 move on NVIDIA and AMD GPUs
MAX_ELEMENTS = 1 << 45  # 32 Ti elements: beyond any real tensor; a larger shape is corrupt


class OpInputs:
    def __init__(self, dims: Any, types: Any, concrete: Any, hints: dict[str, Any] | None = None, strides: Any = None):
        if not isinstance(dims, list):
            raise CostError("no input dims recorded (record_shapes=False?)")
        self.dims = dims
        self.types = types if isinstance(types, list) else []
        self.concrete = concrete if isinstance(concrete, list) else []
        # Sizes known from elsewhere in the trace (see costs/autograd.py), by name.
        self.hints = hints or {}
        # "Input Strides": a stride-0 dimension is a broadcast (expand), not stored data
        self.strides = strides if isinstance(strides, list) else []

    def __len__(self) -> int:
        return len(self.dims)

    def shape(self, i: int) -> list[int]:
        """Shape of tensor input i; CostError when it is absent, not a tensor or corrupt."""
        if i >= len(self.dims) or not isinstance(self.dims[i], list):
            raise CostError(f"input {i} has no shape")
        shape = self.dims[i]
        if not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
            raise CostError(f"input {i} is not a tensor shape: {shape!r}")
        if any(d < 0 for d in shape):
            raise CostError(f"input {i} has a negative dimension: {shape}")
        if math.prod(shape) > MAX_ELEMENTS:
            raise CostError(f"input {i} has an absurd size: {shape}")
        return shape

    def has_tensor(self, i: int) -> bool:
        try:
            return len(self.shape(i)) > 0 or self.dtype_or_none(i) is not None
        except CostError:
            return False

    def numel(self, i: int) -> int:
        return math.prod(self.shape(i))

    def dtype_or_none(self, i: int) -> str | None:
        return canonical(self.types[i]) if i < len(self.types) else None

    def dtype(self, i: int) -> str:
        dtype = self.dtype_or_none(i)
        if dtype is None:
            name = self.types[i] if i < len(self.types) else None
            raise CostError(f"input {i} has an unknown dtype {name!r}")
        return dtype

    def stored_numel(self, i: int) -> int:
        """Elements tensor i really holds in memory: a broadcast (stride-0) dimension, as
        `expand` makes, holds one element along it. The logical numel where strides were
        not recorded."""
        shape = self.shape(i)
        strides = self.strides[i] if i < len(self.strides) else None
        if not isinstance(strides, list) or len(strides) != len(shape) or not all(isinstance(s, int) for s in strides) \
                or 0 in shape:
            return math.prod(shape)
        return math.prod(d for d, s in zip(shape, strides) if s != 0)

    def nbytes(self, i: int) -> float:
        """Bytes of tensor i in memory: its stored elements (see stored_numel), read once,
        times the sector waste of a strided view (see sector_factor)."""
        size = element_bytes(self.dtype(i))
        return self.stored_numel(i) * size * self.sector_factor(i, size)

    def dense_nbytes(self, i: int) -> float:
        """Bytes of a fresh, dense tensor of input i's shape and dtype: an output the op
        allocates like its input (a clone or a norm of a strided view writes it dense)."""
        return self.stored_numel(i) * element_bytes(self.dtype(i))

    def sector_factor(self, i: int, element_size: float) -> float:
        """How many bytes DRAM moves per byte of a view whose densest dimension is strided.
        Memory moves whole 32-byte sectors: a view such as `x[..., ::2]` (smallest stride 2)
        touches every sector of its span, so reading it costs its span, not its elements
        (measured by Nsight Compute: `a * cos` on `x[..., ::2]` reads 2x its elements). The
        factor is that smallest stride, at most one element per sector. 1 for a dense or
        permuted tensor (its smallest stride is 1) and where strides were not recorded."""
        shape = self.shape(i)
        strides = self.strides[i] if i < len(self.strides) else None
        if not isinstance(strides, list) or len(strides) != len(shape) or not all(isinstance(s, int) for s in strides):
            return 1.0
        spread = [s for d, s in zip(shape, strides) if d > 1 and s > 0]
        smallest = min(spread, default=1)
        if smallest <= 1 or element_size <= 0:
            return 1.0
        return float(min(smallest, max(1.0, SECTOR_BYTES / element_size)))

    def tensor_indices(self) -> list[int]:
        """Inputs that are tensors with a known dtype (lists of tensors excluded)."""
        out = []
        for i in range(len(self.dims)):
            if self.dtype_or_none(i) is None:
                continue
            try:
                self.shape(i)
            except CostError:
                continue
            out.append(i)
        return out

    def scalar(self, i: int, default: Any = None) -> Any:
        """A concrete scalar input as Python value (bool, int, float, list), or default."""
        if i >= len(self.concrete):
            return default
        raw = self.concrete[i]
        if raw in ("", None):
            return default
        text = str(raw).strip()
        if text in ("True", "False"):
            return text == "True"
        try:
            if text.startswith("["):
                return [_number(v) for v in text.strip("[]").split(",") if v.strip()]
            return _number(text)
        except ValueError:
            return default


def _number(text: str) -> int | float | bool:
    text = text.strip()
    if text in ("True", "False"):
        return text == "True"
    try:
        return int(text)
    except ValueError:
        return float(text)
