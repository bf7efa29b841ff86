"""Labels and widths (issue 30, point 4): a cut kernel label keeps its functor; a cut frame
keeps its file, line and function; a frame's object address is dropped."""

from __future__ import annotations

from rich.text import Text

MUL = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, "
       "c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, "
       "at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, "
       "std::array<char*, 3ul>)")
AMUL = ("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
        "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int, at::native::AUnaryFunctor<float, "
        "float, float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul>)")
POW1 = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::pow_tensor_scalar_kernel_impl"
        "<float, float>(at::TensorIteratorBase&, float)::{lambda(float)#1}, std::array<char*, 2ul> >(int, at::native::"
        "(anonymous namespace)::pow_tensor_scalar_kernel_impl<float, float>(at::TensorIteratorBase&, float)::{lambda(float)#1}, "
        "std::array<char*, 2ul>)")
POW2 = POW1.replace("#1}", "#2}")


def test_elementwise_labels_keep_their_functor():
    """h100_qwen1.5 / tinyllama: these four were `vectorized_elementwise_kernel<4, …> #1..#4`."""
    from tracekit.trace.kernel_names import MAX_LABEL, labels

    got = labels([MUL, AMUL, POW1, POW2])
    assert got[MUL] == "vectorized_elementwise_kernel<4, BinaryFunctor<MulFunctor>>"
    assert got[AMUL] == "vectorized_elementwise_kernel<4, AUnaryFunctor<MulFunctor>>"
    assert "pow_tensor" in got[POW1] and got[POW1].endswith("λ1>") and got[POW2].endswith("λ2>")
    assert all(len(v) <= MAX_LABEL and "#" not in v for v in got.values())


def test_a_cut_frame_keeps_its_file_line_and_function():
    from tracekit.reports.terminal import elide_middle

    frame = "frame /opt/conda/lib/python3.11/site-packages/transformers/models/bert/modeling_bert.py(218): forward"
    for width in (40, 50, 60):
        shown = elide_middle(Text(frame), width).plain
        assert len(shown) <= width and shown.startswith("frame …/") and shown.endswith("modeling_bert.py(218): forward")


def test_frame_addresses_are_dropped():
    """`<built-in method copy_ of Tensor object at 0x7ed6e00c44a0>`: one name per method."""
    import tracekit
    from conftest import shared

    a = tracekit.analyze(shared("torch", "mi300x_sglang_qwen3-8b_decode_bs32.json.gz"), workers=1)
    names = a.findings.idle_host["name"].tolist()
    assert names and not any(" at 0x" in n for n in names)
    assert "<built-in method copy_ of Tensor object>" in names


def test_one_label_per_kernel_in_every_report():
    """Issue 40: one kernel had two labels (`elementwise_kernel<128, 4, direct_copy_kernel_cuda>`
    in the fix list and `info`, a more detailed one in analyze's tables: each labelled a
    different set of names). Now every place labels all of the trace's names at once
    (trace_labels): `info`, analyze's tables, the causes and the bundle's `label` agree."""
    import tracekit
    from conftest import shared
    from tracekit.api import scan
    from tracekit.reports.bundle import kernels_with_names
    from tracekit.reports.tables import Labels
    from tracekit.trace.inventory import inventory

    path = shared("torch", "h100_qwen1.5-0.5b_hf_inference.json.gz")
    a = tracekit.analyze(path)
    table = Labels(a)
    inv = inventory(scan(path, workers=1), top=30)
    assert len(inv["top_kernels"]) >= 20  # all 28 names the trace has
    for row in inv["top_kernels"]:
        assert row["label"] == str(table(row["name"])), row["name"]
    bundle = kernels_with_names(a.kernels).drop_duplicates("name")
    assert all(str(table(n)) == lab for n, lab in zip(bundle["name"].astype(str), bundle["label"].astype(str)))
    for c in a.findings.causes:
        if c["cause"].startswith("waste_"):  # a waste row names its op chain and host code, not a kernel
            assert " at 0x" not in c["where"]  # frames without CPython's object addresses
        elif "kernel" in c["evidence"]:
            assert c["where"] == str(table(c["evidence"]["kernel"]))
    # the labels do not depend on which names are asked for, or in which order
    from tracekit.trace.kernel_names import trace_labels

    names = list(a.kernels["name"].astype(str).unique())
    assert trace_labels(names) == trace_labels(list(reversed(names)))
