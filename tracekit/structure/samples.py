"""Samples of a generate-then-score loop: the sequences a network after the generating body reads.

In a round of RLHF-style work (a policy's `generate`, then a reward or reference model over
what it wrote) the unit a user counts is the sample: one generated sequence, scored. The
structure shows it: the period's body is a token model that decodes (some of its forwards read
token ids [B, 1]), and a token model after it in the same period reads whole sequences
[B, prompt + generated]; its B is the samples of that round.
"""

from __future__ import annotations

import numpy as np


def token_ids(dims, row: int) -> list | None:
    """The token ids' shape [B, T] of an embedding read (embedding(weight, indices))."""
    entry = dims[row]
    ids = entry[1] if isinstance(entry, (list, tuple)) and len(entry) > 1 else None
    return list(ids) if isinstance(ids, (list, tuple)) and len(ids) == 2 else None


def generates(pipeline, ops) -> bool:
    """Whether the loop's body is a token model that decodes: a forward of one token per row."""
    body = pipeline.body()
    if pipeline.loop is None or body is None or not body.embedding or "input_dims" not in ops:
        return False
    c, dims = pipeline.calls, ops["input_dims"].to_numpy()
    for j in range(pipeline.loop.start, pipeline.loop.start + pipeline.loop.covered):
        if pipeline.stages[j].kind == "body":
            ids = token_ids(dims, int(c.reads.rows[c.first[j]]))
            if ids is not None and ids[1] == 1:
                return True
    return False


def scored_calls(pipeline, ops) -> tuple[np.ndarray, np.ndarray, str] | None:
    """(host start, batch) of each call of a token model after a generating body in the loop,
    in call order, and how they were found; None where the loop is no generate-then-score.
    Found once per trace; samples_between reads a step's share."""
    if pipeline is None or not generates(pipeline, ops):
        return None
    c, dims = pipeline.calls, ops["input_dims"].to_numpy()
    starts, batches, networks = [], [], set()
    for j in range(pipeline.loop.start, pipeline.loop.start + pipeline.loop.covered):
        s = pipeline.stages[j]
        if s.kind != "network_after" or not pipeline.networks[s.network].embedding:
            continue
        ids = token_ids(dims, int(c.reads.rows[c.first[j]]))
        if ids is None or ids[1] <= 1:
            continue
        starts.append(int(c.start[j]))
        batches.append(int(ids[0]))
        networks.add(pipeline.networks[s.network].describe())
    if not starts:
        return None
    how = f"sequences a network after the generate reads ({', '.join(sorted(networks))}: its token ids [B, T], B per call)"
    return np.array(starts, dtype=np.int64), np.array(batches, dtype=np.int64), how


def samples_between(scored, lo: float, hi: float) -> tuple[int, str] | None:
    """(samples, how) of the scored calls (scored_calls) that start inside [lo, hi)."""
    if scored is None:
        return None
    starts, batches, how = scored
    inside = (starts >= lo) & (starts < hi)
    return (int(batches[inside].sum()), how) if inside.any() else None
