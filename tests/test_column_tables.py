"""The Kineto parser's numpy column tables (tracekit/tables.py) and the pandas-free `info`.

The column tables are what `tracekit info` reads; the DataFrames of `tracekit.load` are
built from them after linking. Both forms must say the same thing about every trace, and
`info` must not pay for importing pandas.
"""

from __future__ import annotations

import gzip
import json
import pathlib
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import tracekit
from tracekit.api import scan
from tracekit.trace.inventory import inventory
from tracekit.trace.frames import to_trace
from tracekit.trace.tables import Coded, ColumnTrace, Interner

from conftest import sweep

SHARED = pathlib.Path(__file__).resolve().parents[2] / "shared" / "fixtures"
KINETO = sorted((SHARED / "torch").glob("*.json.gz"))
NSYS = sorted((SHARED / "nsys").glob("*.sqlite"))


@pytest.mark.parametrize("path", sweep(KINETO) + NSYS, ids=lambda p: p.name)
def test_column_tables_are_the_trace(path):
    tables = scan(path)  # both parsers build numpy columns: the Kineto decoder and the Nsight SQLite reader
    assert isinstance(tables, ColumnTrace)
    frames = to_trace(tables)
    loaded = tracekit.load(path)
    for name in ("kernels", "launches", "ops", "ranges"):
        pd.testing.assert_frame_equal(getattr(frames, name), getattr(loaded, name), check_exact=True, obj=name)
    # info from the column tables is info from the DataFrames
    assert inventory(tables, top=20) == inventory(loaded, top=20)


def test_column_inventory_counts_match_the_raw_file():
    path = SHARED / "torch" / "h100_qwen1.5-0.5b_hf_inference.json.gz"
    with gzip.open(path, "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    inv = inventory(scan(path), top=3)
    assert inv["counts"]["kernels"] == len(kernels)
    assert inv["counts"]["ops"] == sum(e.get("cat") == "cpu_op" for e in events)
    # the top kernel's time: the sum of its durations in the file (us -> ns, rounded per event)
    by_name: dict[str, float] = {}
    for e in kernels:
        by_name[e["name"]] = by_name.get(e["name"], 0) + e["dur"] * 1000
    name, total = max(by_name.items(), key=lambda kv: kv[1])
    assert inv["top_kernels"][0]["name"] == name
    assert abs(inv["top_kernels"][0]["time_ns"] - total) <= sum(e["name"] == name for e in kernels)


def test_info_does_not_import_pandas(tmp_path):
    path = SHARED / "torch" / "h100_qwen1.5-0.5b_hf_inference.json.gz"
    code = ("import sys\nfrom tracekit.cli import main\ntry:\n    main(['info', sys.argv[1]])\nexcept SystemExit:\n    pass\n"
            "print('PANDAS' if 'pandas' in sys.modules else 'NO PANDAS', file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert "top kernels" in result.stdout.lower() or "kernels" in result.stdout
    assert result.stderr.strip().splitlines()[-1] == "NO PANDAS"


def test_info_does_not_import_the_worker_pool_or_other_commands():
    """A trace under kineto_parallel.MIN_PARALLEL_BYTES (16 MB) is read in one process: the
    pool's modules are not imported, nor are the modules of the commands that did not run."""
    path = SHARED / "torch" / "h100_bert_small_hf_inference.json.gz"  # 1.1 MB of JSON
    code = ("import sys\nfrom tracekit.cli import main\ntry:\n    main(['info', '--format', 'json', sys.argv[1]])\nexcept SystemExit:\n"
            "    pass\nprint(sorted(m for m in ('multiprocessing', 'concurrent.futures', 'tracekit.cli.analyze', 'tracekit.cli.compare',"
            " 'tracekit.cli.calibrate', 'tracekit.cli.project', 'tracekit.cli.trace') if m in sys.modules), file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert '"kernels"' in result.stdout or "kernels" in result.stdout
    assert result.stderr.strip().splitlines()[-1] == "['tracekit.cli.trace']"


def test_interner_codes_in_order_of_first_sight_with_none_missing():
    interner = Interner()
    assert interner.codes(["b", None, "a", "b"]).tolist() == [0, -1, 1, 0]
    assert interner.codes([None, None]).tolist() == [-1, -1]
    assert interner.codes(["c", "a"]).tolist() == [2, 1]
    assert interner.values == ["b", "a", "c"]


def test_coded_without_unused_keeps_label_order():
    coded = Coded(np.array([2, -1, 2, 0], dtype=np.int32), ["x", "y", "z"])
    kept = coded.without_unused()
    assert kept.labels == ["x", "z"]
    assert kept.codes.tolist() == [1, -1, 1, 0]
    assert coded.where(lambda label: label in ("y", "z")).tolist() == [True, False, True, False]


def test_joint_keys_are_equal_exactly_where_the_rows_are():
    """Linking joins (pid, correlation) and (pid, tid) pairs through one int64 key per row.
    Five columns of 2^15 distinct values each force the key's re-ranking (2^75 combinations)."""
    from tracekit.trace.link import _joint_keys

    rng = np.random.default_rng(7)
    n = 1 << 16
    columns = [rng.permutation(n).astype(np.int64) * (2**47) - 2**62 for _ in range(5)]  # near the int64 bounds
    for c in columns:
        c[: n // 2] = c[n // 2:]  # equal rows across the two sides
    left, right = _joint_keys(tuple(c[: n // 2] for c in columns), tuple(c[n // 2:] for c in columns))
    assert (left == right).all()  # the same tuples, the same keys
    keys = np.concatenate((left, right))
    rows = list(zip(*(c.tolist() for c in columns)))
    assert len(set(keys.tolist())) == len(set(rows))  # different tuples never share a key
