"""common/text_match: RE2 over many texts at once (Arrow) gives exactly `bool(pattern.search(text))`
per text, and so does the one-by-one path a process without pandas takes for fewer texts."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tracekit.common import text_match
from tracekit.costs.classify import _RULES

NAMES = ["void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int)",
         "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "Memcpy DtoD (Device -> Device)",
         "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "flash_fwd_kernel<Flash_fwd_kernel_traits<128>>",
         "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "Cijk_Alik_Bljk_HB_MT128x128x32", "void k<é>(int)",
         "line\nbreak_softmax", "reduce_segments", "x" * 300]


@pytest.mark.parametrize("arrow", [True, False])
def test_searches_equal_the_patterns_own_answer(arrow, monkeypatch):
    texts = [f"{n}_{i}" if i else n for i in range(8) for n in NAMES]  # 88 texts: past MIN_ARROW_TEXTS
    monkeypatch.setattr(text_match, "arrow_pays", lambda count: arrow)
    patterns = [p for _, p in _RULES] + [re.compile(r"^void\b"), re.compile(r"(?<=_)sum", re.I)]  # (a lookbehind: no RE2)
    search = text_match.TextSearch(texts)
    for p in patterns:
        assert search.searches(p).tolist() == [p.search(t) is not None for t in texts], p.pattern
    todo = np.array([1, 5, 40])
    got = search.searches(patterns[0], todo)
    assert got.tolist() == [i in todo.tolist() and patterns[0].search(t) is not None for i, t in enumerate(texts)]


def test_arrow_pays_for_many_texts_or_once_pandas_is_loaded(monkeypatch):
    import sys

    assert not text_match.arrow_pays(text_match.MIN_ARROW_TEXTS - 1)
    monkeypatch.delitem(sys.modules, "pandas", raising=False)
    assert not text_match.arrow_pays(text_match.ARROW_WITHOUT_PANDAS - 1)
    assert text_match.arrow_pays(text_match.ARROW_WITHOUT_PANDAS)
