"""A step's batch: how many requests, query tokens and cached tokens it processed
(`Requests` per group, `StepBatch` per step), and how an incomplete one is completed.

Read from what the trace says, most complete first: the step annotations the serving engines
write (tracekit.model.batch_annotations), the step's op shapes (tracekit.model.batch_reader),
and `--batch B --context C` for whatever the trace leaves open (C: KV tokens per request).
Whatever stays unknown is said, never guessed silently: a step with no batch at all is
costed as its lower bound (one request of one token, `batch_known` False, complete it with
--batch), a group whose KV length is unknown leaves the KV part unknown (--context), and
a group whose token count is only a lower bound (prompts of unknown length) says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import numpy as np

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



def more_complete(a: StepBatch | None, b: StepBatch | None) -> StepBatch | None:
    """The more complete of two descriptions of one step."""
    if a is None or b is None:
        return a or b
    rank = lambda x: (x.batch_known, x.tokens_known, x.kv_known, len(x.groups))  # noqa: E731
    return b if rank(b) > rank(a) else a



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
