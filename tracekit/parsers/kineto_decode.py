"""Decoding Kineto JSON into typed events, fast, and as far as the file is whole.

The fast path decodes the whole document into msgspec Structs in one call, keeping each
event's `args` as raw bytes: most events never need their args decoded (DESIGN.md,
"Speed"). Slow paths run only when the fast one fails:

- a trace cut short (a job that died mid-write) is closed after its last whole event;
- bytes that are not UTF-8 are replaced (U+FFFD) rather than rejected;
- events whose fields have the wrong type are skipped one by one and counted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Union

import msgspec

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
    dur: float = 0.0
    args: msgspec.Raw = _EMPTY_ARGS


# Every other Chrome-trace phase (flows, instants, counters, metadata, ...) decodes into an
# empty struct: the decoder skips its fields instead of building strings and numbers.
_OTHER_PHASES = tuple(
    msgspec.defstruct(f"_Phase{i}", [], tag_field="ph", tag=tag, gc=False) for i, tag in enumerate("BEiIstfPCMNODbneRcSTpFV()")
)
AnyEvent = Union[(Event, *_OTHER_PHASES)]


class _Document(msgspec.Struct):
    traceEvents: list[AnyEvent] | None = None
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


class _Phase(msgspec.Struct):
    ph: Any = None


class _RawDocument(_Document):
    traceEvents: list[msgspec.Raw] | None = None  # type: ignore[assignment]


@dataclass
class Decoded:
    events: list[Event]
    header: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


_TRACE_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_MAX_CUT_ATTEMPTS = 64


def decode(path: str, data: Any) -> Decoded:
    warnings: list[str] = []
    try:
        doc = _decode_document(path, data, warnings)
    except UnicodeDecodeError:
        data = _replace_invalid_utf8(data, warnings)
        doc = _decode_document(path, data, warnings)
    header = {f: getattr(doc, f) for f in doc.__struct_fields__ if f != "traceEvents"}
    events = [e for e in doc.traceEvents if type(e) is Event]
    return Decoded(events, header, warnings)


def _replace_invalid_utf8(data: Any, warnings: list[str]) -> bytes:
    text = bytes(data).decode("utf-8", errors="replace")
    warnings.append(f"{text.count(chr(0xFFFD)):,} byte sequences that are not UTF-8 were replaced with U+FFFD")
    return text.encode("utf-8")


def _decode_document(path: str, data: Any, warnings: list[str]) -> _Document:
    try:
        doc = msgspec.json.decode(data, type=_Document)
    except msgspec.ValidationError as exc:
        if str(exc).startswith("Expected `object`"):
            raise TraceError(path, "top level of the JSON is not an object with `traceEvents`: not a torch.profiler / Kineto trace") from None
        doc = _decode_event_by_event(path, data, exc, warnings)
    except msgspec.DecodeError as exc:
        if not _looks_truncated(exc, data):
            raise TraceError(path, f"not valid JSON: {_plain(exc)}") from None
        doc = _salvage_truncated(path, data, warnings)
    if doc.traceEvents is None:
        raise TraceError(path, "JSON has no `traceEvents` list: not a torch.profiler / Kineto trace")
    return doc


def _decode_event_by_event(path: str, data: Any, first: Exception, warnings: list[str]) -> _Document:
    """Some event has a field of the wrong type: keep every event that decodes."""
    try:
        raw = msgspec.json.decode(data, type=_RawDocument)
    except msgspec.ValidationError:
        raise TraceError(path, f"trace header has a field of the wrong type: {_plain(first)}") from None
    events: list[Event] = []
    bad = 0
    decoder = msgspec.json.Decoder(AnyEvent)
    phase = msgspec.json.Decoder(_Phase)
    for item in raw.traceEvents or ():
        try:
            events.append(decoder.decode(item))
        except (msgspec.ValidationError, msgspec.DecodeError):
            # A phase tracekit does not know is no error; a broken "X" event is.
            try:
                bad += phase.decode(item).ph == "X"
            except (msgspec.ValidationError, msgspec.DecodeError):
                bad += 1
    if bad:
        warnings.append(f"{bad:,} events skipped: a field has the wrong type (first: {_plain(first)})")
    doc = raw
    doc.traceEvents = events
    return doc


def _looks_truncated(exc: Exception, data: Any) -> bool:
    if "truncated" in str(exc):
        return True
    # A cut inside a string or number can read as "malformed" right at the end of the data.
    match = re.search(r"\(byte (\d+)\)", str(exc))
    return bool(match) and int(match.group(1)) >= len(data) - 2


def _salvage_truncated(path: str, data: Any, warnings: list[str]) -> _Document:
    """Close the events array after its last whole event and decode that."""
    head = bytes(data[: 1 << 20]) if len(data) > (1 << 20) else bytes(data)
    match = _TRACE_EVENTS_KEY.search(head)
    if match is None:
        match = _TRACE_EVENTS_KEY.search(bytes(data))
    if match is None:
        raise TraceError(path, "JSON is cut short before any `traceEvents`")
    array_start = match.end()
    buf = bytearray(data)  # our own copy: the input is never written
    end = len(buf)
    for _ in range(_MAX_CUT_ATTEMPTS):
        cut = buf.rfind(b"}", array_start, end)
        if cut < 0:
            break
        end = cut
        candidate = bytes(buf[: cut + 1]) + b"]}"
        try:
            doc = msgspec.json.decode(candidate, type=_Document)
        except msgspec.ValidationError as exc:
            try:
                doc = _decode_event_by_event(path, candidate, exc, warnings)
            except TraceError:
                continue
        except msgspec.DecodeError:
            continue
        lost = len(buf) - (cut + 1)
        warnings.append(
            f"trace is cut short: kept {len(doc.traceEvents or ()):,} whole events; "
            f"the last {lost:,} bytes (at least one partial event) were lost"
        )
        return doc
    raise TraceError(path, "JSON is cut short and no whole event could be recovered")


def _plain(exc: Exception) -> str:
    return str(exc).replace("`$.", "`")
