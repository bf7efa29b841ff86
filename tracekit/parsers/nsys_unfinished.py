"""An Nsight Systems export whose writer has not finished: refused before it is read.

Exports are opened read-only and immutable (never written beside), so SQLite neither
replays a write-ahead log nor rolls a hot journal back: what either holds would be read
wrongly (stale rows, or half-written pages as if committed). Both are one line, exit 2.
"""

from __future__ import annotations

import os

from tracekit.errors import TraceError


def refuse_unfinished(path: str) -> None:
    _refuse_wal(path)
    _refuse_hot_journal(path)


def _refuse_wal(path: str) -> None:
    """A non-empty write-ahead log beside the file holds rows the file does not: nsys is
    still writing the export (or died writing it). Reading it immutable would silently
    report stale rows, and reading the log would mean writing beside the input."""
    wal = f"{path}-wal"
    try:
        size = os.path.getsize(wal)
    except OSError:
        return
    if size > 0:
        raise TraceError(path, f"a write-ahead log ({os.path.basename(wal)}, {size:,} bytes) lies beside it: the export is "
                               "still being written, or was cut off; wait for nsys to finish (or open it once with sqlite3 to checkpoint it)")


def _refuse_hot_journal(path: str) -> None:
    """A rollback journal beside the file whose header is live (SQLite's journal magic: a
    transaction began and never ended) means the file holds half-written pages: its writer
    died mid-transaction. Opened immutable, SQLite would read them as if committed; rolling
    back would write beside the input. A journal with a zeroed header (persist mode, done) is cold."""
    journal = f"{path}-journal"
    try:
        with open(journal, "rb") as f:
            head = f.read(8)
    except OSError:
        return
    if head == JOURNAL_MAGIC:
        raise TraceError(path, f"a hot rollback journal ({os.path.basename(journal)}) lies beside it: its writer stopped in the "
                               "middle of a transaction, so the file holds uncommitted rows; open it once with sqlite3 (which "
                               "rolls the transaction back), or export it again")


JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")  # the first 8 bytes of a live rollback journal (sqlite's pager.c)
