"""Tokens of a compiled model's steps from its GEMMs (tracekit.analysis.gemm_tokens): Inductor
fuses the embedding lookup into a generated kernel, so no [B, T] index tensor is recorded, but
the cuBLAS GEMMs it calls through aten::mm are, with their rows."""

from __future__ import annotations

import json
import pathlib

from tracekit.analysis.load import analyze

H100 = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "gpu" / "h100"


def test_compiled_decode_steps_count_the_batch_as_tokens():
    truth = json.loads((H100 / "compiled.truth.json").read_text())
    a = analyze(str(H100 / "h10080gbhbm3_llama3-8b_8layers_compiled_decode_bs16.json.gz"))
    per = a.throughput.steps
    assert len(per) == 4
    # a decode step: one forward (one LM head call), its first GEMM (the QKV projection) over B rows
    assert list(per["unit"]) == ["tokens"] * 4
    assert list(per["items"]) == [float(truth["batch"])] * 4 == [16.0] * 4
    # tokens/s = batch / the step's GPU window; the unprofiled step is 10.76 ms: the later steps'
    # windows hold it within 5% (the first step also waits for the host's first launches)
    rates = per["throughput"].to_numpy()[1:]
    want = truth["batch"] / truth["step_s"]
    assert all(abs(r / want - 1) <= 0.05 for r in rates), (rates, want)
    assert "first GEMM" in per["source"].iloc[0]
