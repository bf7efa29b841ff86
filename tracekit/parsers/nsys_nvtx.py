"""NVTX_EVENTS -> the ops and ranges tables (numpy columns), and torch `emit_nvtx` range texts
-> op name, sequence number and input sizes:

    aten::mm, seq = 12, op_id = 3, sizes = [[64, 128], [128, 32]], input_op_ids = [(1,0), (2,0)]
    aten::view, op_id = 314290

`sizes` appears only when the profiler ran with record_shapes=True.
"""

from __future__ import annotations

import json
import re
import sqlite3
from itertools import compress
from typing import Any

import numpy as np

from tracekit.parsers import nsys_schema as S
from tracekit.parsers.columns import MAX_ABS_TIME_NS, Checks, as_float
from tracekit.parsers.nsys_columns import PROCESS_MASK, as_text, checked, fetch, labelled, objects, typed
from tracekit.trace import OP_COLUMNS, RANGE_COLUMNS
from tracekit.trace.tables import ColumnTable

NVTX_PUSH_POP, NVTX_START_END, NVTX_DOMAIN_CREATE = 59, 60, 75

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


def nvtx_tables(conn: sqlite3.Connection, schema: S.Schema, checks: Checks) -> tuple[ColumnTable, ColumnTable, int]:
    """NVTX_EVENTS -> (the emit_nvtx ops, the other ranges, how many ranges never closed).
    A range's domain is named by the domain-create event with its id ("nvtx:<name>")."""
    t = S.NVTX
    text = "COALESCE(n.text, s.value)" if schema.has(t, "textId") else "n.text"
    join = f"LEFT JOIN {S.STRINGS} s ON s.id = n.textId" if schema.has(t, "textId") else ""
    domain = "n.domainId" if schema.has(t, "domainId") else "0"
    rows = fetch(conn, f"SELECT n.start, n.end, n.eventType, n.globalTid, {domain} AS domainId, {text} AS text "
                       f"FROM {t} n {join} WHERE n.eventType IN ({NVTX_PUSH_POP}, {NVTX_START_END}, {NVTX_DOMAIN_CREATE})")
    texts = [as_text(v) for v in rows["text"]]
    created = typed(rows["eventType"]) == NVTX_DOMAIN_CREATE
    domains = {d: texts[i] for i, d in zip(np.flatnonzero(created).tolist(), compress(rows["domainId"], created))}  # the last wins
    ranges = np.flatnonzero(~created)
    rows = {c: [values[i] for i in ranges.tolist()] for c, values in rows.items() if c != "text"}
    texts = [texts[i] for i in ranges.tolist()]
    open_ranges = rows["end"].count(None)
    if open_ranges:  # they end with the capture: the last instant any range starts
        starts = typed(rows["start"])
        numbers = as_float(starts)  # text read as a number where it spells one
        with np.errstate(invalid="ignore"):
            plausible = (numbers if starts.dtype == object else starts)[np.abs(numbers) <= MAX_ABS_TIME_NS]
        last = plausible.max().item() if len(plausible) else None
        rows["end"] = [last if e is None else e for e in rows["end"]]
    c, kept = checked(checks, rows, "NVTX ranges", {"globalTid": np.int64})
    texts = [texts[i] for i in kept.tolist()]
    # one parse per distinct text (range names repeat; equal texts share one read-only sizes list)
    distinct = {text: parse_op_text(text) for text in dict.fromkeys(texts)}
    parsed = [distinct[text] for text in texts]
    is_op = np.array([p is not None for p in parsed], dtype=bool)
    pid = c["globalTid"] & PROCESS_MASK
    op_rows, range_rows = np.flatnonzero(is_op), np.flatnonzero(~is_op)
    ops = ColumnTable(OP_COLUMNS, {
        "name": labelled([parsed[i][0] for i in op_rows.tolist()]),
        "pid": pid[op_rows], "tid": c["globalTid"][op_rows], "start": c["start"][op_rows], "end": c["end"][op_rows],
        "sequence": checks.ints([parsed[i][1] for i in op_rows.tolist()], "emit_nvtx seq"),
        "input_dims": objects([parsed[i][2] for i in op_rows.tolist()]),
    }) if len(op_rows) else ColumnTable(OP_COLUMNS, {})
    domain_ids = [rows["domainId"][i] for i in kept.tolist()]
    ranges = ColumnTable(RANGE_COLUMNS, {
        "name": labelled([texts[i] for i in range_rows.tolist()]),
        "domain": labelled([f"nvtx:{domains[d]}" if d in domains else "nvtx" for d in (domain_ids[i] for i in range_rows.tolist())]),
        "pid": pid[range_rows], "tid": c["globalTid"][range_rows], "start": c["start"][range_rows], "end": c["end"][range_rows],
    }) if len(range_rows) else ColumnTable(RANGE_COLUMNS, {})
    return ops, ranges, open_ranges
