"""Attribution: every GPU kernel gets exactly one phase and one block, from ordered rules.

Phases come from the autograd structure first (tracekit.trace.autograd: work of autograd
nodes is backward, forward ops recorded for autograd inside them are recompute; no autograd
ops, no backward), then from what encloses the kernel's launch (ranges, Python frames, ops):
decode, prefill, recompute, forward, backward, optimizer, a pipeline stage (vae_decode,
denoise, text_encode) or a user-named phase; a step inferred from a generation's forwards
(tracekit.structure.steps) gives prefill / decode to what no rule placed; "unknown" for
a kernel with no launch and no GPU-side range (launched before the capture began). Blocks: attention,
ffn, collective, norm, embedding, memory, other.
"""

from __future__ import annotations

# The rules load without pandas (TOML and RE2), so a bad --rules file is reported before the
# trace is read; applying them (apply.py) needs pandas, imported on first use.
from tracekit.attribution.rules import Rules, default_rules, load_rules

__all__ = ["attribute", "load_rules", "default_rules", "Rules"]


def __getattr__(name: str):
    if name == "attribute":
        from tracekit.attribution.apply import attribute

        return attribute
    raise AttributeError(f"module 'tracekit.attribution' has no attribute {name!r}")
