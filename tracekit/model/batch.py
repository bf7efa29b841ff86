"""A step's batch: how many requests, query tokens and cached tokens it processed.

Read from what the trace says, most complete first:
- vLLM (newer) / SGLang with vLLM-style ranges:
  `execute_B_context_N(sqA skB sqsqC sqskD)_generation_M(sq.. sk.. sqsq.. sqsk..)`, per group
  of requests: sq = Σ query tokens, sk = Σ KV length (cached + new), sqsq = Σ sq², sqsk = Σ sq·sk.
- vLLM (older): `execute_context_N(T[_T2])_generation_M(T[_T2])`: T = Σ tokens, T2 = Σ tokens²;
  no KV lengths (prompts are taken to have no cached prefix; decode KV needs --context).
- SGLang: `step[DECODE bs=N]` / `step[EXTEND bs=N]`: the batch size only.
- Eager (HF generate, plain forward passes): the step's attention op shapes give batch,
  query and key lengths; the embedding op's input gives the token count.
- `--batch B --context C` for whatever the trace leaves open (C: KV tokens per request).
A step none of these describes has no batch (None), and the prediction says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import numpy as np

from tracekit.trace import Trace

_NEWER = re.compile(r"^execute_(\d+)_context_(\d+)\(([^)]*)\)_generation_(\d+)\(([^)]*)\)")
_OLDER = re.compile(r"^execute_context_(\d+)\(([\d_]*)\)_generation_(\d+)\(([\d_]*)\)")
_SGLANG = re.compile(r"step\[(DECODE|EXTEND|PREFILL|MIXED)\s+bs=(\d+)\]", re.I)
_SUMS = re.compile(r"(sqsq|sqsk|sq|sk)(\d+)")
ANNOTATION = re.compile(r"^execute_(\d+_)?context_\d+\(|step\[(DECODE|EXTEND|PREFILL|MIXED)\s+bs=\d+\]", re.I)

_ATTENTION_OPS = {  # op name -> (q, k positions, layout, is_causal position or None)
    "aten::scaled_dot_product_attention": (0, 1, "bhsd", 5),
    "aten::_scaled_dot_product_flash_attention": (0, 1, "bhsd", 4),
    "aten::_scaled_dot_product_efficient_attention": (0, 1, "bhsd", 6),
    "aten::_scaled_dot_product_cudnn_attention": (0, 1, "bhsd", 6),
    "aten::_scaled_dot_product_flash_attention_for_cpu": (0, 1, "bhsd", 4),
    "aten::_flash_attention_forward": (0, 1, "bshd", 8),
    "flash_attn::_flash_attn_forward": (0, 1, "bshd", 5),
}


@dataclass(frozen=True)
class Requests:
    """A group of requests in one step (prompts, or generations), by its sums."""

    count: int
    q: int  # Σ query tokens
    k: int | None  # Σ KV length attended (cached + this step's tokens); None: unknown
    qq: float | None = None  # Σ q²
    qk: float | None = None  # Σ q·k

    def _mean(self) -> tuple[float, float]:
        return self.q / self.count, (self.k or 0) / self.count

    def pairs(self, window: int | None = None) -> float | None:
        """Causal (query, key) pairs; query j of a request with k keys sees k - q + j + 1 keys
        (bottom-right alignment), capped at `window`. Exact from the sums without a window;
        with a window, exact when the requests of the group are alike (per-request means)."""
        if self.k is None or self.count == 0:
            return None if self.count else 0.0
        if window is None:
            if self.qq is not None and self.qk is not None:
                return self.qk - (self.qq - self.q) / 2.0
            q, k = self._mean()
            return self.count * (q * k - q * (q - 1) / 2.0)
        q, k = self._mean()
        return self.count * _capped_sum(k - q + 1, q, window)

    def kv_read(self, window: int | None = None) -> float | None:
        """KV entries one attention layer must read: every attended key once."""
        if self.k is None:
            return None
        if window is None:
            return float(self.k)
        q, k = self._mean()
        return self.count * min(k, window + q - 1)


def _capped_sum(first: float, n: float, cap: float) -> float:
    """Σ min(x, cap) for x = first, first+1, ..., first+n-1 (first >= 1)."""
    last = first + n - 1
    if last <= cap:
        return n * (first + last) / 2.0
    if first >= cap:
        return n * cap
    below = cap - first + 1
    return below * (first + cap) / 2.0 + (n - below) * cap


@dataclass(frozen=True)
class StepBatch:
    groups: tuple[Requests, ...]
    source: str  # what told us
    logit_tokens: int | None = None  # tokens the LM head runs on (one per request when serving)
    note: str = ""

    @property
    def requests(self) -> int:
        return sum(g.count for g in self.groups)

    @property
    def tokens(self) -> int:
        return sum(g.q for g in self.groups)

    @property
    def kv_known(self) -> bool:
        return all(g.k is not None for g in self.groups if g.count)

    @property
    def kv_tokens(self) -> int | None:
        return sum(g.k for g in self.groups if g.count) if self.kv_known else None

    def pairs(self, window: int | None = None) -> float | None:
        values = [g.pairs(window) for g in self.groups]
        return None if any(v is None for v in values) else float(sum(values))

    def kv_read(self, window: int | None = None) -> float | None:
        values = [g.kv_read(window) for g in self.groups if g.count]
        return None if any(v is None for v in values) else float(sum(values))

    @property
    def kind(self) -> str:
        prompt = any(g.count and g.q > g.count for g in self.groups)
        decode = any(g.count and g.q == g.count and (g.k is None or g.k > g.q) for g in self.groups)
        return "mixed" if prompt and decode else "prefill" if prompt else "decode"

    def describe(self) -> str:
        kv = f", {self.kv_tokens:,} KV tokens" if self.kv_known else ", KV length unknown"
        return f"{self.requests} requests, {self.tokens:,} query tokens{kv} ({self.source})"


def _sums(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in _SUMS.findall(text)}


def from_annotation(name: str) -> StepBatch | None:
    """The batch a serving engine wrote into a range name, or None when it is not one."""
    m = _NEWER.match(name)
    if m:
        groups = []
        for count, body in ((int(m.group(2)), m.group(3)), (int(m.group(4)), m.group(5))):
            s = _sums(body)
            if count and "sq" not in s:
                return None
            groups.append(Requests(count, s.get("sq", 0), s.get("sk"), s.get("sqsq"), s.get("sqsk")))
        return StepBatch(tuple(groups), "vLLM annotation (sq/sk sums)", logit_tokens=int(m.group(1)))
    m = _OLDER.match(name)
    if m:
        ctx, ctx_sums, gen, gen_sums = int(m.group(1)), _ints(m.group(2)), int(m.group(3)), _ints(m.group(4))
        q = ctx_sums[0] if ctx_sums else None
        if ctx and q is None:
            return None
        qq = ctx_sums[1] if len(ctx_sums) > 1 else None
        prompts = Requests(ctx, q or 0, q, qq, qq)  # no cached prefix: each prompt attends to itself
        gen_tokens = gen_sums[0] if gen_sums else gen
        gens = Requests(gen, gen_tokens, None)
        return StepBatch((prompts, gens), "vLLM annotation (token sums)", logit_tokens=ctx + gen,
                         note="older vLLM annotation: prompts assumed to have no cached prefix")
    m = _SGLANG.search(name)
    if m:
        mode, bs = m.group(1).upper(), int(m.group(2))
        if mode == "DECODE":
            return StepBatch((Requests(bs, bs, None),), "SGLang annotation (batch size)", logit_tokens=bs)
        return None  # an extend step's token count is not in the name
    return None


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split("_") if x]


def _better(a: StepBatch | None, b: StepBatch | None) -> StepBatch | None:
    """The more complete of two descriptions of one step."""
    if a is None or b is None:
        return a or b
    return b if (b.kv_known, len(b.groups)) > (a.kv_known, len(a.groups)) else a


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

    def step(self, rows: list[int], batch: int | None, context: int | None) -> StepBatch | None:
        """The batch of the step made of range `rows` (the step and the annotations nesting with it)."""
        found = None
        for row in rows:
            found = _better(found, from_annotation(self.range_names[row][:512]))
        if found is None or not found.kv_known:
            r, step = self.ranges, rows[0]
            found = _better(found, self.from_ops(int(r["pid"].iat[step]), int(r["start"].iat[step]), int(r["end"].iat[step])))
        if found is None:
            return from_options(batch, context)
        return with_context(found, context)

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


def from_options(batch: int | None, context: int | None) -> StepBatch | None:
    """--batch B --context C: a decode step of B requests, each attending to C cached tokens."""
    if not batch:
        return None
    k = batch * (context + 1) if context is not None else None
    return StepBatch((Requests(batch, batch, k),), "--batch/--context", logit_tokens=batch)


def with_context(found: StepBatch, context: int | None) -> StepBatch:
    """Fill the KV lengths the trace left open from --context (tokens cached per request)."""
    if context is None or found.kv_known:
        return found
    groups = tuple(g if g.k is not None or not g.count else replace(g, k=g.q + g.count * context) for g in found.groups)
    return replace(found, groups=groups, source=f"{found.source} + --context")
