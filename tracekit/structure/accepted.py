"""Speculative decoding's output tokens, from the target's KV cache: how far it grows per round.

A verify is one forward of the target over the tokens its cache lacks (the last committed
token and the drafts): its attention reads a query of T positions against a key of past + T,
so `past` is the target's cache before the round. After the verify the cache is cut back to
the committed tokens (transformers' `DynamicCache.crop`, a hand-written cut alike: a slice of
each layer's key along its sequence dimension), so the slice's end is the cache after the
round. The tokens a round emits (its accepted drafts + the target's own next token) are the
cache's growth: the next verify's past, or, after the last verify, the cut's end, minus this
verify's past. Without a cut after the last verify, that round's tokens are not in the trace,
and the total is unknown (the rounds before it are stated). Each round emits one token of the
target's own besides the drafts it accepts: accepted drafts = tokens - rounds x batch.
"""

from __future__ import annotations

import numpy as np

from tracekit.trace.column_text import as_text

ATTENTION = "aten::scaled_dot_product_attention"
CUT = "aten::slice"


def _window(ops, names: np.ndarray, calls, lo: int, hi: int, name: str) -> np.ndarray:
    start = ops["start"].to_numpy()
    return np.flatnonzero((names == name) & (ops["pid"].to_numpy() == calls.pid) & (ops["tid"].to_numpy() == calls.tid)
                          & (start >= lo) & (start < hi))


def accepted_tokens(ops, calls, verifies: list[int]) -> tuple[int | None, str]:
    """(tokens, how) the verify calls (indices into calls) committed, over every round."""
    if "input_dims" not in ops or not verifies:
        return None, "no verify call"
    names = as_text(ops["name"])
    dims = ops["input_dims"].to_numpy()
    past, keys, batch, drafted = [], [], None, 0
    for j in verifies:
        rows = _window(ops, names, calls, int(calls.start[j]), int(calls.end[j]) + 1, ATTENTION)
        shapes = dims[rows[0]] if len(rows) else None
        if not (isinstance(shapes, (list, tuple)) and len(shapes) > 1 and len(shapes[0] or ()) == 4 and len(shapes[1] or ()) == 4):
            return None, "a verify's attention has no [B, heads, positions, d] query and key shapes (a verify's accepted tokens are not in the trace)"
        query, key = shapes[0], shapes[1]
        past.append(int(key[2]) - int(query[2]))
        keys.append(list(key))
        batch = int(query[0])
        drafted += int(query[2]) - 1  # the verify reads the last committed token and the drafts
    last = verifies[-1]
    cuts = _window(ops, names, calls, int(calls.end[last]), int(calls.span_end[last]) + 1, CUT)
    final = None
    for i in cuts:  # slice(key, dim=2, start=0, end=E): the cache cut to the committed tokens
        values = ops["concrete_inputs"].iat[i] if "concrete_inputs" in ops else None
        if list(dims[i][0] or ()) == keys[-1] and isinstance(values, (list, tuple)) and len(values) >= 4 \
                and values[1] in ("2", "-2") and str(values[3]).isdigit() and int(values[3]) <= keys[-1][2]:
            final = int(values[3])
            break
    seen = past[-1] - past[0]
    rounds = f"{len(verifies)} verify round(s)"
    if final is None:
        return None, (f"the target's KV cache grew by {seen * batch} token(s) over the first {len(verifies) - 1} of {rounds}; "
                      "the last round's accepted tokens are not in the trace (no cut of the cache after it)")
    tokens = (final - past[0]) * batch
    accepted = tokens - len(verifies) * batch  # each round also emits the target's own next token
    return tokens, (f"the growth of the target's KV cache over {rounds}: from {past[0]} positions before the first verify "
                    f"to {final} after the last (its cut), x batch {batch}; {accepted} of {drafted * batch} drafts accepted")
