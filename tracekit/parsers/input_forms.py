"""The forms a trace file comes in besides plain or gzipped UTF-8 JSON, read or named.

- Compression is read from the magic bytes, not the file name: gzip (also gzip inside gzip,
  a `.json.gz` gzipped once more), bz2 and xz are decompressed with the same bounds as gzip
  (tracekit.parsers.source: half the memory, 200x past 256 MiB); zstd and zip are named in
  one line with the command that unpacks them (the standard library reads neither).
- Text: a UTF-8 byte-order mark is skipped; UTF-16 and UTF-32 (with a BOM, or UTF-16 without
  one, seen from the NUL beside the first `{`) are decoded to UTF-8. Each with a warning.
- Lenient JSON (lenient_json): a trailing comma before `]` or `}` (a form Kineto has written)
  and the `NaN` / `Infinity` literals Python's json writes by default are read (a NaN as
  null: unknown, never zero), counted in a warning. Run only where the strict decode failed.
"""

from __future__ import annotations

import bz2
import lzma
import re
import zlib

from tracekit.errors import TraceError

COMPRESSIONS = ((b"\x1f\x8b", "gzip"), (b"BZh", "bz2"), (b"\xfd7zXZ\x00", "xz"), (b"(\xb5/\xfd", "zstd"), (b"PK\x03\x04", "zip"))
UNPACK = {"zstd": "zstd -d FILE", "zip": "unzip FILE"}
_CHUNK = 16 << 20
_MAX_LAYERS = 4


def compression_of(head: bytes) -> str | None:
    return next((name for magic, name in COMPRESSIONS if head.startswith(magic)), None)


def decompressed(path: str, data, warnings: list[str], grown, first_done: str | None = None):
    """`data` with every layer of compression the magic bytes show taken off (in memory);
    `grown(produced)` raises where the output has grown past the source's bounds."""
    layers = [first_done] if first_done else []
    for _ in range(_MAX_LAYERS):
        kind = compression_of(bytes(data[:8]))
        if kind is None:
            break
        if kind in UNPACK:
            raise TraceError(path, f"is {kind}-compressed{' inside ' + layers[-1] if layers else ''}: tracekit reads plain, gzip, "
                                   f"bz2 and xz JSON; unpack it first (`{UNPACK[kind]}`) and analyse the trace inside")
        decomp = {"gzip": lambda: zlib.decompressobj(wbits=31), "bz2": bz2.BZ2Decompressor, "xz": lzma.LZMADecompressor}[kind]()
        out, view = bytearray(), memoryview(data)
        try:
            while view:
                if kind == "gzip":
                    out += decomp.decompress(view, _CHUNK)
                    view = memoryview(decomp.unconsumed_tail) if not decomp.eof else memoryview(b"")
                else:
                    out += decomp.decompress(view, _CHUNK)
                    view = memoryview(b"")
                    while not decomp.eof and decomp.needs_input is False:
                        out += decomp.decompress(b"", _CHUNK)
                        grown(len(out))
                grown(len(out))
        except (zlib.error, OSError, lzma.LZMAError, EOFError) as exc:
            raise TraceError(path, f"{kind} data is corrupt ({exc})") from None
        if not out:
            raise TraceError(path, f"{kind} data holds nothing")
        layers.append(kind)
        data = out
    inner = [k for k in layers if k]
    if len(inner) > 1 or (inner and inner[0] != "gzip"):
        warnings.append(f"read as {' inside '.join(reversed(inner))}-compressed JSON (from its magic bytes)")
    return data


_BOMS = ((b"\x00\x00\xfe\xff", "utf-32-be"), (b"\xff\xfe\x00\x00", "utf-32-le"), (b"\xef\xbb\xbf", "utf-8-sig"),
         (b"\xfe\xff", "utf-16-be"), (b"\xff\xfe", "utf-16-le"))


def as_utf8(path: str, data, warnings: list[str]):
    """`data` as UTF-8 JSON text: a BOM skipped, UTF-16/32 decoded (see module doc)."""
    head = bytes(data[:4])
    encoding = next((name for bom, name in _BOMS if head.startswith(bom)), None)
    codec = encoding.split("-")[0] + "-" + encoding.split("-")[1] if encoding and encoding != "utf-8-sig" else encoding  # utf-16, utf-32: the BOM says the order
    if encoding is None:
        encoding = codec = utf16_without_bom(bytes(data[:64]))
    if encoding is None:
        return data
    if encoding == "utf-8-sig":
        warnings.append("a UTF-8 byte-order mark starts the file: skipped")
        return data[3:]
    try:
        text = bytes(data).decode(codec)
    except UnicodeDecodeError as exc:
        raise TraceError(path, f"looks like {encoding.upper()} text but does not decode ({exc.reason} at byte {exc.start:,})") from None
    warnings.append(f"the file is {encoding.upper()} text, not UTF-8: decoded")
    return bytearray(text.lstrip("\ufeff").encode("utf-8", errors="surrogatepass"))


def utf16_without_bom(head: bytes) -> str | None:
    """UTF-16 text with no BOM, from its first bytes: JSON's ASCII (whitespace, `{`, quotes)
    puts a NUL in every other byte, the odd ones for little-endian, the even ones for big."""
    if len(head) < 4:
        return None
    even, odd = head[0::2], head[1::2]
    if odd.count(0) == len(odd) and not even.count(0):
        return "utf-16-le"
    if even.count(0) == len(even) and not odd.count(0):
        return "utf-16-be"
    return None


# A JSON string, or one of the two forms read leniently (a comma before a closer, a NaN / Infinity)
_LENIENT = re.compile(rb'"(?:[^"\\]|\\.)*"|,(\s*[\]}])|(-?Infinity|NaN)(?![A-Za-z0-9_])')


def lenient_json(data) -> tuple[bytes | None, list[str]]:
    """(repaired copy, warnings), or (None, []) where the data holds neither form."""
    commas = literals = 0

    def fix(m: re.Match) -> bytes:
        nonlocal commas, literals
        if m.group(1) is not None:
            commas += 1
            return m.group(1)
        if m.group(2) is not None:
            literals += 1
            return b"null"
        return m.group(0)

    repaired = _LENIENT.sub(fix, bytes(data))
    if not commas and not literals:
        return None, []
    out = []
    if commas:
        out.append(f"{commas:,} trailing comma(s) before a closing bracket (not JSON) were read as absent")
    if literals:
        out.append(f"{literals:,} NaN / Infinity literal(s) (not JSON; Python's json writes them) were read as null: unknown")
    return repaired, out
