"""Strict JSON for every JSON tracekit writes: NaN and infinities become null.

Python's json writes `NaN` / `Infinity`, which are not JSON (jq, JavaScript and most
parsers reject them) and docs/summary-schema.md promises null for unknown figures. All
JSON writers go through `dumps`; `allow_nan=False` makes a value that slipped past the
cleaning an error here rather than invalid output.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import numpy as np

# The version of summary.json's layout (tracekit/analysis/result.py writes it; compare/summary.py
# refuses a newer one). Here, not in the analysis, so that reading a stored summary imports none.
SCHEMA_VERSION = 2


def clean(value: Any) -> Any:
    """`value` with every non-finite float replaced by None, numpy scalars and arrays as
    plain Python, mapping keys as strings (JSON object keys are strings)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k if isinstance(k, str) else str(clean(k)): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, np.ndarray):
        return [clean(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return clean(value.item())
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if _is_pandas_missing(value):
        return None
    return str(value)  # dates, paths, categories: their text


def dumps(value: Any, **kwargs: Any) -> str:
    kwargs.setdefault("indent", 2)
    return json.dumps(clean(value), allow_nan=False, **kwargs)


def _is_pandas_missing(value: Any) -> bool:
    """pd.NA / pd.NaT, without importing pandas (a value can only be one if pandas is loaded)."""
    pd = sys.modules.get("pandas")
    return pd is not None and (value is pd.NA or value is pd.NaT)


def records(frame) -> list[dict[str, Any]]:
    """A DataFrame's rows as plain dicts for JSON: NaN -> None, numpy scalars as Python."""
    return [plain(row) for row in frame.to_dict(orient="records")]


def plain(mapping: dict[str, Any]) -> dict[str, Any]:
    """One level of a mapping for JSON: NaN -> None (unknown is null), numpy scalars as Python."""
    return {k: (None if isinstance(v, float) and v != v else (v.item() if hasattr(v, "item") else v)) for k, v in mapping.items()}
