"""A trace's bytes made valid UTF-8 before any JSON decoder sees them.

What a JSON library does with bytes that are not UTF-8 is its own choice, and it changes
between releases: msgspec up to 0.22 raised UnicodeDecodeError only for the strings it
decoded (an unread field passed), 0.23 raises DecodeError for any invalid string, read or
skipped, with nothing in the type but its message to tell it from broken JSON. So the
bytes are checked here, once, before decoding: every decoder then gets valid UTF-8 and the
count of what was replaced is the file's, whatever the library or the split into chunks.

A trace that is plain ASCII (nearly all: kernel and op names, numbers) costs one `isascii`
scan (memory bandwidth); one with other valid UTF-8 a strict decode in bounded chunks; only
one with bad bytes is copied, a chunk at a time.
"""

from __future__ import annotations

import codecs

_CHUNK = 16 << 20
REPLACEMENT = b"\xef\xbf\xbd"  # U+FFFD in UTF-8


def is_utf8(data: bytes | bytearray) -> bool:
    if data.isascii():
        return True
    import numpy as np

    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    view = memoryview(data).cast("B")
    try:
        for start in range(0, len(view), _CHUNK):
            chunk = view[start:start + _CHUNK]
            # an ASCII chunk with no character left open before it needs no decode (~10x faster)
            if decoder.getstate()[0] or np.frombuffer(chunk, dtype=np.uint8).max() >= 0x80:
                decoder.decode(chunk)
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def repaired(data: bytes | bytearray) -> tuple[bytes | bytearray, int]:
    """`data` itself when it is valid UTF-8 (and 0); else a copy in which each byte sequence
    that is not UTF-8 is U+FFFD, and how many there were. A U+FFFD the file itself holds is
    no replacement and is not counted."""
    if is_utf8(data):
        return data, 0
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    view = memoryview(data).cast("B")
    out = bytearray()
    for start in range(0, len(view), _CHUNK):
        out += decoder.decode(view[start:start + _CHUNK]).encode("utf-8")
    out += decoder.decode(b"", final=True).encode("utf-8")
    return out, out.count(REPLACEMENT) - data.count(REPLACEMENT)


def replaced_warning(count: int) -> list[str]:
    return [f"{count:,} byte sequences that are not UTF-8 were replaced with U+FFFD"] if count else []
