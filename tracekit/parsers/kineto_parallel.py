"""One Kineto JSON trace read by several worker processes.

The `traceEvents` array is cut into pieces at event boundaries; each worker (a fork of this
process, so it reads the same mapped file without a copy) decodes its pieces into the same
compact columns the serial parser builds, and the pieces' columns are joined in file order
(names renumbered in order of first sight): the Trace is the one the serial path builds.

Cuts are found by a byte search (`},{"ph"...`), which a string holding that text could
fool; so nothing is trusted until it has been decoded. The first piece starts right after
the array's `[`; a piece that decodes whole as a JSON array ends where the real document's
event ends, so the next cut is a true event start too, and so on down the file. The
header is checked the same way: the bytes before the `[` and after the `]`, with nothing
(and then one value) between them, must decode as a trace whose `traceEvents` is exactly
that array. Anything unexpected (a piece that does not decode, a file cut short, no worker
processes on this platform) hands the file back to
the serial parser, which says what is wrong with it.

Running out of memory (this process or a worker, under `ulimit -v` or a cgroup) stops the
workers and raises OutOfMemory: the caller reads the file in this process instead, which
needs less (no worker results held beside the joined tables, no pool threads), and says so.
Under an address-space limit (`ulimit -v`) the pool's threads are made small (_small_threads)
and `meanwhile` is not called: what it imports would raise this process's peak during the
parse, and the caller imports it afterwards anyway.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from typing import Any, Callable

import msgspec

from tracekit.common.pools import die_with_parent, stop_pool
from tracekit.errors import address_space_limit, interrupts_deferred, memory_ran_out
from tracekit.parsers.kineto_decode import Document, EventDecoder, buffer_address, decode_document
from tracekit.parsers.kineto_tables import KinetoTables
from tracekit.parsers.source import Source
from tracekit.trace.tables import ColumnTrace

# Below this many bytes of JSON the serial parser wins: forking the workers and joining
# their columns costs about what the second core saves. Measured on a 2-core machine
# (parse alone, 2 workers forced, median of 6 interleaved runs): 10 MB 0.086 s serial vs
# 0.089 s with 2 workers, 20 MB 0.113 vs 0.087 s, 55 MB 0.371 vs 0.193 s.
MIN_PARALLEL_BYTES = 16 << 20
# Pieces handed to the workers: several per worker, so that a worker slowed by other load
# on the machine does not hold up the rest; each is decoded in sub-chunks of SUB_BYTES so a
# worker's memory stays bounded by what it keeps (columns), not by what it decodes.
PIECES_PER_WORKER = 4
MIN_PIECE_BYTES = 4 << 20
SUB_BYTES = 24 << 20

_KEY = re.compile(rb'"traceEvents"[ \t\r\n]*:[ \t\r\n]*\[')
# An event boundary as profilers write it: `}` `,` `{` and an event key next.
_BOUNDARY = re.compile(rb'\}[ \t\r\n]*,[ \t\r\n]*\{[ \t\r\n]*"(?:ph|cat|name|pid|tid|ts|dur|args|id)"[ \t\r\n]*:')
_HEAD_SEARCH = 1 << 20  # the array's `[` is expected within the first MiB (after the header)


class _Single(msgspec.Struct):
    traceEvents: list[msgspec.Raw] | None = None


class _Rest(msgspec.Struct):
    traceEvents: msgspec.Raw = msgspec.Raw(b"null")


_data: Any = None  # the trace's bytes, set before the workers fork (they inherit it)
_NO_MEMORY = "out of memory"  # what a worker returns when its piece did not fit


class OutOfMemory(Exception):
    """The parallel parse ran out of memory; its workers are stopped. The message is the
    warning for the run that reads the file in one process instead."""


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def parse_parallel(path: str, source: Source, workers: int | None, progress: Callable[[int, int], None] | None,
                   meanwhile: Callable[[], None] | None = None) -> ColumnTrace | None:
    """The trace read by `workers` processes (default: the cores available), or None when the
    serial parser should read it (too small to gain, one worker, or anything unexpected)."""
    global _data
    workers = available_cores() if workers is None else workers
    data = source.data
    if workers < 2 or len(data) < MIN_PARALLEL_BYTES or source.warnings:
        return None
    head = _KEY.search(data, 0, min(len(data), _HEAD_SEARCH))
    if head is None:
        return None
    first = head.end()
    # Equal pieces, the same number for every worker: with fewer pieces than workers, or a
    # last piece larger than the rest, one worker would still be decoding while the others wait.
    per_worker = max(1, min(PIECES_PER_WORKER, (len(data) - first) // (workers * MIN_PIECE_BYTES)))
    n = workers * per_worker
    # The piece with the array's end is decoded whole (a copy) to find its `]`: a small extra
    # piece, so that copy stays small too.
    tail = min(SUB_BYTES, (len(data) - first) // (4 * n))
    targets = [first + (len(data) - first) * i // n for i in range(1, n)] + [len(data) - tail]
    pieces = cut(data, first, len(data), targets)
    _data = data
    try:
        results = _run(pieces, workers, progress, len(data) - first, meanwhile)
    finally:
        _data = None
    if results is None:
        return None
    document = _header(path, data, first, results[-1][-1])
    if document is None:
        return None
    tables, decoder = KinetoTables(), EventDecoder()
    for piece_tables, skipped, first_error, _ in results:
        tables.merge(piece_tables)
        decoder.skipped += skipped
        decoder.first_error = decoder.first_error or first_error
    if tables.empty():
        return None  # the serial parser words the error
    trace = tables.build(path, source, document)
    trace.meta["cut_short"] = source.cut_short or document.cut_short
    trace.warnings[:0] = source.all_warnings() + document.warnings + decoder.warnings()
    trace.warnings += tables.checks.warnings()
    return trace


def _run(pieces: list[tuple[int, int]], workers: int, progress, total: int, meanwhile=None) -> list | None:
    from tracekit.common.pools import pool_threads_quiet

    with pool_threads_quiet():  # a pool thread that dies is said by completed(), not by its traceback
        return _run_pool(pieces, workers, progress, total, meanwhile)


def _run_pool(pieces: list[tuple[int, int]], workers: int, progress, total: int, meanwhile=None) -> list | None:
    import multiprocessing  # here, not at the top: a trace too small for workers (most of them) pays no ~12 ms of imports
    from concurrent.futures import ProcessPoolExecutor

    from tracekit.common.pools import completed

    try:
        context = multiprocessing.get_context("fork")
    except ValueError:  # no fork on this platform: the workers could not share the mapped file
        return None
    results: list[Any] = [None] * len(pieces)
    done = 0
    caller_error = None
    pool = None
    count = min(workers, len(pieces))
    # The warning is made now (later there may be no memory for it); the exception is made
    # where it is raised: kept in a local, it would form a cycle with the traceback through this
    # frame, and the workers' results would live on until a collection (paused during the parse).
    no_memory = (f"the parallel parse ({count} worker processes) ran out of memory; the trace was read in one process "
                 "instead (pass --workers 1 to do that from the start)")
    limited = address_space_limit() is not None
    if limited:  # the caller's imports would raise this process's peak during the parse: they wait
        meanwhile = None
    try:
        with interrupts_deferred(), _small_threads(limited):  # the workers fork in the first submit
            pool = ProcessPoolExecutor(max_workers=count, mp_context=context,
                                       initializer=die_with_parent, initargs=(os.getpid(),))
            futures = {pool.submit(_decode_piece, start, stop, i == len(pieces) - 1): i for i, (start, stop) in enumerate(pieces)}
        if meanwhile is not None:  # this process is idle until the pieces come back
            try:
                meanwhile()
            except BaseException as exc:  # the caller's error, raised once the pool is stopped
                caller_error = exc
                raise
        for future in completed(pool, futures):  # (never a wait on a pool that can no longer deliver)
            result = future.result()
            if result is None or result == _NO_MEMORY:
                stop_pool(pool)
                if result == _NO_MEMORY:
                    results = futures = None
                    raise OutOfMemory(no_memory)
                return None
            i = futures[future]
            results[i] = result
            done += pieces[i][1] - pieces[i][0]
            if progress:
                progress(min(done, total), total)
        pool.shutdown(wait=True)
    except OutOfMemory:
        raise
    except BaseException as exc:
        stop_pool(pool)  # first, whatever happened: no worker, pipe or pool thread outlives the parse
        if isinstance(exc, Exception) and memory_ran_out(exc):  # this process's memory (the caller's imports too)
            results = futures = None
            raise OutOfMemory(no_memory) from None
        if isinstance(exc, (OSError, RuntimeError, AssertionError, EOFError)) and exc is not caller_error:
            return None  # workers could not start or died (e.g. inside a daemon process): serial
        raise  # the caller's error (re-reading the file would not help), or an interrupt (SIGINT, SIGTERM)
    return results


@contextlib.contextmanager
def _small_threads(limited: bool):
    """Under an address-space limit (`ulimit -v`, RLIMIT_AS), the pool's two threads in this
    process (its manager and its queue feeder) must not cost what they do by default:
    glibc gives each thread that allocates an arena of its own, 64 MiB of address space
    reserved, kept after the thread ends, and each stack reserves 8 MiB. Two arenas and
    stacks were ~150 MB of a 450 MB limit on a 55 MB trace: this process then ran out of
    memory importing the next stages, and the serial parse it fell back to could not fit
    either. So, with a limit set: one malloc arena for the process (glibc's mallopt
    M_ARENA_MAX; this process keeps the setting) and 1 MiB stacks for the threads started
    meanwhile. Without a limit nothing changes."""
    import threading

    if not limited:
        yield
        return
    with contextlib.suppress(OSError, AttributeError, ValueError):
        import ctypes

        ctypes.CDLL(None).mallopt(-8, 1)  # M_ARENA_MAX (glibc); elsewhere no such symbol: nothing to do
    before = None
    with contextlib.suppress(ValueError, RuntimeError):
        before = threading.stack_size(1 << 20)
    try:
        yield
    finally:
        if before is not None:
            with contextlib.suppress(ValueError, RuntimeError):
                threading.stack_size(before)


def _header(path: str, data: Any, first: int, closing: int) -> Document | None:
    """The document around the array, checked: the bytes before its `[` and from its `]` on,
    with nothing (and then one value) between them, must be a trace whose `traceEvents` is
    exactly that array. None if not (the serial parser reads it)."""
    view = memoryview(data)
    prefix, suffix = bytes(view[:first]), bytes(view[closing:])
    try:
        document = decode_document(path, prefix + suffix)
        probe = msgspec.json.decode(prefix + b"0" + suffix, type=_Single)
    except Exception:  # noqa: BLE001 - any doubt: the serial parser reads it
        return None
    if document.raw_events == [] and not document.warnings and probe.traceEvents is not None \
            and len(probe.traceEvents) == 1 and bytes(probe.traceEvents[0]) == b"0":
        return document
    return None


def cut(data: Any, start: int, stop: int, targets: list[int]) -> list[tuple[int, int]]:
    """[start, stop) cut at the first event boundary at or after each target: (first byte,
    end) pairs, the separators between pieces left out."""
    pieces = []
    here = start
    for target in targets:
        if target <= here:
            continue
        m = _BOUNDARY.search(data, target, stop)
        if m is None:
            break
        pieces.append((here, m.start() + 1))
        here = data.find(b"{", m.start() + 1, stop)
    pieces.append((here, stop))
    return pieces


def _decode_piece(start: int, stop: int, last: bool):
    """In a worker: one piece's events into columns, and where the piece ends. None: this
    piece cannot be trusted (it does not decode as whole events), and the file goes to the
    serial parser."""
    try:
        data = _data
        view = memoryview(data)
        if last:  # the array's end: decode the rest of the document with the array kept raw
            opening = b'{"traceEvents":['
            blob = b"".join((opening, view[start:stop]))
            raw = msgspec.json.decode(blob, type=_Rest).traceEvents
            offset = buffer_address(raw) - buffer_address(blob)
            if offset != len(opening) - 1 or bytes(memoryview(raw)[:1]) != b"[":
                return None
            stop = start + len(memoryview(raw)) - 2  # the `]`
            del blob, raw
        tables, decoder = KinetoTables(), EventDecoder()
        n = max(1, math.ceil((stop - start) / SUB_BYTES))
        for a, b in cut(data, start, stop, [start + (stop - start) * i // n for i in range(1, n)]):
            events = _decode_events(b"".join((b"[", view[a:b], b"]")), decoder)
            if events is None:
                return None
            tables.add_events(events)
        return tables, decoder.skipped, decoder.first_error, stop
    except Exception as exc:  # noqa: BLE001 - a worker never guesses: the serial parser decides
        return _NO_MEMORY if memory_ran_out(exc) else None


def _decode_events(blob: bytes, decoder: EventDecoder) -> list | None:
    """The piece's complete events; None where it cannot be trusted, and where it holds B/E
    pairs (closed over the whole trace: the serial parser reads it)."""
    from tracekit.parsers.kineto_decode import PAIR_PHASES, Event

    try:
        events = decoder._decode_list(blob)
        kept = [e for e in events if type(e) is Event]
        if len(kept) != len(events) and any(type(e) in PAIR_PHASES for e in events):
            return None
        return kept
    except msgspec.ValidationError:
        pass  # wrong types in some event: the serial decoder skips those one by one
    except msgspec.DecodeError:
        return None
    try:
        raws = msgspec.json.decode(blob, type=list[msgspec.Raw])
    except msgspec.DecodeError:
        return None
    events = decoder.decode(raws)
    return None if decoder.holds_pairs() else events
