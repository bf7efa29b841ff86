"""torch.profiler / Kineto JSON -> the Trace's tables (as numpy columns: tracekit.trace.tables).

Handles the current schema (`kernel`, `cpu_op`, `cuda_runtime`, ...) and the 2021 one
(`Kernel`, `Operator`, `Runtime`, ...), NVIDIA and AMD. Events are decoded a chunk at a
time and reduced to compact columns (kineto_tables.py), so memory stays close to the size
of the file however large it is; a large file is decoded by worker processes
(kineto_parallel.py). Parsing only: linking is tracekit.trace.link's job.
"""

from __future__ import annotations

from typing import Callable

from tracekit.errors import TraceError
from tracekit.parsers.kineto_decode import EventDecoder, decode_document
from tracekit.parsers.kineto_tables import CHUNK_EVENTS, KinetoTables
from tracekit.parsers.source import read_source
from tracekit.parsers.utf8 import repaired
from tracekit.trace.tables import ColumnTrace


def parse_kineto(path: str, progress: Callable[[int, int], None] | None = None, workers: int | None = None,
                 meanwhile: Callable[[], None] | None = None) -> ColumnTrace:
    """The trace's tables as numpy columns (tables.py: no pandas here or in the workers).
    `progress(done, total)` is called as chunks of events are read, for a progress bar.
    `workers`: processes to decode a large trace with (default: the cores available; see
    kineto_parallel.py); 1 reads it in this process. `meanwhile()`: called once while the
    workers decode, for work that needs no trace (importing the next stages)."""
    source = read_source(path)
    # Valid UTF-8 from here on, whatever the JSON library does with bad bytes (utf8.py).
    source.data, source.replaced_utf8 = repaired(source.data)
    fallback = None
    if workers != 1:
        from tracekit.parsers.kineto_parallel import OutOfMemory, parse_parallel

        try:
            trace = parse_parallel(path, source, workers, progress, meanwhile)
        except OutOfMemory as exc:  # the workers are stopped; one process may still fit (else MemoryError below)
            trace, fallback = None, str(exc)
        if trace is not None:
            return trace
    document = decode_document(path, source.data)
    decoder = EventDecoder(source.data)
    tables = KinetoTables()
    raws = document.raw_events
    for first in range(0, len(raws), CHUNK_EVENTS):
        tables.add_events(decoder.decode(raws[first : first + CHUNK_EVENTS]))
        if progress:
            progress(min(first + CHUNK_EVENTS, len(raws)), len(raws))
    tables.add_events(decoder.closed_pairs())
    del document.raw_events, raws
    if tables.empty():
        lost = tables.checks.warnings() + decoder.warnings()  # all of them unreadable, perhaps
        raise TraceError(path, "no profiler events: `traceEvents` holds no kernels, ops, runtime calls or ranges"
                               + (f" that can be read ({'; '.join(lost)})" if lost else ""))
    trace = tables.build(path, source, document)
    trace.meta["cut_short"] = source.cut_short or document.cut_short
    trace.warnings[:0] = source.all_warnings() + document.warnings + decoder.warnings()
    trace.warnings += tables.checks.warnings()
    if fallback:
        trace.warnings.insert(0, fallback)
    return trace
