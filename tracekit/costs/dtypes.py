"""torch.profiler "Input type" strings -> canonical dtype names and element sizes."""

from __future__ import annotations

import re

# canonical name -> bytes per element
ELEMENT_BYTES = {
    "fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "fp4": 0.5,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1, "c64": 8, "c128": 16,
    # elements known only by their size (a kernel templated on OpaqueType<2u>)
    "b8": 1, "b16": 2, "b32": 4, "b64": 8, "b128": 16,
}

_ALIASES = {
    "double": "fp64", "float64": "fp64",
    "float": "fp32", "float32": "fp32",
    "c10::half": "fp16", "half": "fp16", "float16": "fp16",
    "c10::bfloat16": "bf16", "bfloat16": "bf16",
    "c10::float8_e4m3fn": "fp8", "c10::float8_e5m2": "fp8", "c10::float8_e4m3fnuz": "fp8",
    "c10::float8_e5m2fnuz": "fp8", "c10::float8_e8m0fnu": "fp8", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8",
    "c10::float4_e2m1fn_x2": "fp4",
    "long int": "int64", "long": "int64", "int64_t": "int64", "int64": "int64",
    "int": "int32", "int32": "int32",
    "short int": "int16", "short": "int16",
    "signed char": "int8", "int8": "int8",
    "unsigned char": "uint8", "uint8": "uint8",
    "bool": "bool",
    "c10::complex<float>": "c64", "c10::complex<double>": "c128",
}

# Kineto collective metadata dtype names
_COLLECTIVE = {"BFloat16": "bf16", "Half": "fp16", "Float": "fp32", "Double": "fp64", "Long": "int64", "Int": "int32", "Byte": "uint8", "Char": "int8", "Bool": "bool", "Float8_e4m3fn": "fp8", "Float8_e5m2": "fp8"}


def canonical(type_name: str | None) -> str | None:
    """The canonical dtype of a torch type string, or None when it is not a tensor dtype."""
    if not type_name or not isinstance(type_name, str):
        return None
    return _ALIASES.get(type_name.strip().lower()) or _COLLECTIVE.get(type_name.strip())


def element_bytes(dtype: str) -> float:
    return ELEMENT_BYTES[dtype]


_OPAQUE = re.compile(r"OpaqueType<(\d+)u?>")


# C++ element types as kernels' template arguments name them -> bytes per element
_TEMPLATE_TYPES = {
    "c10::BFloat16": 2, "__nv_bfloat16": 2, "__hip_bfloat16": 2, "c10::Half": 2, "__half": 2, "half": 2,
    "float": 4, "double": 8, "long": 8, "long int": 8, "int64_t": 8, "int": 4, "short": 2, "signed char": 1,
    "unsigned char": 1, "bool": 1, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1, "__nv_fp8_e4m3": 1,
}
_FIRST_TEMPLATE_ARGUMENT = re.compile(r"^(?:void\s+)?[\w:]+<\s*([^,<>]+?)\s*[,>]")


def element_bytes_from_kernel(name: str) -> float | None:
    """Element size a data-movement kernel is templated on: torch's cat, index and copy
    kernels use `OpaqueType<N>` with N = sizeof(element); others name the element type as
    their first template argument (`CatArrayBatchedCopy<c10::BFloat16, ...>`,
    `upsample_nearest2d_out_frame<__nv_bfloat16, ...>`). None when the name does not say."""
    text = name[:4096]
    found = {int(n) for n in _OPAQUE.findall(text)}
    if found:
        return float(found.pop()) if len(found) == 1 and found <= {1, 2, 4, 8, 16} else None
    first = _FIRST_TEMPLATE_ARGUMENT.match(text.replace("(anonymous namespace)::", ""))
    size = _TEMPLATE_TYPES.get(first.group(1)) if first else None
    return float(size) if size else None


def sized_dtype(nbytes: float) -> str:
    return f"b{int(nbytes * 8)}"


def dominant_matrix_dtype(kind, dtype, time) -> str | None:
    """The compute dtype of most matrix-work time (per-kernel arrays of cost kind, dtype and
    duration): the dtype a run's tensor-core work runs in, for its roof and for kernels whose
    own dtype is not recorded. None without matrix work."""
    import numpy as np
    import pandas as pd

    kind, dtype, time = np.asarray(kind, dtype=object), np.asarray(dtype, dtype=object), np.asarray(time, dtype=np.float64)
    matrix = kind == "matrix"
    if not matrix.any():
        return None
    return str(pd.Series(time[matrix]).groupby(dtype[matrix].astype(str)).sum().idxmax())
