"""tracekit.trace.grouping (numpy group-by on codes) and attribution's Enclosing (one walk per
tree) against the pandas / level-by-level computations they replace: same groups, same
order, and the very same floating-point sums."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pandas as pd
import re2

from conftest import shared

from tracekit.attribution.match import Enclosing, NameSearch, with_ancestors
from tracekit.trace.grouping import combine, group_rows, key_of, label_column
from tracekit.costs.unknown import known_sum

QWEN = "h100_qwen1.5-0.5b_hf_inference.json.gz"


def test_groups_in_order_of_first_appearance_without_missing_keys():
    names = pd.Series(pd.Categorical(["b", "a", "b", None, "c", "a"], categories=["a", "b", "c"]))
    key = key_of(names)
    groups = group_rows([key], len(names))
    assert label_column(key, groups.first).tolist() == ["b", "a", "c"]  # as they first appear, not sorted
    assert groups.size.tolist() == [2, 2, 1]
    assert groups.group.tolist() == [0, 1, 0, -1, 2, 1]  # the row with no name belongs to no group
    kept = group_rows([key_of(names, missing="nan")], len(names), dropna=False)
    assert label_column(key_of(names, missing="nan"), kept.first).tolist() == ["b", "a", "nan", "c"]


def test_two_keys_and_plain_text_keys():
    op = key_of(["mm", "mm", "add", "mm", "add"])
    shapes = key_of(["[1, 2]", "[3]", "[1, 2]", "[1, 2]", "[1, 2]"])
    groups = group_rows([op, shapes], 5)
    assert list(zip(label_column(op, groups.first), label_column(shapes, groups.first))) == [
        ("mm", "[1, 2]"), ("mm", "[3]"), ("add", "[1, 2]")]
    assert groups.size.tolist() == [2, 1, 2]
    assert groups.nunique(np.array([7, 7, 1, 9, 1])).tolist() == [2, 1, 1]  # distinct op rows per group
    assert groups.sum(np.array([5, 6, 7, 8, 9])).tolist() == [13, 6, 16]
    assert groups.sum(np.array([5, 6, 7, 8, 9])).dtype == np.int64  # integers stay integers


def test_known_sum_is_unknown_without_a_known_value():
    groups = group_rows([key_of(["x", "y", "x", "y"])], 4)
    out = groups.known_sum(np.array([1.5, np.nan, 2.0, np.nan]))
    assert out[0] == 3.5 and np.isnan(out[1])


def test_sums_are_bit_identical_to_pandas_groupby():
    rng = np.random.default_rng(7)
    n = 20000
    codes = rng.integers(0, 40, n)
    codes[:3000] = 3  # one large group: numpy's pairwise sum splits it into blocks
    values = rng.random(n) * 1e7 / 3
    values[rng.random(n) < 0.3] = np.nan
    values[codes == 11] = np.nan  # a group with no known value
    names = pd.Series(pd.Categorical.from_codes(codes, [f"k{i}" for i in range(40)]))
    groups = group_rows([key_of(names)], n)
    frame = pd.DataFrame({"name": names.astype(str), "v": values, "w": np.nan_to_num(values)})
    reference = frame.groupby("name", sort=False).agg(v=("v", known_sum), w=("w", "sum"))
    assert reference.index.tolist() == label_column(key_of(names), groups.first).tolist()
    ours = groups.known_sum(values)
    assert np.array_equal(np.isnan(ours), reference["v"].isna().to_numpy())
    assert (ours[~np.isnan(ours)] == reference["v"].dropna().to_numpy()).all()  # exactly, not approximately
    assert (groups.float_sum(np.nan_to_num(values)) == reference["w"].to_numpy()).all()


def test_combine_gives_equal_codes_to_equal_rows_only():
    a = np.array([1, 1, 2, 2, 1, -1])
    b = np.array([5, 6, 5, 5, 5, 5])
    codes = combine([a, b])
    rows = list(zip(a.tolist(), b.tolist()))
    for i in range(len(rows)):
        for j in range(len(rows)):
            assert (codes[i] == codes[j]) == (rows[i] == rows[j])


def test_enclosing_matches_a_walk_over_the_whole_tree():
    """Random forests: a kernel matches when its node or an ancestor whose row counts has a
    matching name, the same answer with_ancestors gives by passing flags level by level."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        n = int(rng.integers(1, 300))
        parent = np.full(n, -1, dtype=np.int64)
        depth = np.zeros(n, dtype=np.int32)
        for row in range(1, n):
            if rng.random() < 0.8:
                parent[row] = rng.integers(0, row)
                depth[row] = depth[parent[row]] + 1
        table = pd.DataFrame({"name": pd.Categorical([f"n{int(x)}" for x in rng.integers(0, 12, n)]), "parent": parent, "depth": depth})
        counted = rng.random(n) < 0.7
        pointer = np.where(rng.random(500) < 0.8, rng.integers(0, n, 500), -1)
        pattern = re2.compile(r"n1|n7")
        own = table["name"].astype(str).str.contains("n1|n7").to_numpy() & counted
        expected = np.where(pointer >= 0, with_ancestors(own, parent, depth)[np.maximum(pointer, 0)], False)
        (hit,) = Enclosing(table, NameSearch(table["name"]), [pointer], counted).hits(pattern)
        assert (hit == expected).all()


def test_top_kernels_against_a_groupby_of_the_raw_trace():
    """Per kernel name: calls as the trace's own kernel events give them (read with gzip +
    json), and GPU time and FLOPs exactly what a pandas groupby of the kernels gives."""
    from tracekit.api import analyze

    path = shared("torch", QWEN)
    a = analyze(path, workers=1)
    top = a.top_kernels(10**6).set_index("name")
    with gzip.open(path, "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel" and e.get("ph") == "X"]
    calls = pd.Series([e["name"] for e in events]).value_counts()
    assert len(calls) > 10
    for name, n in calls.items():
        assert top.loc[name, "count"] == n
    by_name = a.kernels.assign(n=a.kernels["name"].astype(str)).groupby("n", sort=False).agg(
        flops=("flops", known_sum), time=("duration_ns", "sum"))
    assert by_name.index.tolist() == list(dict.fromkeys(a.kernels["name"].astype(str)))
    assert (top["time_ns"] == by_name["time"].reindex(top.index)).all()
    known = top["flops"].notna()
    assert known.sum() > 5
    assert (top["flops"][known] == by_name["flops"].reindex(top.index)[known]).all()  # exactly


def _walk(rows, gemm, activation, attention, pos, step, window):
    """The layer-pattern rule kernel by kernel (the loop layer_pattern replaced): the first
    activation / attention kernel within `window` non-GEMM kernels, skipping the GEMMs right
    next to `pos` but stopping at a GEMM further away."""
    i, seen, in_run = pos + step, 0, True
    while 0 <= i < len(rows) and seen < window:
        if gemm[i]:
            if not in_run:
                return None
        else:
            in_run = False
            seen += 1
            if activation[rows[i]]:
                return "activation"
            if attention[rows[i]]:
                return "attention"
        i += step
    return None


def test_layer_pattern_matches_a_kernel_by_kernel_walk():
    from tracekit.attribution.inference import WINDOW, layer_pattern

    rng = np.random.default_rng(11)
    kinds = np.array(["gemm", "attention", "elementwise", "norm"], dtype=object)
    for _ in range(30):
        n = int(rng.integers(1, 120))
        kernel_class = kinds[rng.choice(4, n, p=[0.4, 0.1, 0.3, 0.2])]
        act = rng.random(n) < 0.15
        names = np.where(act, "silu_kernel", "other_kernel")
        k = pd.DataFrame({"name": pd.Categorical(names), "device": rng.integers(0, 2, n).astype(np.int32),
                          "stream": rng.integers(7, 9, n), "start": rng.permutation(n).astype(np.int64)})
        block = np.where(rng.random(n) < 0.8, "other", "norm").astype(object)
        expected = block.copy()
        order = np.lexsort((k["start"].to_numpy(), k["stream"].to_numpy(), k["device"].to_numpy()))
        is_gemm = kernel_class == "gemm"
        activation, attention = act & ~is_gemm, kernel_class == "attention"
        for lane in {(d, s) for d, s in zip(k["device"], k["stream"])}:
            rows = order[(k["device"].to_numpy()[order] == lane[0]) & (k["stream"].to_numpy()[order] == lane[1])]
            for pos in np.flatnonzero(is_gemm[rows] & (block[rows] == "other")):
                seen = {_walk(rows, is_gemm[rows], activation, attention, pos, step, WINDOW) for step in (1, -1)}
                if "activation" in seen:
                    expected[rows[pos]] = "ffn"
                elif "attention" in seen:
                    expected[rows[pos]] = "attention"
        assert layer_pattern(k, kernel_class, block).tolist() == expected.tolist()
