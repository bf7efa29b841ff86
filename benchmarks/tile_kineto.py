"""Build a large Kineto trace by tiling a real one: copies shifted in time, ids renumbered.

    python benchmarks/tile_kineto.py SOURCE.json.gz OUT.json --min-bytes 1.1e9 [--gzip]

Each copy's timestamps move past the end of the previous copy, and every id that links
events (correlation, External id, flow ids, Python ids) is offset so copies never collide:
the result is what one long profiling run of the same workload would produce.
"""

from __future__ import annotations

import argparse
import gzip
import os

import msgspec

_ID_ARGS = ("correlation", "External id", "external id", "Python id", "Python parent id", "Record function id", "Ev Idx")


def tile(source: str, out: str, min_bytes: float, compress: bool, nearest: bool = False) -> int:
    """Write copies until `min_bytes` of events are written; with `nearest`, stop at the copy
    count whose size is closest to `min_bytes` (one copy at least)."""
    with gzip.open(source, "rb") if source.endswith(".gz") else open(source, "rb") as f:
        doc = msgspec.json.decode(f.read())
    events = doc.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in timed)
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - t0
    id_span = 1 + max(
        [int(e["args"][k]) for e in events for k in _ID_ARGS if isinstance(e.get("args"), dict) and isinstance(e["args"].get(k), int)]
        + [int(e["id"]) for e in events if isinstance(e.get("id"), int)]
    )
    header = msgspec.json.encode(doc)[:-1]  # the document without its closing brace
    opener = gzip.open if compress else open
    written = 0
    copies = 0
    with opener(out, "wb") as f:
        f.write(header + b', "traceEvents": [\n')
        while written < min_bytes:
            shift_t, shift_id = copies * span * 1.01, copies * id_span
            chunk = []
            for e in events:
                e = dict(e)
                if isinstance(e.get("ts"), (int, float)):
                    e["ts"] = e["ts"] + shift_t
                if isinstance(e.get("id"), int):
                    e["id"] = e["id"] + shift_id
                args = e.get("args")
                if isinstance(args, dict):
                    args = dict(args)
                    for k in _ID_ARGS:
                        if isinstance(args.get(k), int) and args[k] >= 0:
                            args[k] += shift_id
                    e["args"] = args
                chunk.append(e)
            body = b",\n".join(msgspec.json.encode(e) for e in chunk)
            if nearest and copies and written + len(body) / 2 > min_bytes:
                break
            if copies:
                f.write(b",\n")
            f.write(body)
            written += len(body)
            copies += 1
        f.write(b"\n]}\n")
    return copies


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source")
    parser.add_argument("out")
    parser.add_argument("--min-bytes", type=float, default=1.1e9)
    parser.add_argument("--gzip", action="store_true")
    parser.add_argument("--nearest", action="store_true", help="the copy count closest to --min-bytes, not the first above it")
    args = parser.parse_args()
    n = tile(args.source, args.out, args.min_bytes, args.gzip, args.nearest)
    print(f"{args.out}: {n} copies, {os.path.getsize(args.out):,} bytes on disk")
