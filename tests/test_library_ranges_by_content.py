"""A library's ranges are never steps, by what they hold and not by their name (issue 46, form 6).

The form: an Nsight Systems export whose NCCL ranges carry a domain id with no domain-create
row, so the parser sees them in the default `nvtx` domain, and the name `NCCL` is nowhere. It is
made from a copy of the shared 2-GPU FSDP export (which has no NCCL range of its own): around
17 kernel launches of each thread, the four ranges NCCL writes for one collective
(`ncclCommCount`, `ncclGroupStart`, `ncclAllReduce`, each holding no launch, then `ncclGroupEnd`
holding the collective's one launch). Before the content test these formed a cycle of 17 steps
`ncclCommCount..ncclGroupEnd#i`; the same ranges named `r0..r3` did too.
"""

from __future__ import annotations

import pathlib
import shutil
import sqlite3

import pytest

import tracekit
from synthetic import KinetoBuilder
from tracekit.structure.library_ranges import one_call_ranges
from tracekit.structure.steps import STEP_SOURCES, find_steps, library_note

FSDP = pathlib.Path(__file__).resolve().parents[2] / "shared/fixtures/nsys/h100x2_fsdp_emit_nvtx_nsys2026.2.sqlite"
NCCL_NAMES = ("ncclCommCount", "ncclGroupStart", "ncclAllReduce", "ncclGroupEnd")
PER_THREAD = 17


def _launches(db: sqlite3.Connection) -> dict[int, list[tuple[int, int]]]:
    rows = db.execute("SELECT r.globalTid, r.start, r.end FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON r.nameId = s.id "
                      "WHERE s.value LIKE 'cudaLaunchKernel%' ORDER BY r.start").fetchall()
    out: dict[int, list[tuple[int, int]]] = {}
    for tid, start, end in rows:
        out.setdefault(tid, []).append((start, end))
    return out


def _export_with_ranges(tmp_path, names=NCCL_NAMES, domain=7, outer=None) -> str:
    """A copy of the FSDP export with a collective's ranges (`names`, domain id `domain`, no
    domain-create row) around PER_THREAD launches of each thread; `outer`: also 4 ranges of that
    name on the first thread, each over a quarter of its launches (the user's iterations)."""
    path = tmp_path / "fsdp_library_ranges.sqlite"
    shutil.copyfile(FSDP, path)
    db = sqlite3.connect(path)
    rows = []
    launches = _launches(db)
    for tid, calls in launches.items():
        every = len(calls) // PER_THREAD
        for j in range(PER_THREAD):
            start, end = calls[j * every + every // 2]
            t = start - 4 * len(names)
            for name in names[:-1]:  # no launch inside
                rows.append((t, t + 3, 59, name, tid, domain))
                t += 4
            rows.append((start - 1, end + 1, 59, names[-1], tid, domain))  # the collective's one launch
    if outer:
        tid, calls = next(iter(launches.items()))
        quarter = len(calls) // 4
        for j in range(4):
            rows.append((calls[j * quarter][0] - 10, calls[(j + 1) * quarter - 1][1] + 10, 59, outer, tid, 0))
    db.executemany("INSERT INTO NVTX_EVENTS(start, end, eventType, text, globalTid, domainId) VALUES (?, ?, ?, ?, ?, ?)", rows)
    db.commit()
    db.close()
    return str(path)


needs_fsdp = pytest.mark.skipif(not FSDP.exists(), reason="the shared FSDP export is not here")


@needs_fsdp
@pytest.mark.parametrize("names", [NCCL_NAMES, ("r0", "r1", "r2", "r3")], ids=["nccl-names", "anonymous"])
def test_a_collectives_ranges_without_their_domain_are_never_steps(tmp_path, names):
    trace = tracekit.load(_export_with_ranges(tmp_path, names))
    assert set(trace.ranges["domain"].astype(str)) == {"nvtx"}  # no domain-create row: the domain is not named
    flagged = one_call_ranges(trace)
    assert int(flagged.sum()) == len(trace.ranges) == 2 * PER_THREAD * len(names)
    windows, source = find_steps(trace)
    assert source != STEP_SOURCES[4] and not any(w[0].startswith(names[0]) for w in windows)
    assert windows == []  # nothing else in the export repeats as whole forwards (no shapes, no steps)
    note = library_note(trace)
    assert note and f"{2 * PER_THREAD * len(names)} range(s)" in note[0]


@needs_fsdp
def test_the_users_iterations_around_them_are_still_steps(tmp_path):
    """The content test keeps a range that holds a quarter of the thread's launches."""
    trace = tracekit.load(_export_with_ranges(tmp_path, outer="train_iteration"))
    names = trace.ranges["name"].astype(str).to_numpy()
    flagged = one_call_ranges(trace)
    assert not flagged[names == "train_iteration"].any() and flagged[names != "train_iteration"].all()
    windows, source = find_steps(trace)
    assert source == STEP_SOURCES[4] and [w[0] for w in windows] == [f"train_iteration#{j}" for j in range(4)]


def _cpu_loop(path, sync_holds_linears: bool) -> str:
    """A CPU trace (no launches): 3 iterations of 4 linears then a `sync` range. The range holds
    one `c10d::allreduce_` op, or (the control) the iteration's linears."""
    b, t = KinetoBuilder(), 0.0
    for _ in range(3):
        first = t
        for _ in range(4):
            b.op("aten::linear", t, 5.0, dims=[[8, 64], [64, 64], [64]], types=["float", "float", "float"])
            t += 6.0
        if sync_holds_linears:
            b.range("sync", first - 0.5, t - first + 0.2)
        b.op("c10d::allreduce_", t, 3.0, dims=[[8, 64]], types=["float"])
        if not sync_holds_linears:
            b.range("sync", t - 0.5, 4.0)
        t += 5.0
    return b.write(path)


@pytest.mark.parametrize("holds_linears", [False, True], ids=["one-op", "holds-weight-reads"])
def test_on_a_cpu_trace_a_range_of_one_op_is_a_librarys(tmp_path, holds_linears):
    trace = tracekit.load(_cpu_loop(tmp_path / "cpu_loop.json", holds_linears))
    flagged = one_call_ranges(trace)
    assert len(flagged) == 3
    assert bool(flagged.all()) is (not holds_linears)
