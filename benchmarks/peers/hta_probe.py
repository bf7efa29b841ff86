"""Run HolisticTraceAnalysis on the traces of one job and print its figures as JSON.

    /path/to/hta-venv/bin/python benchmarks/peers/hta_probe.py [--whole-trace] RANK=TRACE ...

--whole-trace: HTA's analyzers on every GPU event of the trace. By default HTA keeps only the
kernels whose launch it can correlate with a CPU event before the start of the last
ProfilerStep (Trace._filter_irrelevant_gpu_kernels); this switches that filter off, so that
HTA and tracekit look at the same kernels.

This runs in HTA's own virtual environment (HTA 0.5.0 pins its own pandas), so it imports
nothing from tracekit. HTA reads a directory of per-rank traces: the traces are linked into a
temporary directory outside the repository. Times are HTA's, in microseconds.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import tempfile


def _clean(value):
    """Strict JSON: NaN/inf become null; numpy scalars become Python numbers."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _records(frame) -> list[dict]:
    return [{str(k): _clean(v) for k, v in row.items()} for row in frame.to_dict("records")]


def _safe(what: str, errors: dict, fn):
    try:
        return fn()
    except Exception as exc:  # a peer's crash is a finding, not a reason to stop
        errors[what] = f"{type(exc).__name__}: {exc}"[:300]
        return None


def main(argv: list[str]) -> None:
    whole = "--whole-trace" in argv
    pairs = [a.split("=", 1) for a in argv if not a.startswith("--")]
    logging.disable(logging.WARNING)
    from hta.common.trace import Trace
    from hta.trace_analysis import TraceAnalysis

    if whole:
        Trace._filter_irrelevant_gpu_kernels = lambda self, include_last_profiler_step=False: None

    errors: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="hta_probe_") as tmp:
        files = {}
        for rank, path in pairs:
            link = os.path.join(tmp, f"rank{rank}_" + os.path.basename(path))
            os.symlink(os.path.abspath(path), link)
            files[int(rank)] = link
        ta = TraceAnalysis(trace_files=files, trace_dir=tmp, include_last_profiler_step=whole)
        import pandas

        out: dict = {"hta_version": _hta_version(), "pandas_version": pandas.__version__, "whole_trace": whole, "ranks": sorted(files)}
        # What HTA kept after its filter (kernels launched before the last profiler step).
        out["gpu_events"] = {str(r): int((df["stream"] >= 0).sum()) for r, df in ta.t.traces.items()}
        out["non_kernel_gpu_events"] = _non_kernel_gpu_events(ta)
        temporal = _safe("temporal_breakdown", errors, lambda: ta.get_temporal_breakdown(visualize=False))
        out["temporal"] = _records(temporal) if temporal is not None else None
        overlap = _safe("comm_comp_overlap", errors, lambda: ta.get_comm_comp_overlap(visualize=False))
        out["overlap"] = _records(overlap) if overlap is not None else None
        kb = _safe("gpu_kernel_breakdown", errors, lambda: ta.get_gpu_kernel_breakdown(visualize=False, num_kernels=10_000))
        out["kernel_types"] = _records(kb[0]) if kb is not None else None  # summed over ranks
        out["kernel_types_by_rank"] = _safe("kernel_types_by_rank", errors, lambda: _types_by_rank(ta, 1))
        # The same code on timestamps scaled to ns: HTA casts each segment's length to int
        # (whole microseconds), which truncates float (ns-resolution) traces.
        out["kernel_types_by_rank_untruncated"] = _safe("kernel_types_by_rank_untruncated", errors, lambda: _types_by_rank(ta, 1000))
        idle = _safe("idle_time_breakdown", errors,
                     lambda: ta.get_idle_time_breakdown(ranks=sorted(files), visualize=False)[0])
        out["idle_breakdown"] = _records(idle) if idle is not None else None
        out["steps"] = _safe("steps", errors, lambda: _steps(ta))
        if len(files) > 1:  # straggler candidates, top 1..3 (HTA's default metric)
            out["stragglers"] = {str(k): _safe(f"stragglers_{k}", errors, lambda k=k: [int(r) for r in ta.get_potential_stragglers(num_candidates=k)])
                                 for k in (1, 2, 3)}
        out["copy_bytes"] = _safe("copy_bytes", errors, lambda: _copy_bytes(ta))
        out["errors"] = errors
    json.dump(out, sys.stdout)


def _types_by_rank(ta, scale: int) -> dict[str, dict[str, float]]:
    """get_gpu_kernel_breakdown's kernel-type table, one rank at a time (HTA sums the ranks),
    through HTA's own classifier and _get_gpu_kernel_type_time; times in microseconds."""
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis
    from hta.utils.utils import get_kernel_type, KernelType

    names = ta.t.symbol_table.get_sym_table()
    kinds = [KernelType.COMPUTATION.name, KernelType.COMMUNICATION.name, KernelType.MEMORY.name]
    out = {}
    for rank, df in ta.t.traces.items():
        gpu = df[df["stream"].ne(-1)].copy()
        gpu["kernel_type"] = [get_kernel_type(names[n]) for n in gpu["name"]]
        gpu["ts"] = gpu["ts"] * scale
        gpu["dur"] = gpu["dur"] * scale
        table = BreakdownAnalysis._get_gpu_kernel_type_time(gpu, kinds)
        out[str(rank)] = {r["kernel_type"]: float(r["sum"]) / scale for r in table.to_dict("records")}
    return out


def _non_kernel_gpu_events(ta) -> dict[str, list[str]]:
    """Events HTA takes for GPU work (stream >= 0) whose category is not a GPU activity."""
    names = ta.t.symbol_table.get_sym_table()
    out = {}
    for rank, df in ta.t.traces.items():
        gpu = df[df["stream"].ge(0)]
        cats = [names[c] for c in gpu["cat"]]
        odd = [f"{names[n]} ({c})" for n, c in zip(gpu["name"], cats) if c not in ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")]
        if odd:
            out[str(rank)] = odd[:5]
    return out


def _steps(ta) -> dict[str, list[dict]]:
    """Per rank and ProfilerStep: the GPU events HTA gives that iteration (the step whose
    window holds the launching CPU event, on any thread), their summed and merged time (us)."""
    from hta.utils.utils import merge_kernel_intervals

    out = {}
    for rank, df in ta.t.traces.items():
        gpu = df[df["stream"].ge(0) & df["iteration"].ge(0)] if "iteration" in df.columns else df.iloc[0:0]
        rows = []
        for it, g in gpu.groupby("iteration"):
            merged = merge_kernel_intervals(g[["ts", "dur"]].copy())
            rows.append({"iteration": int(it), "events": int(len(g)), "kernel_time_us": float(g["dur"].sum()),
                         "busy_us": float((merged["end"] - merged["ts"]).sum())})
        out[str(rank)] = rows
    return out


def _copy_bytes(ta) -> dict[str, dict[str, float]]:
    """Per rank: the bytes HTA read for memcpy and memset events (its 'bytes' column)."""
    names = ta.t.symbol_table.get_sym_table()
    out = {}
    for rank, df in ta.t.traces.items():
        gpu = df[df["stream"].ge(0)]
        cats = gpu["cat"].map(lambda c: names[c])
        out[str(rank)] = {c: float(gpu.loc[cats == c, "bytes"].clip(lower=0).sum()) for c in ("gpu_memcpy", "gpu_memset", "Memcpy", "Memset")
                          if (cats == c).any()}
    return out


def _hta_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("HolisticTraceAnalysis")
    except Exception:
        return None


if __name__ == "__main__":
    main(sys.argv[1:])
