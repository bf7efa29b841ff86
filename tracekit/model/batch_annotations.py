"""The batch a serving engine wrote into its step annotation (format strings quoted in
tests/test_serving_annotations.py):
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
"""

from __future__ import annotations

import re

from tracekit.model.batch import Requests, StepBatch

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

