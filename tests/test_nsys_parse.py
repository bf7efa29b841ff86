"""Nsight Systems exports: the same Trace tables as Kineto, checked against direct SQL."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3

import numpy as np
import pytest

import tracekit
from conftest import SHARED, shared, range_stack
from helpers import run_cli
from tracekit.parsers.nsys_nvtx import parse_op_text

NSYS = sorted((SHARED / "nsys").glob("*.sqlite"))


def sql(path, query):
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.text_factory = lambda b: b.decode("utf-8", "replace")
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()


def has_table(path, table):
    return bool(sql(path, f"SELECT 1 FROM sqlite_master WHERE name = '{table}'"))


def test_all_five_nsys_versions_are_here():
    assert len(NSYS) == 5


@pytest.mark.parametrize("path", NSYS, ids=lambda p: p.name)
def test_counts_match_the_export(path, load_cached):
    trace = load_cached(path)
    k = trace.kernels

    def count(table, where=""):
        return sql(path, f"SELECT count(*) FROM {table} {where}")[0][0] if has_table(path, table) else 0

    assert int((k["kind"] == "kernel").sum()) == count("CUPTI_ACTIVITY_KIND_KERNEL")
    assert int((k["kind"] == "memcpy").sum()) == count("CUPTI_ACTIVITY_KIND_MEMCPY")
    assert int((k["kind"] == "memset").sum()) == count("CUPTI_ACTIVITY_KIND_MEMSET")
    nvtx_ranges = count("NVTX_EVENTS", "WHERE eventType IN (59, 60)")
    assert len(trace.ranges) + len(trace.ops) == nvtx_ranges
    # GPU time survives the move to a zero-based clock.
    total = sum(
        sql(path, f"SELECT coalesce(sum(end - start), 0) FROM {t}")[0][0]
        for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
        if has_table(path, t)
    )
    assert int((k["end"] - k["start"]).sum()) == total
    assert k["start"].min() >= 0
    # Linked to a launch exactly when a runtime/driver row of the same process has its id.
    linked = sql(
        path,
        f"""SELECT count(*) FROM (
              SELECT correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL
              {"UNION ALL SELECT correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_MEMCPY" if has_table(path, "CUPTI_ACTIVITY_KIND_MEMCPY") else ""}
              {"UNION ALL SELECT correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_MEMSET" if has_table(path, "CUPTI_ACTIVITY_KIND_MEMSET") else ""}
            ) g WHERE EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.correlationId = g.correlationId
                              AND (r.globalTid >> 24) = (g.globalPid >> 24) AND r.eventClass IN (0, 1))""",
    )[0][0]
    assert int((k["launch"] >= 0).sum()) == linked
    assert trace.meta["tool_versions"]["nsys"].startswith(path.stem.split("nsys")[-1][:6])


def test_fsdp_two_processes_join_within_their_process(load_cached):
    path = shared("nsys", "h100x2_fsdp_emit_nvtx_nsys2026.2.sqlite")
    trace = load_cached(path)
    k, launches = trace.kernels, trace.launches
    assert sorted(k["device"].unique()) == [0, 1]
    assert k["pid"].nunique() == 2
    linked = k[k["launch"] >= 0]
    # Each linked activity's launch is in its own process and carries its correlation id.
    assert (launches["pid"].to_numpy()[linked["launch"]] == linked["pid"].to_numpy()).all()
    assert (launches["correlation"].to_numpy()[linked["launch"]] == linked["correlation"].to_numpy()).all()
    # ...and no launch row serves two activities (no graph launches in this export).
    assert linked["launch"].is_unique
    assert int((k["kind"] == "kernel").sum()) == 3442
    # emit_nvtx ranges are ops (no shapes recorded here): an aten op launched the copies.
    assert len(trace.ops) == 16782 and len(trace.ranges) == 0
    op_names = trace.ops["name"].to_numpy()
    linked_ops = set(op_names[linked["op"][linked["op"] >= 0]])
    assert "aten::copy_" in linked_ops
    assert trace.meta["devices"] == []
    assert any("no TARGET_INFO_GPU" in w for w in trace.warnings)


def test_saxpy_kernels_sit_in_their_nvtx_range_and_mpi_domain_is_named(load_cached):
    trace = load_cached(shared("nsys", "a100_saxpy_mpi_nsys2022.2.sqlite"))
    k = trace.kernels
    saxpy = k[k["kind"] == "kernel"]
    assert len(saxpy) == 5
    assert set(saxpy["short_name"]) == {"saxpy"}
    assert str(saxpy["name"].iat[0]) == "saxpy(double *, double *, double *, double, int)"
    for row in saxpy.index:
        assert range_stack(trace, row) == ["saxpy"]
    r = trace.ranges
    assert set(r.loc[r["name"].isin(["MPI_Send", "MPI_Recv", "MPI_Init", "MPI_Finalize"]), "domain"]) == {"nvtx:MPI"}
    assert (r.loc[r["name"] == "saxpy", "domain"] == "nvtx").all()
    copies = k[k["kind"] == "memcpy"]
    assert sorted(copies["copy_kind"].value_counts().items()) == [("DtoH", 5), ("HtoD", 10)]
    assert int(copies["bytes"].sum()) == 2621440000 + 1310720000
    dev = trace.meta["devices"][0]
    assert dev["name"] == "NVIDIA A100-SXM4-40GB" and dev["memory_bandwidth"] == 1555200000000 and dev["sm_count"] == 108
    # eventClass 67 backtrace rows repeat correlation ids; they are not launches.
    assert int((k["launch"] >= 0).sum()) == 20 and trace.launches["correlation"].is_unique


def test_lazy_export_without_nvtx_table(load_cached):
    trace = load_cached(shared("nsys", "a100x4_cloverleaf_nsys2024.5.sqlite"))
    assert not has_table(shared("nsys", "a100x4_cloverleaf_nsys2024.5.sqlite"), "NVTX_EVENTS")
    assert len(trace.ranges) == 0 and int((trace.kernels["kind"] == "kernel").sum()) == 1312
    assert [d["name"] for d in trace.meta["devices"]] == ["NVIDIA A100-SXM4-80GB"] * 4
    assert set(trace.kernels["device"]) == {0}


def test_emit_nvtx_op_texts():
    assert parse_op_text("aten::mm, seq = 12, op_id = 3, sizes = [[64, 128], [128, 32]], input_op_ids = [(1,0), (2,0)]") == (
        "aten::mm", 12, [[64, 128], [128, 32]]
    )
    assert parse_op_text("aten::view, op_id = 314290") == ("aten::view", -1, None)
    assert parse_op_text("aten::addmm, seq = 7, op_id = 9, sizes = [[32], [8, 16], [16, 32], [], []]") == (
        "aten::addmm", 7, [[32], [8, 16], [16, 32], [], []]
    )
    assert parse_op_text("autograd::engine::evaluate_function: MmBackward0, op_id = 5") == (
        "autograd::engine::evaluate_function: MmBackward0", -1, None
    )
    assert parse_op_text("saxpy") is None
    assert parse_op_text("MPI_Send") is None


def test_export_is_never_written_or_left_locked(tmp_path):
    src = shared("nsys", "rtx3080_tiny_nsys2026.1.sqlite")
    path = tmp_path / "copy.sqlite"
    shutil.copy(src, path)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    trace = tracekit.load(path)
    assert int((trace.kernels["kind"] == "kernel").sum()) == 2
    assert trace.meta["devices"][0]["name"] == "NVIDIA GeForce RTX 3080"
    conn = sqlite3.connect(path)
    conn.execute("BEGIN EXCLUSIVE")  # would raise "database is locked" if tracekit held it
    conn.rollback()
    conn.close()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert not (tmp_path / "copy.sqlite-journal").exists() and not (tmp_path / "copy.sqlite-wal").exists()


def test_non_utf8_strings_are_replaced_not_fatal():
    proc = run_cli("info", "--format", "json", str(shared("bad", "gtx1060_non_utf8_strings.sqlite")))
    assert proc.returncode == 0
    assert "not UTF-8" in proc.stderr


@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda p: p.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100), "not a readable SQLite database"),
        (lambda p: shutil.copy(shared("bad", "sqlite_not_nsys.sqlite"), p), "StringIds, CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_KERNEL are missing"),
    ],
    ids=["corrupt", "not-nsys"],
)
def test_bad_sqlite(tmp_path, make, fragment):
    path = tmp_path / "x.sqlite"
    make(path)
    proc = run_cli("info", str(path))
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert fragment in proc.stderr and str(path) in proc.stderr


def test_export_without_kernel_table(tmp_path):
    path = tmp_path / "nokernels.sqlite"
    shutil.copy(shared("nsys", "rtx3080_tiny_nsys2026.1.sqlite"), path)
    path.chmod(0o644)
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    conn.commit()
    conn.close()
    proc = run_cli("info", str(path))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "without a CUPTI_ACTIVITY_KIND_KERNEL table" in proc.stderr
