"""A Nsight Compute CSV of the user's own run: DRAM bytes and time per kernel.

    ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \\
        --csv --page raw --print-units base [--profile-from-start off] python run.py > NCU.csv

One row per profiled kernel launch, in launch order. ncu writes its own log lines (==PROF==,
the program's output) into the same stream: only quoted CSV lines are read. Numbers may
carry thousands separators ("4,210,176"); the units row after the header is dropped.
Anything else is a bad file: one TraceError naming it and what is wrong.
"""

from __future__ import annotations

import csv
import io
import os

import pandas as pd

from tracekit.errors import TraceError

METRICS = {"read": "dram__bytes_read.sum", "written": "dram__bytes_write.sum", "time_ns": "gpu__time_duration.sum"}
MAX_BYTES = 1 << 30  # a CSV of a few hundred thousand kernels is far below this


def read_ncu(path: str | os.PathLike) -> pd.DataFrame:
    """name, grid, read, written, time_ns per profiled kernel, in launch order."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise TraceError(path, f"cannot read the Nsight Compute CSV ({exc.strerror or exc})") from None
    if len(data) > MAX_BYTES:
        raise TraceError(path, "the Nsight Compute CSV is larger than 1 GiB")
    text = data.decode("utf-8", errors="replace")
    lines = [line for line in text.splitlines(keepends=True) if line.startswith('"')]
    try:
        reader = csv.DictReader(io.StringIO("".join(lines)))
        columns, rows = reader.fieldnames or [], list(reader)
    except csv.Error as exc:
        raise TraceError(path, f"not a Nsight Compute CSV ({exc})") from None
    if "Kernel Name" not in columns:
        raise TraceError(path, "not a Nsight Compute CSV: no \"Kernel Name\" column (record it with --csv --page raw)")
    missing = [m for m in METRICS.values() if m not in columns]
    if missing:
        raise TraceError(path, f"the Nsight Compute CSV lacks {', '.join(missing)} (record it with --metrics "
                               f"{','.join(METRICS.values())})")
    if not rows:
        raise TraceError(path, "the Nsight Compute CSV holds no kernel")
    table = pd.DataFrame(rows)
    table = table[pd.to_numeric(table.get("ID"), errors="coerce").notna()] if "ID" in table else table.iloc[1:]

    def number(column: str) -> pd.Series:
        return pd.to_numeric(table[column].astype(str).str.replace(",", "", regex=False), errors="coerce")

    out = pd.DataFrame({"name": table["Kernel Name"].astype(str),
                        "grid": table["Grid Size"].astype(str) if "Grid Size" in table else "",
                        **{key: number(column) for key, column in METRICS.items()}}).reset_index(drop=True)
    if not len(out):
        raise TraceError(path, "the Nsight Compute CSV holds no kernel")
    bad = out[["read", "written", "time_ns"]].isna().all(axis=1) | (out[["read", "written", "time_ns"]] < 0).any(axis=1)
    if bad.all():
        raise TraceError(path, "the Nsight Compute CSV holds no readable counter value")
    return out[~bad].reset_index(drop=True)
