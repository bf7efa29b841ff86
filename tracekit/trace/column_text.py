"""A categorical column's values as plain str, built from its categories (see as_text).

`series.astype(str)` on a categorical builds a new string array row by row (under pandas 3
an Arrow string array: ~3 µs per row, 0.3 s for a 50 MB trace's tables). The names in a
trace are categoricals with a few thousand distinct values, so their text is made once per
category and picked by code.
"""

from __future__ import annotations

import re

import weakref
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # a column handed in is a pandas Series; importing this module needs no pandas
    import pandas as pd  # (the health check of `info` imports step_ownership, which imports this)


def _categorical(column: pd.Series) -> pd.Series:
    import pandas as pd

    return column if isinstance(column.dtype, pd.CategoricalDtype) else column.astype("category")


def category_text(categories) -> list[str]:
    """A categorical's categories as a list of str (the caller must not change it), converted
    in one call: iterating an Arrow-backed Index costs ~6 µs a value (0.7 s for a trace of
    100k distinct names). A column's slices share its categories Index, and an analysis asks
    for the kernel names' text dozens of times: kept while that Index lives."""
    key = id(categories)
    kept = _TEXT_OF.get(key)
    if kept is not None and kept[0]() is categories:
        return kept[1]
    text = [v if type(v) is str else str(v) for v in categories.to_numpy(dtype=object).tolist()]
    _TEXT_OF[key] = (weakref.ref(categories), text)
    weakref.finalize(categories, _TEXT_OF.pop, key, None)  # (an Index is not hashable: keyed by id while it lives)
    return text


_TEXT_OF: dict[int, tuple[weakref.ref, list[str]]] = {}


def as_text(column: pd.Series) -> np.ndarray:
    """Object array of str, one per row; None where the value is missing."""
    cat = _categorical(column)
    text = np.array(category_text(cat.cat.categories) + [None], dtype=object)
    return text[cat.cat.codes.to_numpy()]


def rows_where(column: pd.Series, predicate) -> np.ndarray:
    """Rows whose text satisfies `predicate` (a regex's search, ...): called once per distinct
    value, not once per row (a trace holds millions of Python frames and few names)."""
    cat = _categorical(column)
    by_code = np.array([bool(predicate(c)) for c in category_text(cat.cat.categories)] + [False], dtype=bool)
    return by_code[cat.cat.codes.to_numpy()]


def rows_in(column: pd.Series, values) -> np.ndarray:
    """Rows whose text is one of `values`: `np.isin(as_text(column), values)` without the
    object array (isin on Python strings sorts them all: ~0.1 s on a trace's million ranges)."""
    wanted = frozenset(values)
    return rows_where(column, wanted.__contains__)


# "<built-in method copy_ of Tensor object at 0x7ed6e00c44a0>": the address tells the reader
# nothing and splits one method into one name per object (and per run)
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def without_address(text: str) -> str:
    """A Python frame's or op's name without the object address CPython prints in it."""
    return ADDRESS.sub("", text)
