"""The stage table: per stage, its kernels, busy time, wall time and share of the window
(the steps' GPU windows, else the GPU-active window); for a trace without GPU work, the host
time each phase rule claims, and what no rule claims by the user's functions or the
pipeline's structure (tracekit.structure.stage_segments)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analysis.stage_walls import add_runs, length, runs
from tracekit.trace.column_text import as_text
from tracekit.trace.timeline import difference, intersection, union

STAGE_COLUMNS = ["stage", "kernels", "busy_ns", "wall_ns", "wall_share", "runs", "wall_per_run_ns"]


def stage_table(kernels: pd.DataFrame, stage: str = "phase", windows: np.ndarray | None = None) -> pd.DataFrame:
    """Per stage: kernels, busy time, wall time (runs of consecutive kernels), share of the
    steps' GPU windows (`windows`: (n, 2) start, end of each step; kernels need a `step`
    column, the owning step) or, without steps, of the GPU-active window."""
    if not len(kernels):
        return pd.DataFrame(columns=STAGE_COLUMNS)
    in_steps = windows is not None and len(windows) > 0 and "step" in kernels
    if in_steps:
        kernels = kernels[kernels["step"].to_numpy() >= 0]
    out: dict[str, dict[str, float]] = {}
    window = 0.0
    steps_window = length(np.asarray(windows, dtype=np.float64)) if in_steps else 0.0  # the same on every device
    for _, k in kernels.groupby("device", sort=False):
        k = k.sort_values("start", kind="stable")
        start, end = k["start"].to_numpy(dtype=np.float64), k["end"].to_numpy(dtype=np.float64)
        window += steps_window if in_steps else float(end.max() - start.min())
        labels = k[stage].astype(object).fillna("unknown").astype(str).to_numpy()
        key = pd.factorize(pd.Series(labels) + "\x00" + k["step"].astype(str).to_numpy())[0] if in_steps else labels
        add_runs(out, labels, start, *runs(start, end, key))
        busy = k.groupby(stage, observed=True, sort=False)["exclusive_ns"].sum()
        for name, value in busy.items():
            out.setdefault(str(name), {"kernels": 0, "busy_ns": 0.0, "wall_ns": 0.0, "runs": 0})["busy_ns"] += float(value)
    return _stage_frame(out, window)


def _stage_frame(out: dict, window: float) -> pd.DataFrame:
    rows = [{"stage": name, **v, "wall_share": v["wall_ns"] / window if window > 0 else None,
             "wall_per_run_ns": v["wall_ns"] / v["runs"] if v["runs"] else None} for name, v in out.items()]
    return pd.DataFrame(rows, columns=STAGE_COLUMNS).sort_values("wall_ns", ascending=False).reset_index(drop=True)


def host_stage_table(trace, windows: np.ndarray, rules=None) -> pd.DataFrame:
    """A trace without GPU work: per stage, the host time inside `windows` (the steps, else the
    capture) that the first phase rule (in order) whose frame, range or op pattern matches a
    frame, range or op open at that instant claims. busy: unknown (no kernels)."""
    if trace is None or not len(windows):
        return pd.DataFrame(columns=STAGE_COLUMNS)
    from tracekit.attribution import default_rules

    rules = rules or default_rules()
    r, o = trace.ranges, trace.ops
    domain = np.array(as_text(r["domain"]), dtype=object) if len(r) else np.zeros(0, dtype=object)
    tables = {"frame": (r, domain == "python"), "range": (r, (domain != "python") & (domain != "gpu")),
              "op": (o, np.ones(len(o), dtype=bool))}
    # each distinct name searched once per pattern: (codes per row, distinct names)
    names = {"range": pd.factorize(pd.Series(as_text(r["name"]) if len(r) else [], dtype=object)),
             "op": pd.factorize(pd.Series(as_text(o["name"]) if len(o) else [], dtype=object))}
    names["frame"] = names["range"]
    windows = union(np.asarray(windows, dtype=np.float64))
    claimed = np.zeros((0, 2))
    out: dict[str, dict[str, float]] = {}
    for rule in rules.phase:
        spans = []
        for field, pattern in rule.patterns.items():
            if field not in tables:
                continue
            table, rows = tables[field]
            codes, distinct = names[field]
            hit = rows & np.array([bool(pattern.search(str(n)[:1024])) for n in distinct], dtype=bool)[codes] if len(table) else rows
            if hit.any():
                spans.append(np.c_[table["start"].to_numpy()[hit], table["end"].to_numpy()[hit]].astype(np.float64))
        if not spans:
            continue
        mine = difference(intersection(np.concatenate(spans), windows), claimed)
        if not len(mine):
            continue
        claimed = union(np.concatenate([claimed, mine]))
        row = out.setdefault(rule.label, {"kernels": 0, "busy_ns": float("nan"), "wall_ns": 0.0, "runs": 0})
        row["wall_ns"] += float((mine[:, 1] - mine[:, 0]).sum())
        row["runs"] += len(mine)
    # what no rule names: the user's functions, else the pipeline's structure (an encoder before
    # a decode loop whose steps a rule names, a VAE after the denoise steps)
    from tracekit.structure.stage_segments import HostStages

    found = HostStages(trace)
    for lo, hi in windows:
        spans: dict[str, list] = {}
        for name, a, b in found.segments(lo, hi):
            spans.setdefault(name, []).append((a, b))
        for name, pieces in spans.items():
            # a piece a rule already named (the decode steps of the loop's body) is that rule's
            kept = []
            for piece in np.array(pieces, dtype=np.float64):
                free = difference(piece[None, :], claimed) if len(claimed) else piece[None, :]
                if len(free) and length(free) >= 0.5 * (piece[1] - piece[0]):
                    kept.append(free)
            if not kept:
                continue
            free = np.concatenate(kept)
            row = out.setdefault(name, {"kernels": 0, "busy_ns": float("nan"), "wall_ns": 0.0, "runs": 0})
            row["wall_ns"] += length(free)
            row["runs"] += len(pieces)
    return _stage_frame(out, length(windows))
