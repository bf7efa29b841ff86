"""as_text(): a categorical column's text, from its categories, as astype(str) gives it."""

from __future__ import annotations

import pandas as pd

from tracekit.trace.column_text import as_text


def test_labels_match_astype_str_and_missing_is_none():
    column = pd.Series(pd.Categorical(["aten::mm", None, "aten::mm", "nccl:all_reduce", "ProfilerStep#3"]))
    out = as_text(column)
    assert out.tolist() == ["aten::mm", None, "aten::mm", "nccl:all_reduce", "ProfilerStep#3"]
    present = column.notna().to_numpy()
    assert out[present].tolist() == column.astype(str).to_numpy()[present].tolist()


def test_labels_of_a_plain_column_and_of_non_string_categories():
    assert as_text(pd.Series(["b", "a", "b"])).tolist() == ["b", "a", "b"]
    assert as_text(pd.Series(pd.Categorical([3, 1, 3]))).tolist() == ["3", "1", "3"]


def test_rows_in_is_isin_of_the_text_with_missing_rows_out():
    from tracekit.trace.column_text import rows_in

    column = pd.Series(pd.Categorical(["python", None, "gpu", "user_annotation", "python", "inferred"]))
    # np.isin(as_text(column), values): rows 0, 2, 4 hold python or gpu; row 1 is missing, never in
    assert rows_in(column, ["python", "gpu"]).tolist() == [True, False, True, False, True, False]
    assert (~rows_in(column, ["python", "gpu"])).tolist() == [False, True, False, True, False, True]
    assert rows_in(pd.Series(["a", "b"]), ()).tolist() == [False, False]


def test_category_text_is_converted_once_per_categories_index():
    from tracekit.trace.column_text import category_text

    names = pd.Series(["b", "a", None, "b"]).astype("category")
    text = category_text(names.cat.categories)
    assert text == ["a", "b"]
    assert category_text(names.iloc[1:].cat.categories) is text  # a slice shares the Index: no new conversion
    other = pd.Series(["a", "c"]).astype("category")  # another Index: its own text
    assert category_text(other.cat.categories) == ["a", "c"]
    assert category_text(pd.Index([1, 2.5])) == ["1.0", "2.5"]  # non-text labels as str() writes them
