"""Passes that must stay linear in distinct names (issue 39 item 5: 100k distinct kernel
names took 85 s when a pass compared every name with every other). These tests count the
work, they do not time it: a name type that counts its comparisons shows a pass that
compares all pairs."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analysis.rollup import duration_sketches


class CountingName(str):
    """A kernel name that counts how often it is compared for equality."""
    comparisons = 0

    def __eq__(self, other):
        CountingName.comparisons += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_duration_sketches_compare_each_name_a_bounded_number_of_times():
    n = 3000
    names = [f"void kernel_{i}<float>(float*)" for i in range(n)]
    # Two calls of each name, 1 and 3 ns: every sketch is [1.0, 3.0].
    k = pd.DataFrame({"name": pd.Series(names + names, dtype="category"),
                      "duration_ns": np.r_[np.ones(n), np.full(n, 3.0)]})
    wanted = [CountingName(x) for x in names[: n // 2]]
    CountingName.comparisons = 0
    sketches = duration_sketches(k, wanted)
    assert sorted(sketches) == sorted(names[: n // 2])
    assert all(v == [1.0, 3.0] for v in sketches.values())
    # A hash lookup compares a category with the wanted name of the same hash: about one
    # comparison per category. Comparing all pairs would be n * n / 2 = 4.5 million.
    assert CountingName.comparisons <= 2 * n


# Names for every rule of costs/classify.py, names no rule takes, and names that RE2 must not
# see (non-ASCII, a newline: there the engines differ, and the name is searched by `re`).
CLASSIFY_NAMES = [
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "deep_ep::internode_ll::dispatch<8>",
    "void moe_align_block_size_kernel<int>(int*)", "_combined_routing_memset", "routingMainKernel_x", "xrouting_x",
    "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64>>(Flash_fwd_params)", "reduce_segments", "reduce_segments\n",
    "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "triton_per_fused_mean_rsqrt_1", "triton_red_fused_rsqrt_2",
    "triton_red_fused_add_mean_1", "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1",
    "sm80_foo_tensorop_bar", "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_tn", "nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NTN",
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, float const*)",
    "cunn_SoftMaxForward", "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>(at::native::ReduceOp<float>)",
    "Memcpy HtoD (Pageable -> Device)", "void at::native::index_elementwise_kernel<128, 4>(long)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel>(int, at::native::silu_kernel)",
    "triton_poi_fused_add_0", "triton_tem_fused_mm_0", "my_custom_kernel", "kernel_ſoftmax", "Ünïcode_gemm_kernel",
    "void f<(anonymous namespace)::T>(int) gemm", "operator>(int)gemm", "(leading)gemm", "a(b<c>)gemm", "",
]


def test_classify_in_one_pass_agrees_with_the_name_by_name_rules():
    from tracekit.costs.classify import classify, classify_name, is_auxiliary, AUXILIARY, without_parameters

    names = pd.Series(CLASSIFY_NAMES + CLASSIFY_NAMES[:5])
    assert list(classify(names)) == [classify_name(n) for n in names]
    assert list(is_auxiliary(names)) == [bool(AUXILIARY.search(without_parameters(n))) for n in names]
    # each rule is reached by some name above (the test would pass vacuously on "other" alone)
    assert {"collective", "routing", "attention", "norm", "gemm", "softmax", "reduction", "copy", "elementwise", "triton",
            "other"} <= set(classify(names))


def test_without_parameters_stops_at_the_first_bracket_outside_templates():
    from tracekit.costs.classify import without_parameters

    assert without_parameters("void k<float, (int)3>(float*)") == "void k<float, (int)3>"
    assert without_parameters("void k(float*)") == "void k"
    assert without_parameters("(x)y(z)") == "(x)y"
    assert without_parameters("a>b(c)") == "a>b(c)"  # depth -1 at the bracket: never at 0 again
    assert without_parameters("f<(anonymous namespace)::T>(int)") == "f<anonymous_namespace::T>"


def test_duration_sketches_equal_the_sketch_of_each_names_calls():
    from tracekit.common.sketch import sketch

    rng = np.random.default_rng(7)
    calls = rng.integers(1, 60, size=300)  # names with fewer and with more calls than points
    names = np.repeat([f"k{i}" for i in range(len(calls))], calls)
    durations = rng.integers(1, 10_000, size=len(names)).astype(np.float64) / 7
    shuffled = rng.permutation(len(names))
    k = pd.DataFrame({"name": pd.Series(names[shuffled], dtype="category"), "duration_ns": durations[shuffled]})
    got = duration_sketches(k, [f"k{i}" for i in range(0, len(calls), 2)])
    assert got == {f"k{i}": sketch(durations[names == f"k{i}"]) for i in range(0, len(calls), 2)}


def _walk_without_parameters(name: str) -> str:
    """The character walk without_parameters replaced (the reference it must equal)."""
    text = name.replace("(anonymous namespace)", "anonymous_namespace")
    depth = 0
    for i, ch in enumerate(text):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0:
            return text[:i]
    return text


def test_without_parameters_equals_the_character_walk_on_random_bracket_strings():
    from tracekit.costs.classify import without_parameters

    rng = np.random.default_rng(3)
    alphabet = np.array(list("<>()a "))
    for length in (0, 1, 2, 5, 12, 40, 120):
        for _ in range(1500):
            text = "".join(rng.choice(alphabet, size=length, p=[0.2, 0.15, 0.2, 0.1, 0.25, 0.1]))
            assert without_parameters(text) == _walk_without_parameters(text), text


def test_raw_bytes_are_each_values_bytes_and_a_nul_falls_back_to_one_copy_each():
    import msgspec

    from tracekit.parsers.kineto_decode import raw_bytes

    values = [b"[[1, 4096], [4096]]", b"null", b'["float", ""]', b"[]", b"[[1, 4096], [4096]]"]
    assert raw_bytes([msgspec.Raw(v) for v in values]) == values
    assert raw_bytes([]) == []
    odd = [b'"a\x00b"', b"[1]"]  # not JSON a decoder hands out, but never split at the NUL
    assert raw_bytes([msgspec.Raw(v) for v in odd]) == odd


def _distinct_names_trace(tmp_path, n: int):
    """benchmarks/distinct_names.py's trace (n aten::add ops, each launching one kernel of its
    own name, all with the same recorded inputs), written to a file."""
    import importlib.util
    import json
    import pathlib

    spec = importlib.util.spec_from_file_location("distinct_names", pathlib.Path(__file__).parents[1] / "benchmarks" / "distinct_names.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "names.json"
    path.write_text(json.dumps(module.distinct_names_trace(n)))
    return path


def test_plain_template_names_are_labelled_without_a_call_per_name(monkeypatch):
    """`void elementwise_kernel_7<float, 0>(float*, int)`: a plain template name's label is
    its name and arguments (`elementwise_kernel_7<float, 0>`), made for all such names at
    once; label() runs only for the names that are not plain (a nested template, a
    non-ASCII name, a mangled one). Every label equals label(name, 0), name by name."""
    from tracekit.trace import kernel_names

    plain = [f"void elementwise_kernel_{i}<float, {i % 7}>(float*, int)" for i in range(3000)]
    scoped = [f"void flash::fwd_{i}<128, true>(Params)" for i in range(50)] + [f"void at::native::k_{i}<4>()" for i in range(50)] \
        + [f"ns::inner::k_{i}<T, 2>(int)" for i in range(20)] + [f"void void_{i}<a>(b)" for i in range(20)]  # (no `void `; a name like it)
    others = ["void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1>>(int)",
              "void kernel_ſ<float>(int)", "_ZN5flash7fwd_maxILi4EEEvv", "Cijk_Alik_Bljk_HB_MT128x128x32_MI16x16x1",
              "void cutlass::Kernel<Gemm>(Params)", "void k<>(int)", "void k_x<" + "x" * 70 + ">(int)"]
    names = plain + scoped + others
    expected = {n: kernel_names.label(n, 0) for n in names}
    assert expected[plain[7]] == "elementwise_kernel_7<float, 0>" and expected[scoped[0]] == "flash::fwd_0<128, true>"
    assert expected[scoped[50]] == "k_0<4>"  # torch's own scope is dropped
    calls = []
    one_by_one = kernel_names.label
    monkeypatch.setattr(kernel_names, "label", lambda name, detail=0: calls.append(name) or one_by_one(name, detail))
    assert kernel_names.labels(names) == expected  # all distinct: no detail added, no number
    assert sorted(set(calls) & set(names)) == sorted(others)  # (a wrapper's label also labels what it wraps)


def test_group_sums_are_the_masked_sums_in_one_sort():
    """waste rows pick the op / shape holding the most time: the sums equal numpy's sum over
    each label's rows exactly (same elements, same order), so the pick is the one a pass per
    label made."""
    from tracekit.analysis.waste_row import group_sums

    rng = np.random.default_rng(11)
    values = rng.random(5000) * 1e6
    labels = rng.integers(0, 300, size=5000)
    rows = rng.random(5000) < 0.7
    got = group_sums(values, labels, rows)
    assert set(got) == set(np.unique(labels[rows]).tolist())
    assert all(got[g] == values[rows & (labels == g)].sum() for g in got)
    text = np.array([f"({g},)" for g in labels], dtype=object)  # object labels (the copy detector's shape keys)
    assert group_sums(values, text, rows) == {f"({g},)": s for g, s in got.items()}


def test_the_copy_and_strided_checks_run_once_per_distinct_inputs(tmp_path, monkeypatch):
    """The copy and strided-layout detectors judge an op by its recorded inputs: n aten::add
    calls with the same inputs are judged once, not n times (the parser shares one object
    per distinct inputs list)."""
    import tracekit
    from tracekit.analysis import waste_copies, waste_strided

    judged = {"copy": 0, "strided": 0}
    copy_kind, strided_input = waste_copies.copy_kind, waste_strided.strided_input

    def counted(what, fn):
        def run(*args):
            judged[what] += 1
            return fn(*args)
        return run

    monkeypatch.setattr(waste_copies, "copy_kind", counted("copy", copy_kind))
    monkeypatch.setattr(waste_strided, "strided_input", counted("strided", strided_input))
    # the detectors run a fixed number of passes (the copies are judged once for the three copy
    # passes; strided once): each pass judges the one distinct inputs list once,
    # so the count is the same for 40 calls as for 400, and far below either
    counts = []
    for n in (40, 400):
        judged.update(copy=0, strided=0)
        a = tracekit.analyze(_distinct_names_trace(tmp_path / str(n), n), workers=1)
        assert len(a.trace.ops) == n and a.kernels["name"].nunique() == n
        counts.append(dict(judged))
    assert counts[0] == counts[1]
    assert 1 <= counts[1]["copy"] <= 3 and 1 <= counts[1]["strided"] <= 3
