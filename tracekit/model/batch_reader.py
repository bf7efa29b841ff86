"""The batch of each step of one trace: its engine annotations first
(tracekit.model.batch_annotations), then, for eager runs (HF generate, plain forward passes),
the step's attention op shapes (batch, query and key lengths) and the LM head's linear op
(the token count), then what an earlier prefill implies, then --batch / --context."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tracekit.model.batch import Requests, StepBatch, from_options, more_complete, with_context
from tracekit.model.batch_annotations import from_annotation
from tracekit.trace import Trace

_ATTENTION_OPS = {  # op name -> (q, k positions, layout, is_causal position or None)
    "aten::scaled_dot_product_attention": (0, 1, "bhsd", 5),
    "aten::_scaled_dot_product_flash_attention": (0, 1, "bhsd", 4),
    "aten::_scaled_dot_product_efficient_attention": (0, 1, "bhsd", 6),
    "aten::_scaled_dot_product_cudnn_attention": (0, 1, "bhsd", 6),
    "aten::_scaled_dot_product_flash_attention_for_cpu": (0, 1, "bhsd", 4),
    "aten::_flash_attention_forward": (0, 1, "bshd", 8),
    "flash_attn::_flash_attn_forward": (0, 1, "bshd", 5),
}

_LINEAR = ("aten::linear", "aten::mm", "aten::matmul")


class BatchReader:
    """Reads the batch of each step of one trace. The range names and the few ops that tell
    a batch (attention, linear) are gathered once, so that a step costs a search, not a scan."""

    def __init__(self, trace: Trace, vocab: int | None):
        r, ops = trace.ranges, trace.ops
        self.vocab = vocab
        self.range_names = r["name"].astype(str).to_numpy() if len(r) else np.zeros(0, dtype=object)
        self.ranges = r
        telling = np.flatnonzero(ops["name"].isin(list(_ATTENTION_OPS) + list(_LINEAR)).to_numpy()) if len(ops) else np.zeros(0, dtype=np.int64)
        start = ops["start"].to_numpy()[telling] if len(ops) else np.zeros(0, dtype=np.int64)
        order = np.argsort(start, kind="stable")
        self.op_rows, self.op_start = telling[order], start[order]
        self.op_pid = ops["pid"].to_numpy()[self.op_rows] if len(ops) else np.zeros(0, dtype=np.int64)
        self.op_names = ops["name"].astype(str).to_numpy()[self.op_rows] if len(ops) else np.zeros(0, dtype=object)
        self.dims = ops["input_dims"].to_numpy()[self.op_rows] if len(ops) else np.zeros(0, dtype=object)
        self.concrete = ops["concrete_inputs"].to_numpy()[self.op_rows] if len(ops) else np.zeros(0, dtype=object)
        self.decoded_after: dict[int, int] = {}  # prefill attention op -> the decode steps that followed it so far

    def step(self, rows: list[int], batch: int | None, context: int | None) -> StepBatch:
        """The batch of the step made of range `rows` (the step and the annotations nesting with it)."""
        found, engines = None, set()
        for row in rows:
            parsed = from_annotation(self.range_names[row][:512])
            if parsed is not None:
                engines.add(parsed.source.split()[0])
            found = more_complete(found, parsed)
        if found is not None and found.source.startswith("vLLM ") and "SGLang" in engines:
            # SGLang builds that write the vLLM-style range beside their own step[..]
            found = replace(found, source="SGLang, vLLM-style " + found.source[len("vLLM "):])
        if found is None or not found.complete:
            r, step = self.ranges, rows[0]
            found = more_complete(found, self.from_ops(int(r["pid"].iat[step]), int(r["start"].iat[step]), int(r["end"].iat[step])))
        if found is None and batch is None:
            r, step = self.ranges, rows[0]
            found = self.after_prompts(int(r["pid"].iat[step]), int(r["start"].iat[step]))
        if found is None:
            return from_options(batch, context)
        return with_context(found, context)

    def after_prompts(self, pid: int, start: int) -> StepBatch | None:
        """A step whose own ops tell no batch (a CUDA-graph replay launches none) that follows
        an eager causal forward over whole prompts (its latest attention op before the step has
        query length = key length: a prefill of B prompts of P tokens): the decode of those B
        requests, one new token each, attending P + the tokens decoded since (the steps that
        took their batch from the same prefill before this one)."""
        before = np.flatnonzero((self.op_start < start) & np.isin(self.op_names, list(_ATTENTION_OPS)))
        if pid >= 0:
            before = before[(self.op_pid[before] == pid) | (self.op_pid[before] < 0)]
        if not len(before):
            return None
        i = int(before[-1])
        shape = _attention_shape(self.dims[i], self.concrete[i], _ATTENTION_OPS[self.op_names[i]])
        if not shape or not shape[3] or shape[1] != shape[2] or shape[1] < 2:
            return None
        b, prompt = shape[0], shape[2]
        decoded = self.decoded_after.get(i, 0)
        self.decoded_after[i] = decoded + 1
        return StepBatch((Requests(b, b, b * (prompt + decoded + 1)),), f"decode after a prefill's op shapes ({b} prompts of {prompt:,} tokens)",
                         logit_tokens=b, note=f"{decoded} decode steps since the prefill")

    def from_ops(self, pid: int, start: int, end: int) -> StepBatch | None:
        """An eager step's batch from its ops' shapes: attention (query and key lengths) and,
        for the LM head, the linear op whose output width is the vocabulary."""
        lo, hi = np.searchsorted(self.op_start, start, side="left"), np.searchsorted(self.op_start, end, side="right")
        rows = np.arange(lo, hi)
        if pid >= 0:
            rows = rows[(self.op_pid[rows] == pid) | (self.op_pid[rows] < 0)]
        if not len(rows):
            return None
        best = None
        for i in rows[np.isin(self.op_names[rows], list(_ATTENTION_OPS))]:
            shape = _attention_shape(self.dims[i], self.concrete[i], _ATTENTION_OPS[self.op_names[i]])
            if shape and (best is None or shape[2] > best[2]):  # the longest keys: a full-attention layer
                best = shape
        if best is None:
            return None
        b, sq, sk, causal = best
        group = Requests(b, b * sq, b * sk, float(b * sq * sq), float(b * sq * sk)) if causal else _non_causal(b, sq, sk)
        logits = _logit_tokens(self.op_names, self.dims, rows, self.vocab) if self.vocab else None
        return StepBatch((group,), "op shapes (attention)", logit_tokens=logits if logits is not None else b)


def _non_causal(b: int, sq: int, sk: int) -> Requests:
    """No causal mask: every query sees every key; expressed in the causal sums so that
    pairs() = Σ q·k - (Σ q² - Σ q)/2 comes out as b·sq·sk."""
    return Requests(b, b * sq, b * sk, float(b * sq), float(b * sq * sk))


def _attention_shape(dims, concrete, spec) -> tuple[int, int, int, bool] | None:
    qi, ki, layout, causal_at = spec
    try:
        qs, ks = list(dims[qi]), list(dims[ki])
    except (TypeError, IndexError):
        return None
    if len(qs) != 4 or len(ks) != 4:
        return None
    if layout == "bhsd":
        b, sq, sk = qs[0], qs[2], ks[2]
    else:
        b, sq, sk = qs[0], qs[1], ks[1]
    causal = False
    if causal_at is not None and concrete is not None and len(concrete) > causal_at:
        causal = str(concrete[causal_at]).strip().lower() in ("true", "1")
    return int(b), int(sq), int(sk), causal


def _logit_tokens(names, dims, rows, vocab: int) -> int | None:
    for row in rows[np.isin(names[rows], _LINEAR)]:
        try:
            x, w = list(dims[row][0]), list(dims[row][1])
        except (TypeError, IndexError):
            continue
        if len(w) == 2 and vocab in (w[0], w[1]) and x and len(x) >= 2 and x[-1] in (w[0], w[1]) and x[-1] != vocab:
            return int(np.prod(x[:-1]))
    return None

