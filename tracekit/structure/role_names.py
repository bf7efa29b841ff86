"""The names of the pipeline's stages: from each call's role and its network's size.

A name says what the structure found, never what a phase rule calls another thing: the
denoiser's body is `denoise` (the phase the denoise rule gives those steps too: one row), a
token model's decoding body is `generate`, a VAE is a `conv decoder`, never `decode`.
"""

from __future__ import annotations

import numpy as np

from tracekit.structure.calls import Calls, Network
from tracekit.structure.samples import token_ids


def decodes(calls: Calls, kind: np.ndarray, body: int, ops) -> bool:
    """The body is a token model one of whose calls reads one token per row ([B, 1] ids)."""
    if not calls.networks[body].embedding or "input_dims" not in ops:
        return False
    dims = ops["input_dims"].to_numpy()
    return any((ids := token_ids(dims, int(calls.reads.rows[calls.first[j]]))) is not None and ids[1] == 1
               for j in np.flatnonzero((kind == "body") & (calls.network == body)))


def stage_name(kind: str, net: Network, denoiser: bool, generator: bool = False) -> str:
    size = net.describe()
    if kind == "body":
        # the denoiser's stage is the phase a rule gives the denoise steps too: one name, one row
        return "denoise" if denoiser else (f"generate ({size})" if generator else f"repeated forward ({size})")
    if kind == "network_after" and generator and net.embedding:
        return f"reads the generated sequences ({size})"
    return {
        "same_weights_after": (f"KV recompute: same weights once more ({size})" if denoiser
                               else f"same weights once more after the body ({size})"),
        "same_weights_before": (f"prefill ({size})" if net.embedding else f"same weights once before the body ({size})"),
        "conv_decoder": f"conv decoder, VAE ({size})",
        "network_after": f"another network after ({size})",
        "encoder": ("text encoder" if net.embedding else "encoder") + f" ({size})",
        "draft": f"draft ({size})",
        "verify": f"verify ({size})",
    }.get(kind, f"another network ({size})")
