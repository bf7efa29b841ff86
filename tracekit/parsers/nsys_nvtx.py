"""torch `emit_nvtx` range texts -> op name, sequence number and input sizes.

    aten::mm, seq = 12, op_id = 3, sizes = [[64, 128], [128, 32]], input_op_ids = [(1,0), (2,0)]
    aten::view, op_id = 314290

`sizes` appears only when the profiler ran with record_shapes=True.
"""

from __future__ import annotations

import json
import re
from typing import Any

_OP_TEXT = re.compile(r"^(?P<name>.+?), (?:seq = (?P<seq>-?\d+), )?op_id = (?P<op_id>\d+)(?P<rest>.*)$", re.S)
# emit_nvtx texts are at most a few kB; longer ones are not read as ops (bounded work).
MAX_OP_TEXT = 1 << 16
_SIZES, _INPUT_IDS = ", sizes = [", ", input_op_ids = "


def parse_op_text(text: str) -> tuple[str, int, list[Any] | None] | None:
    """(name, sequence or -1, sizes or None), or None when the text is not an emit_nvtx op."""
    if len(text) > MAX_OP_TEXT:
        return None
    match = _OP_TEXT.match(text)
    if match is None:
        return None
    sizes = None
    rest = match.group("rest")
    at = rest.find(_SIZES)
    if at >= 0:  # plain finds, not a lazy regex: linear in the text whatever it holds
        text = rest[at + len(_SIZES) - 1 :]
        end = text.find(_INPUT_IDS)
        try:
            sizes = json.loads(text if end < 0 else text[:end])
        except (ValueError, RecursionError):
            sizes = None
    seq = match.group("seq")
    return match.group("name"), int(seq) if seq is not None else -1, sizes
