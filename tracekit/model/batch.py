"""A step's batch: how many requests, query tokens and cached tokens it processed.

Read from what the trace says, most complete first. The step annotations the serving
engines write (format strings quoted in tests/test_serving_annotations.py):
- vLLM V1, detailed (opt-in `detailed_trace_annotation`; also unmerged SGLang patches):
  `execute_T_context_N(sqA skB sqsqC sqskD)_generation_M(sq.. sk.. sqsq.. sqsk..)`, per group
  of requests: sq = Σ query tokens, sk = Σ KV length (cached + new), sqsq = Σ sq², sqsk = Σ sq·sk.
- vLLM V1, native: `execute_context_N(T)_generation_M(T)` (T = Σ scheduled tokens; some
  builds add `_T²`: `execute_context_1(888_788544)`); no KV lengths (prompts are taken to have
  no cached prefix; decode KV needs --context).
- vLLM V1, first form: `execute_new_N_cached_M`: request counts only (N new prompts of
  unknown length, M running requests taken to decode one token each).
- SGLang: `step[DECODE bs=N]`, `step[EXTEND bs=N toks=T]`, `step[MIXED bs=N ...]`, with the
  optional roofline suffix (`g_sqsq= g_sqsk= g_sk=`, `c_sqsq= c_sqsk= c_sk=`, MIXED `c= g= c_sq= ...`),
  and the lower-case forms of its pull request (`step[decode bs=N]`, `step[prefill bs=N toks=T]`,
  `step[mixed bs=N ext=T dec=D]`, `step[idle]`).
- TensorRT-LLM (PyTorch executor, NVTX): `[Executor] _forward_step I: X ctx reqs, Y gen reqs`.
- ROCm ATOM: `prefill[bs=N tok=T ...]`, `decode[bs=N tok=T ...]`.
- Eager (HF generate, plain forward passes): the step's attention op shapes give batch,
  query and key lengths; the embedding op's input gives the token count.
- `--batch B --context C` for whatever the trace leaves open (C: KV tokens per request).
Whatever stays unknown is said, never guessed silently: a step with no batch at all is
costed as its lower bound (one request of one token, `batch_known` False, complete it with
--batch), a group whose KV length is unknown leaves the KV part unknown (--context), and
a group whose token count is only a lower bound (prompts of unknown length) says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import numpy as np

from tracekit.trace import Trace

_DETAILED = re.compile(r"^execute_(\d+)_context_(\d+)\(([^)]*)\)_generation_(\d+)\(([^)]*)\)")
_NATIVE = re.compile(r"^execute_context_(\d+)\(([\d_]*)\)_generation_(\d+)\(([\d_]*)\)")
_NEW_CACHED = re.compile(r"^execute_new_(\d+)_cached_(\d+)\b")
_SGLANG = re.compile(r"step\[\s*([A-Za-z_0-9]+)(?:\s+bs=(\d+)(?:/\d+)?)?([^\]]*)\]")
_TRTLLM = re.compile(r"\[Executor\] _forward_step (\d+): (\d+) ctx reqs, (\d+) gen reqs")
_ATOM = re.compile(r"^(prefill|decode)\[bs=(\d+)(?:/\d+)?([^\]]*)\]")
_SUMS = re.compile(r"(sqsq|sqsk|sq|sk)(\d+)")
_KEYS = re.compile(r"\b([a-z_]+)=(\d+)")
ANNOTATION = re.compile(r"^execute_(\d+_)?context_\d+\(|^execute_new_\d+_cached_\d+|step\[\s*[A-Za-z]|"
                        r"\[Executor\] _forward_step \d+:|^(prefill|decode)\[bs=\d+")
# SGLang ForwardMode names: decode-like (one token per request) and extend-like (prompts)
_SGLANG_DECODE = {"DECODE", "IDLE"}
_SGLANG_EXTEND = {"EXTEND", "PREFILL", "SPLIT_PREFILL"}

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
    q_exact: bool = True  # False: q is a lower bound (prompts of unknown length count one token each)

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
    source: str  # what told us: the engine and the form read
    logit_tokens: int | None = None  # tokens the LM head runs on (one per request when serving)
    note: str = ""
    batch_known: bool = True  # False: nothing said the batch; costed at its lower bound (one request, one token)

    @property
    def requests(self) -> int:
        return sum(g.count for g in self.groups)

    @property
    def tokens(self) -> int:
        return sum(g.q for g in self.groups)

    @property
    def tokens_known(self) -> bool:
        return self.batch_known and all(g.q_exact for g in self.groups if g.count)

    @property
    def kv_known(self) -> bool:
        return all(g.k is not None for g in self.groups if g.count)

    @property
    def kv_tokens(self) -> int | None:
        return sum(g.k for g in self.groups if g.count) if self.kv_known else None

    @property
    def complete(self) -> bool:
        """Everything the step's cost depends on is known (else its costs are lower bounds)."""
        return self.tokens_known and self.kv_known

    def missing(self) -> list[str]:
        """What is unknown, each with the option (or the trace) that would complete it."""
        out = []
        if not self.batch_known:
            out.append("the batch (pass --batch B)")
        elif not self.tokens_known:
            out.append("the prompts' token counts (the annotation gives request counts only)")
        if not self.kv_known:
            out.append("the KV length (pass --context C)")
        return out

    def complete_with(self) -> str | None:
        """The options that would complete the step's costs, or None (complete, or nothing would)."""
        flags = [f for f, on in (("--batch", not self.batch_known), ("--context", not self.kv_known)) if on]
        return " ".join(flags) or None

    def pairs(self, window: int | None = None) -> float | None:
        values = [g.pairs(window) for g in self.groups]
        return None if any(v is None for v in values) else float(sum(values))

    def kv_read(self, window: int | None = None) -> float | None:
        values = [g.kv_read(window) for g in self.groups if g.count]
        return None if any(v is None for v in values) else float(sum(values))

    @property
    def kind(self) -> str:
        prompt = any(g.count and (g.q > g.count or not g.q_exact) for g in self.groups)
        decode = any(g.count and g.q_exact and g.q == g.count and (g.k is None or g.k > g.q) for g in self.groups)
        return "mixed" if prompt and decode else "prefill" if prompt else "decode"

    def describe(self) -> str:
        if not self.batch_known:
            kv = f", {self.kv_tokens:,} KV tokens" if self.kv_known else ""
            return f"unknown: the trace does not say (costed as its lower bound, 1 request of 1 token{kv}; pass --batch/--context)"
        at_least = "" if self.tokens_known else "at least "
        kv = f", {self.kv_tokens:,} KV tokens" if self.kv_known else ", KV length unknown"
        return f"{self.requests} requests, {at_least}{self.tokens:,} query tokens{kv} ({self.source})"


def _sums(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in _SUMS.findall(text)}


def from_annotation(name: str) -> StepBatch | None:
    """The batch a serving engine wrote into a range name, or None when it is not one."""
    for parse in (_vllm_detailed, _vllm_native, _vllm_new_cached, _sglang, _trtllm, _atom):
        found = parse(name)
        if found is not None:
            return found
    return None


def _vllm_detailed(name: str) -> StepBatch | None:
    m = _DETAILED.match(name)
    if not m:
        return None
    groups = []
    for count, body in ((int(m.group(2)), m.group(3)), (int(m.group(4)), m.group(5))):
        s = _sums(body)
        if count and "sq" not in s:
            return None
        groups.append(Requests(count, s.get("sq", 0), s.get("sk"), s.get("sqsq"), s.get("sqsk")))
    return StepBatch(tuple(groups), "vLLM execute_T_context_N(sq sk sqsq sqsk)_generation_M(..) (detailed sums)",
                     logit_tokens=groups[0].count + groups[1].count)


def _vllm_native(name: str) -> StepBatch | None:
    m = _NATIVE.match(name)
    if not m:
        return None
    ctx, ctx_sums, gen, gen_sums = int(m.group(1)), _ints(m.group(2)), int(m.group(3)), _ints(m.group(4))
    q = ctx_sums[0] if ctx_sums else None
    if ctx and q is None:
        return None
    qq = ctx_sums[1] if len(ctx_sums) > 1 else None
    prompts = Requests(ctx, q or 0, q, qq, qq)  # no cached prefix: each prompt attends to itself
    gen_tokens = gen_sums[0] if gen_sums else gen
    gens = Requests(gen, gen_tokens, None)
    form = "(T_T²)" if len(ctx_sums) > 1 or len(gen_sums) > 1 else "(T)"
    return StepBatch((prompts, gens), f"vLLM execute_context_N{form}_generation_M{form} (token sums)", logit_tokens=ctx + gen,
                     note="vLLM token-sum annotation: prompts assumed to have no cached prefix")


def _vllm_new_cached(name: str) -> StepBatch | None:
    m = _NEW_CACHED.match(name)
    if not m:
        return None
    new, cached = int(m.group(1)), int(m.group(2))
    prompts = Requests(new, new, None, q_exact=False)  # a new prompt: at least one token, length unknown
    running = Requests(cached, cached, None)  # a running request: one decode token (or a prefill chunk)
    return StepBatch((prompts, running), "vLLM execute_new_N_cached_M (request counts)", logit_tokens=new + cached,
                     note="vLLM execute_new_N_cached_M: running requests taken to decode one token each")


def _sglang(name: str) -> StepBatch | None:
    m = _SGLANG.search(name)
    if not m:
        return None
    mode, bs, rest = m.group(1).upper(), m.group(2), m.group(3)
    keys = {k: int(v) for k, v in _KEYS.findall(rest)}
    if bs is None:
        if mode != "IDLE":
            return None
        bs = "0"
    bs = int(bs)
    form = f"step[{m.group(1)} bs=N{' toks=T' if 'toks' in keys else ''}{' +roofline' if any(k.startswith(('c_', 'g_')) for k in keys) else ''}]"
    source = f"SGLang {form}"
    if mode == "MIXED" or "c" in keys or "g" in keys or "ext" in keys:
        if "c_sq" in keys or "g_sq" in keys:
            c, g = keys.get("c", 0), keys.get("g", bs - keys.get("c", 0))
            groups = (Requests(c, keys.get("c_sq", 0), keys.get("c_sk"), keys.get("c_sqsq"), keys.get("c_sqsk")),
                      Requests(g, keys.get("g_sq", g), keys.get("g_sk"), keys.get("g_sqsq"), keys.get("g_sqsk")))
            return StepBatch(groups, source, logit_tokens=bs)
        if "ext" in keys and "dec" in keys:  # lower-case PR form: ext = prompt tokens, dec = decoding requests
            dec = keys["dec"]
            prompts = max(bs - dec, 0)
            ext = keys["ext"]
            return StepBatch((Requests(prompts, ext, ext, None, None), Requests(dec, dec, None)), source, logit_tokens=bs,
                             note="SGLang mixed step: prompts assumed to have no cached prefix")
        return StepBatch((Requests(bs, bs, None, q_exact=False),), source, logit_tokens=bs)
    if mode in _SGLANG_DECODE:
        q = keys.get("g_sq", bs)
        return StepBatch((Requests(bs, q, keys.get("g_sk"), keys.get("g_sqsq"), keys.get("g_sqsk")),), source, logit_tokens=bs)
    toks = keys.get("toks", keys.get("c_sq"))
    if mode in _SGLANG_EXTEND or "toks" in keys:
        if toks is None:
            return StepBatch((Requests(bs, bs, None, q_exact=False),), source, logit_tokens=bs)
        if "c_sk" in keys:
            return StepBatch((Requests(bs, toks, keys["c_sk"], keys.get("c_sqsq"), keys.get("c_sqsk")),), source, logit_tokens=bs)
        return StepBatch((Requests(bs, toks, toks),), source, logit_tokens=bs,
                         note="SGLang extend step: prompts assumed to have no cached prefix")
    # speculative modes (TARGET_VERIFY, DRAFT_EXTEND, ...): several tokens per request, how many unknown
    return StepBatch((Requests(bs, bs, None, q_exact=False),), source, logit_tokens=bs)


def _trtllm(name: str) -> StepBatch | None:
    m = _TRTLLM.search(name)
    if not m:
        return None
    ctx, gen = int(m.group(2)), int(m.group(3))
    return StepBatch((Requests(ctx, ctx, None, q_exact=False), Requests(gen, gen, None)),
                     "TensorRT-LLM [Executor] _forward_step I: X ctx reqs, Y gen reqs (request counts)", logit_tokens=ctx + gen)


def _atom(name: str) -> StepBatch | None:
    m = _ATOM.match(name)
    if not m:
        return None
    phase, bs, keys = m.group(1), int(m.group(2)), {k: int(v) for k, v in _KEYS.findall(m.group(3))}
    tok = keys.get("tok")
    source = f"ATOM {phase}[bs=N tok=T]"
    if phase == "decode":
        return StepBatch((Requests(bs, tok if tok is not None else bs, keys.get("sk"), keys.get("sqsq"), keys.get("sqsk")),), source, logit_tokens=bs)
    if tok is None:
        return StepBatch((Requests(bs, bs, None, q_exact=False),), source, logit_tokens=bs)
    return StepBatch((Requests(bs, tok, keys.get("sk", tok), keys.get("sqsq"), keys.get("sqsk")),), source, logit_tokens=bs,
                     note="" if "sk" in keys else "ATOM prefill: prompts assumed to have no cached prefix")


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split("_") if x]


def _better(a: StepBatch | None, b: StepBatch | None) -> StepBatch | None:
    """The more complete of two descriptions of one step."""
    if a is None or b is None:
        return a or b
    rank = lambda x: (x.batch_known, x.tokens_known, x.kv_known, len(x.groups))  # noqa: E731
    return b if rank(b) > rank(a) else a


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
            found = _better(found, parsed)
        if found is not None and found.source.startswith("vLLM ") and "SGLang" in engines:
            # SGLang builds that write the vLLM-style range beside their own step[..]
            found = replace(found, source="SGLang, vLLM-style " + found.source[len("vLLM "):])
        if found is None or not found.complete:
            r, step = self.ranges, rows[0]
            found = _better(found, self.from_ops(int(r["pid"].iat[step]), int(r["start"].iat[step]), int(r["end"].iat[step])))
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


def from_options(batch: int | None, context: int | None) -> StepBatch:
    """--batch B --context C: a decode step of B requests, each attending to C cached tokens.
    Without --batch: the step's lower bound, one request of one token (`batch_known` False)."""
    k = (batch or 1) * (context + 1) if context is not None else None
    if not batch:
        return StepBatch((Requests(1, 1, k),), "unknown (lower bound: 1 request)", logit_tokens=1, batch_known=False)
    return StepBatch((Requests(batch, batch, k),), "--batch/--context", logit_tokens=batch)


# vLLM's KV-cache write kernels launch one block per token (`dim3 grid(num_tokens)` in
# csrc/cache_kernels.cu: reshape_and_cache, reshape_and_cache_flash, concat_and_cache_mla).
_KV_WRITE = re.compile(r"reshape_and_cache|concat_and_cache_mla")


def kv_write_tokens(kernels, owner: np.ndarray) -> dict[int, int]:
    """Per owning step row: the tokens its KV-cache write kernels were launched for (grid x),
    where all of them in the step agree (padded to the graph's size under a CUDA graph: the
    tokens the GPU computed)."""
    if not len(kernels):
        return {}
    names = kernels["name"].astype(str)
    mask = names.str.contains(_KV_WRITE).to_numpy() & (owner >= 0) & (kernels["grid_x"].to_numpy() > 0)
    out: dict[int, int] = {}
    grid = kernels["grid_x"].to_numpy()
    for row in np.unique(owner[mask]):
        values = np.unique(grid[mask & (owner == row)])
        if len(values) == 1:
            out[int(row)] = int(values[0])
    return out


def with_tokens(found: StepBatch, tokens: int) -> StepBatch:
    """Complete the token counts an annotation left open (prompts of unknown length) from the
    step's KV-cache writes: the prompts take what the exact groups do not; a new prompt is
    taken to have no cached prefix (as for the vLLM token-sum form)."""
    if found.tokens_known or not found.batch_known:
        return found
    exact = sum(g.q for g in found.groups if g.q_exact)
    open_groups = [g for g in found.groups if not g.q_exact and g.count]
    rest = tokens - exact
    if len(open_groups) != 1 or rest < open_groups[0].count:
        return found
    groups = tuple(replace(g, q=rest, k=g.k if g.k is not None else rest, q_exact=True) if g is open_groups[0] else g for g in found.groups)
    return replace(found, groups=groups, source=f"{found.source} + tokens from the KV-cache write grid",
                   note="prompt tokens from the KV-cache write kernels' grid (one block per token); no cached prefix assumed")


def with_context(found: StepBatch, context: int | None) -> StepBatch:
    """Fill the KV lengths the trace left open from --context (tokens cached per request)."""
    if context is None or found.kv_known:
        return found
    groups = tuple(g if g.k is not None or not g.count else replace(g, k=g.q + g.count * context) for g in found.groups)
    return replace(found, groups=groups, source=f"{found.source} + --context")
