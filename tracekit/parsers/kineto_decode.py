"""Decoding Kineto JSON: the document as zero-copy raw events, then events chunk by chunk.

Decoding everything into objects at once costs about as much memory as the file again.
Instead the document is decoded with each event kept as `msgspec.Raw` (a view into the
input buffer), and `decode_events` turns a chunk of those into typed Structs that the
parser reduces to columns before the next chunk. Slow paths run only when needed:

- a trace cut short (a job that died mid-write) is closed after its last whole event;
- bytes that are not UTF-8 never get here: they are replaced before decoding (utf8.py);
- events whose fields have the wrong type are skipped one by one and counted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Union

import msgspec
import numpy as np

from tracekit.errors import TraceError

_EMPTY_ARGS = msgspec.Raw(b"{}")


class Event(msgspec.Struct, tag_field="ph", tag="X", gc=False):
    """A complete ("X") event: the only phase tracekit reads. gc=False: millions of these,
    none holds a reference cycle."""

    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = 0.0
    dur: float = float("nan")  # missing: unknown, not 0 (counted and dropped by columns.times_us, a health warning)
    args: msgspec.Raw = _EMPTY_ARGS


class Begin(msgspec.Struct, tag_field="ph", tag="B", gc=False):
    """A duration event's begin (the Chrome trace format's B/E pairs): with its E, one
    complete event (EventDecoder.closed_pairs)."""

    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: msgspec.Raw = msgspec.Raw(b"0")  # as written: a pair's duration is the exact decimal difference
    args: msgspec.Raw = _EMPTY_ARGS


class End(msgspec.Struct, tag_field="ph", tag="E", gc=False):
    pid: int | str = 0
    tid: int | str = 0
    ts: msgspec.Raw = msgspec.Raw(b"0")


# Every other Chrome-trace phase (flows, instants, counters, metadata, ...) decodes into an
# empty struct: the decoder skips its fields instead of building strings and numbers.
_OTHER_PHASES = tuple(
    msgspec.defstruct(f"_Phase{i}", [], tag_field="ph", tag=tag, gc=False) for i, tag in enumerate("iIstfPCMNODbneRcSTpFV()")
)
AnyEvent = Union[(Event, Begin, End, *_OTHER_PHASES)]
# A piece of a trace that holds these is left to the serial parser (kineto_parallel), which
# closes each pair whichever chunk holds its halves.
PAIR_PHASES = (Begin, End)


class _Phase(msgspec.Struct):
    ph: Any = None


class _Document(msgspec.Struct):
    traceEvents: list[msgspec.Raw] | None = None
    schemaVersion: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None
    cupti_version: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    hip_runtime_version: Any = None
    roctracer_version: Any = None
    record_shapes: Any = None
    with_stack: Any = None


@dataclass
class Document:
    raw_events: list[msgspec.Raw]
    header: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    cut_short: bool = False  # the JSON ended mid-event and was closed after its last whole one


CUT_SHORT = "trace is cut short"
_TRACE_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_MAX_CUT_ATTEMPTS = 64


def decode_document(path: str, data: Any) -> Document:
    warnings: list[str] = []
    try:
        doc = _decode(path, data, warnings)
    except RecursionError:
        # msgspec recurses per nesting level, even to skip a value: a profiler never nests
        # deeper than a handful of levels, so such a file is not a trace (or is damaged).
        raise TraceError(path, "JSON is nested too deeply to read (arrays or objects over ~1,000 levels deep): not a torch.profiler trace") from None
    header = {f: getattr(doc, f) for f in doc.__struct_fields__ if f != "traceEvents"}
    return Document(doc.traceEvents, header, warnings, any(w.startswith(CUT_SHORT) for w in warnings))


def _decode(path: str, data: Any, warnings: list[str], lenient: bool = False) -> _Document:
    try:
        doc = msgspec.json.decode(data, type=_Document)
    except msgspec.ValidationError as exc:
        if str(exc).startswith("Expected `object`"):
            raise TraceError(path, "top level of the JSON is not an object with `traceEvents`: not a torch.profiler / Kineto trace") from None
        raise TraceError(path, f"trace header has a field of the wrong type: {_plain(exc)}") from None
    except msgspec.DecodeError as exc:
        if not lenient and ("trailing comma" in str(exc) or "invalid character" in str(exc)):
            from tracekit.parsers.input_forms import lenient_json

            repaired, notes = lenient_json(data)  # a trailing comma, NaN / Infinity: read with a warning
            if repaired is not None:
                warnings += notes
                return _decode(path, repaired, warnings, lenient=True)
        if not _looks_truncated(exc, data):
            raise TraceError(path, f"not valid JSON: {_plain(exc)}") from None
        doc = _salvage_truncated(path, data, warnings)
    if doc.traceEvents is None:
        raise TraceError(path, "JSON has no `traceEvents` list: not a torch.profiler / Kineto trace")
    return doc


class EventDecoder:
    """Raw events -> complete events, counting what had to be repaired or dropped.

    Given the buffer the raw events point into, a chunk is decoded straight from one slice
    of it (the events of a chunk are contiguous there); otherwise its events are joined.
    """

    def __init__(self, buffer: Any = None) -> None:
        self._buffer = memoryview(buffer).cast("B") if buffer is not None else None
        self._base = buffer_address(buffer) if buffer is not None else 0
        self._decode_list = msgspec.json.Decoder(list[AnyEvent]).decode
        self._decode_one = msgspec.json.Decoder(AnyEvent).decode
        self._phase = msgspec.json.Decoder(_Phase).decode
        self.skipped = 0
        self.first_error: str | None = None
        self._begins: list[Begin] = []
        self._ends: list[End] = []
        self.pairs = self.unpaired = 0

    def decode(self, raws: list[msgspec.Raw]) -> list[Event]:
        blob = self._slice(raws) or json_array(raws)
        try:
            events = self._decode_list(blob)
        except RecursionError:
            events = self._one_by_one(raws)
        except msgspec.ValidationError:
            events = self._one_by_one(raws)
        self._begins += [e for e in events if type(e) is Begin]
        self._ends += [e for e in events if type(e) is End]
        return [e for e in events if type(e) is Event]

    def holds_pairs(self) -> bool:
        return bool(self._begins or self._ends)

    def closed_pairs(self) -> list[Event]:
        """The B/E pairs seen, as complete events: per thread in time order, each E closes the
        latest open B (they nest). A B never closed, or an E with nothing open, is counted."""
        # Timestamps as exact decimals: at 4.8e12 µs a float holds no nanoseconds, and the
        # difference of two would be off by one (an X event's own `dur` is a small number)
        by_thread: dict[tuple, list[tuple[Decimal, int, Any]]] = {}
        for b in self._begins:
            if (ts := _decimal(b.ts)) is not None:
                by_thread.setdefault((b.pid, b.tid), []).append((ts, 1, b))
            else:
                self.unpaired += 1
        for e in self._ends:
            if (ts := _decimal(e.ts)) is not None:
                by_thread.setdefault((e.pid, e.tid), []).append((ts, 0, e))  # at one ts an E closes before a B opens
            else:
                self.unpaired += 1
        out: list[Event] = []
        for marks in by_thread.values():
            marks.sort(key=lambda m: (m[0], m[1]))
            open_: list[Begin] = []
            for ts, is_begin, event in marks:
                if is_begin:
                    open_.append(event)
                elif open_:
                    b = open_.pop()
                    begun = _decimal(b.ts)
                    out.append(Event(cat=b.cat, name=b.name, pid=b.pid, tid=b.tid, ts=float(begun), dur=float(ts - begun), args=b.args))
                else:
                    self.unpaired += 1
            self.unpaired += len(open_)
        self.pairs = len(out)
        self._begins, self._ends = [], []
        return out

    def _slice(self, raws: list[msgspec.Raw]) -> bytes | None:
        if self._buffer is None or not raws:
            return None
        first = buffer_address(raws[0]) - self._base
        last = buffer_address(raws[-1]) - self._base + len(memoryview(raws[-1]))
        if not (0 <= first < last <= len(self._buffer)):
            return None  # not views into this buffer (a repaired copy): join instead
        return b"".join((b"[", self._buffer[first:last], b"]"))

    def _one_by_one(self, raws: list[msgspec.Raw]) -> list[Any]:
        events = []
        for raw in raws:
            try:
                events.append(self._decode_one(raw))
            except (msgspec.ValidationError, msgspec.DecodeError, RecursionError) as exc:
                # A phase tracekit does not read is no error; a broken "X" event is.
                try:
                    broken = self._phase(raw).ph == "X"
                except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
                    broken = True
                if broken:
                    self.skipped += 1
                    self.first_error = self.first_error or _plain(exc)
        return events

    def warnings(self) -> list[str]:
        out = []
        if self.skipped:
            out.append(f"{self.skipped:,} events skipped: a field has the wrong type (first: {self.first_error})")
        if self.pairs:
            out.append(f"{self.pairs:,} begin/end (B/E) event pairs read as complete events")
        if self.unpaired:
            out.append(f"{self.unpaired:,} begin (B) or end (E) events have no partner on their thread: dropped (their duration is unknown)")
        return out


def _decimal(raw: msgspec.Raw) -> Decimal | None:
    """A JSON number as written, exactly; None for anything else (a string, a NaN)."""
    try:
        value = Decimal(bytes(raw).decode("ascii").strip('"') if bytes(raw)[:1] == b'"' else bytes(raw).decode("ascii"))
    except (InvalidOperation, UnicodeDecodeError, ValueError):
        return None
    return value if value.is_finite() else None


def buffer_address(buffer: Any) -> int:
    """Where a buffer's bytes start in memory (no copy is made)."""
    return np.frombuffer(buffer, dtype=np.uint8).__array_interface__["data"][0] if len(memoryview(buffer)) else 0


def json_array(items: list[Any]) -> bytes:
    """`[item,item,...]` built with a single copy of the items' bytes."""
    if not items:
        return b"[]"
    if len(items) == 1:
        return b"[" + bytes(items[0]) + b"]"
    middle = items[1:-1]
    return b",".join([b"[" + bytes(items[0]), *middle, bytes(items[-1]) + b"]"])


def raw_bytes(raws: list[msgspec.Raw]) -> list[bytes]:
    """Raw JSON values -> their bytes, in two C calls instead of one `bytes()` per value
    (~1 µs each through the buffer protocol: 4 input fields of every CPU op). NUL cannot
    appear in JSON text, so it separates the values; should one hold a NUL anyway, the
    pieces do not add up and each value is copied on its own."""
    if not raws:
        return []
    pieces = b"\x00".join(raws).split(b"\x00")
    return pieces if len(pieces) == len(raws) else list(map(bytes, raws))


def _looks_truncated(exc: Exception, data: Any) -> bool:
    if "truncated" in str(exc):
        return True
    # A cut inside a string or number can read as "malformed" right at the end of the data.
    match = re.search(r"\(byte (\d+)\)", str(exc))
    return bool(match) and int(match.group(1)) >= len(data) - 2


def _salvage_truncated(path: str, data: Any, warnings: list[str]) -> _Document:
    """Close the events array after its last whole event and decode that."""
    match = _TRACE_EVENTS_KEY.search(bytes(data[: 1 << 20]))
    if match is None:
        match = _TRACE_EVENTS_KEY.search(bytes(data))
    if match is None:
        raise TraceError(path, "JSON is cut short before any `traceEvents`")
    array_start = match.end()
    end = len(data)
    view = memoryview(data)
    for _ in range(_MAX_CUT_ATTEMPTS):
        cut = bytes(view[max(array_start, end - (1 << 20)) : end]).rfind(b"}")
        if cut < 0:
            break
        cut += max(array_start, end - (1 << 20))
        end = cut
        candidate = bytes(view[: cut + 1]) + b"]}"  # our own copy: the input is never written
        try:
            doc = msgspec.json.decode(candidate, type=_Document)
        except (msgspec.ValidationError, msgspec.DecodeError):
            continue
        lost = len(data) - (cut + 1)
        warnings.append(
            f"{CUT_SHORT}: kept {len(doc.traceEvents or ()):,} whole events; "
            f"the last {lost:,} bytes (at least one partial event) were lost"
        )
        return doc
    raise TraceError(path, "JSON is cut short and no whole event could be recovered")


def _plain(exc: Exception) -> str:
    return str(exc).replace("`$.", "`")
