"""Beam search, from the shapes: how many of a generating loop's rows are one sequence's beams.

A beam-search decode runs every beam of every sequence as one batch row, so the token ids of a
forward say [sequences x beams, 1]; the tokens that come out are one per sequence per step
(with one returned sequence each, transformers' default num_return_sequences=1). What tells
beams from sequences is the selection: each sequence's beams' scores are flattened to
[sequences, beams x vocabulary] for one topk (transformers' `_beam_search`:
`log_probs.view(batch_size, num_beams * vocab_size)`, then `torch.topk`), where a sampler over
independent sequences reads [rows, vocabulary].
"""

from __future__ import annotations

import numpy as np

from tracekit.trace.column_text import as_text

BEAM_SELECT = ("aten::topk", "aten::sort")


def beam_width(ops, calls, windows: list[tuple[int, int]], vocab: int | None) -> int:
    """How many beams each sequence keeps: beam search flattens each sequence's beams' scores to
    [sequences, beams x vocabulary] for one topk (transformers' generate(num_beams=...) does), so
    a topk over a multiple of the vocabulary, in most steps of the loop on the calls' thread,
    says the forwards' rows are beams. 1 where none is seen."""
    if not vocab or not windows or "input_dims" not in ops:
        return 1
    names = as_text(ops["name"])
    start = ops["start"].to_numpy()
    rows = np.flatnonzero(np.isin(names, BEAM_SELECT) & (ops["pid"].to_numpy() == calls.pid) & (ops["tid"].to_numpy() == calls.tid)
                          & (start >= windows[0][0]) & (start < windows[-1][1]))
    widths = {}
    for i in rows:
        first = ops["input_dims"].iat[i]
        first = first[0] if isinstance(first, (list, tuple)) and first else None
        if isinstance(first, (list, tuple)) and len(first) == 2 and first[1] % vocab == 0 and first[1] // vocab >= 2:
            step = int(np.searchsorted([w[0] for w in windows], start[i], side="right")) - 1
            widths.setdefault(first[1] // vocab, set()).add(step)
    if not widths:
        return 1
    beams, steps = max(widths.items(), key=lambda kv: len(kv[1]))
    return int(beams) if 2 * len(steps) >= len(windows) else 1
