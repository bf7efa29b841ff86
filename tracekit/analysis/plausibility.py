"""The last stage of build: every ratio the report states, held against its physical limit.

A share of a step or of the span above 100%, a rate above the device's peak, a link
efficiency above 100% or a negative time cannot be a measurement. Where build can fix the
cause it does (steps are measured on the GPU, overlap goes to compute); what is left is a
figure that is printed flagged, with its reason, and listed in the analysis' warnings and
in summary.json `flags`. Kernels above their roofline (a Winograd convolution does fewer
multiplications than the direct formula counts; data re-read from L2) stay as measured,
flagged: clipping them would hide the model error.

Limits, each a constant below: rates and roofline efficiencies may exceed 100% by
RATE_SLACK (roofline.OVER_PEAK: timestamps rounded to the microsecond, clocks above the
datasheet's), and a flag names that limit, 105%, not 100%, with the tolerance and the
activities between 100% and it (counted, not flagged); shares and link efficiency by
SHARE_SLACK (float sums).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracekit.hardware import Device
from tracekit.analysis.roofline import OVER_PEAK

RATE_SLACK = OVER_PEAK  # the roofline's own threshold
TOLERANCE = (f"100% plus {RATE_SLACK - 1:.0%} for timestamps rounded to the microsecond and clocks above the "
             "datasheet's")
SHARE_SLACK = 1.0 + 1e-6
MAX_EXAMPLES = 3  # named per warning line; every flag is in `flags`


@dataclass(frozen=True)
class Flag:
    table: str  # the Analysis table (steps, blocks, ops, kernels, collectives, devices, what_to_fix_first.*)
    row: int  # its row (position in that table)
    where: str  # the row's name as the report prints it
    figure: str  # the column
    value: float
    limit: float
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check(*, device: Device | None, steps: pd.DataFrame, blocks: pd.DataFrame, ops: pd.DataFrame, kernel_summary: pd.DataFrame,
          copy_summary: pd.DataFrame, kernels: pd.DataFrame,
          collective_summary: pd.DataFrame, devices: pd.DataFrame, overlap: pd.DataFrame, fix_tables: dict[str, pd.DataFrame],
          coverage: dict[str, Any], causes: list[dict[str, Any]], idle: pd.DataFrame) -> list[Flag]:
    flags: list[Flag] = []
    flags += _steps(steps, devices)
    flags += _shares("blocks", blocks, "share", lambda r: f"{r['phase']} / {r['block']}", total=True)
    flags += _above_roofline("blocks", blocks, lambda r: f"{r['phase']} / {r['block']}", device)
    flags += _above_roofline("ops", ops, lambda r: f"{r['op']} {r['shapes']}".strip(), device)
    flags += _above_roofline("kernels", kernel_summary, lambda r: str(r["name"]), device)
    flags += _above_roofline("copies", copy_summary, lambda r: str(r["name"]), device)
    flags += _activities(kernels, device)
    flags += _links(collective_summary)
    flags += _devices(devices)
    flags += _overlap(overlap)
    for name, table in fix_tables.items():
        flags += _shares(f"what_to_fix_first.{name}", table, "cumulative_share", lambda r: f"{r['what']} {r['detail']}".strip())
    flags += _shares("what_to_fix_first.causes", pd.DataFrame(causes), "share", lambda r: str(r["cause"]))
    if idle is not None and len(idle) and idle["share_of_window"].sum() > SHARE_SLACK:
        flags.append(Flag("what_to_fix_first.idle", -1, "idle gaps", "share_of_window", float(idle["share_of_window"].sum()), 1.0,
                          "more idle time than the window it was counted in"))
    eff = _number(coverage.get("efficiency"))  # the headline's: sum t_min / sum time of the costed kernels
    if eff is not None and eff > RATE_SLACK:
        flags.append(Flag("coverage", 0, "the kernel time with a cost", "efficiency", eff, RATE_SLACK, _above_reason({})))
    share = coverage.get("modeled_share")
    if share is not None and share > SHARE_SLACK:
        flags.append(Flag("coverage", 0, "capture", "modeled_share", float(share), 1.0, "costed kernel time exceeds kernel time"))
    flags += _negative_times({"steps": steps, "blocks": blocks, "ops": ops, "kernels": kernel_summary, "devices": devices})
    return flags


def rates(throughput, kernels: pd.DataFrame, device: Device | None, ranges: pd.DataFrame | None = None,
          step_table: pd.DataFrame | None = None):
    """(throughput, flags): each step, and a clip's total, against the device: the work its kernels
    did needs at least max(compute-bound kernels' roofline time, all bytes / bandwidth) (a bound
    that holds however the kernels overlap), per device; a step or clip shorter than that
    implies a rate the device cannot reach (its items are miscounted or its window is not the
    work's), so its throughput is flagged and shown unknown, never printed."""
    from dataclasses import replace

    if throughput is None or device is None or kernels is None or not len(kernels) or "t_min_ns" not in kernels:
        return throughput, []
    devices = max(int(kernels["device"].nunique()), 1)
    out: list[Flag] = []
    steps = throughput.steps
    if len(steps) and "step" in kernels and ranges is not None and len(ranges) and step_table is not None \
            and len(step_table) == len(steps):
        by_step = _needed_by_step(kernels, device, ranges)
        hosts = step_table["host_start_ns"].to_numpy()  # throughput's step rows are the step table's, in order
        steps = steps.copy()
        for i, r in _rows(steps):
            needed = by_step.get((str(r["step"]), int(hosts[i])))
            out += _rate(i, str(r["step"]), r, needed, devices, steps, "throughput_steps")
    total = throughput.total
    if total is not None and out:  # a step too short for its work: the steps' total rate is not a measurement either
        total = {**total, "throughput": None}
    if total is not None and not len(steps):  # a clip: the whole trace's work over its time
        total = dict(total)
        flags = _rate(0, "the clip", total, _needed_ns(kernels, device), devices, None, "throughput_total")
        if flags:
            total["throughput"] = None
        out += flags
    return replace(throughput, steps=steps, total=total), out


def _rate(i: int, where: str, row: dict, needed: float | None, devices: int, table, name: str) -> list[Flag]:
    window = _number(row.get("duration_ns") if "duration_ns" in row else row.get("wall_ns"))
    if not needed or not window or needed <= window * devices * RATE_SLACK:
        return []
    if table is not None:
        table.at[table.index[i], "throughput"] = None
    return [Flag(name, i, where, "throughput", needed / (window * devices), RATE_SLACK,
                 f"({TOLERANCE}) the work inside it (its kernels' FLOPs and bytes) needs more time at the device's peak than the "
                 "window it is measured over: the rate would exceed the hardware, so it is shown unknown")]


def _needed_per_kernel(kernels: pd.DataFrame, device: Device) -> tuple[np.ndarray, np.ndarray]:
    """Per kernel: (roofline time if compute-bound else 0, bytes / bandwidth unless a collective), ns."""
    bound = kernels["bound"].astype(object).to_numpy()
    t_min = np.nan_to_num(kernels["t_min_ns"].to_numpy(dtype=np.float64))
    moved = np.nan_to_num((kernels["bytes_read"] + kernels["bytes_written"]).to_numpy(dtype=np.float64))
    compute = np.where(bound == "compute", t_min, 0.0)
    memory = np.where(bound == "comm", 0.0, moved / device.bandwidth * 1e9) if device.bandwidth else np.zeros(len(kernels))
    return compute, memory


def _needed_ns(kernels: pd.DataFrame, device: Device) -> float:
    compute, memory = _needed_per_kernel(kernels, device)
    return float(max(compute.sum(), memory.sum()))


def _needed_by_step(kernels: pd.DataFrame, device: Device, ranges: pd.DataFrame) -> dict[tuple[str, int], float]:
    """{(step name, host start): needed ns} over the kernels each step owns (`step`: its range's row)."""
    from tracekit.trace.column_text import as_text

    names, starts = as_text(ranges["name"]), ranges["start"].to_numpy()
    owner = kernels["step"].to_numpy()
    mine = owner >= 0
    if not mine.any():
        return {}
    compute, memory = _needed_per_kernel(kernels, device)
    rows, slot = np.unique(owner[mine], return_inverse=True)
    need = np.maximum(np.bincount(slot, weights=compute[mine], minlength=len(rows)),
                      np.bincount(slot, weights=memory[mine], minlength=len(rows)))
    return {(str(names[int(r)]), int(starts[int(r)])): float(n) for r, n in zip(rows, need)}


def warnings(flags: list[Flag]) -> list[str]:
    """One warning line per (table, figure, reason), naming up to MAX_EXAMPLES rows."""
    grouped: dict[tuple[str, str, str], list[Flag]] = {}
    for f in flags:
        grouped.setdefault((f.table, f.figure, f.reason), []).append(f)
    lines = []
    for (table, figure, reason), group in grouped.items():
        shown = ", ".join(f"{_cut(f.where)} ({_value(f.figure, f.value)})" for f in group[:MAX_EXAMPLES])
        more = f" and {len(group) - MAX_EXAMPLES} more" if len(group) > MAX_EXAMPLES else ""
        lines.append(f"implausible {table} {figure} above its limit ({_value(figure, group[0].limit)}) in "
                     f"{len(group)} row{'s' if len(group) > 1 else ''}: {shown}{more}: {reason}")
    return lines


def flagged(flags: list[Flag], table: str) -> dict[tuple[int, str], Flag]:
    """{(row, figure): flag} of one table, for a renderer that marks flagged cells."""
    return {(f.row, f.figure): f for f in flags if f.table == table}


# -- the checks ---------------------------------------------------------------------------

def _rows(table: pd.DataFrame, only: np.ndarray | None = None) -> list[tuple[int, dict]]:
    """(row number, row as a dict) of every row, or of the rows `only` (positions) names:
    a table of 100k kernel names is turned into dicts only where a check may flag."""
    if table is None or not len(table):
        return []
    if only is None:
        return list(enumerate(table.to_dict(orient="records")))
    return list(zip(only.tolist(), table.iloc[only].to_dict(orient="records")))


def _column(table: pd.DataFrame, column: str) -> np.ndarray:
    """A column as floats (NaN where absent or not a number): what _number reads per row."""
    if column not in table:
        return np.full(len(table), np.nan)
    return pd.to_numeric(table[column], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def _number(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if np.isfinite(v) else None


def _steps(steps: pd.DataFrame, devices: pd.DataFrame) -> list[Flag]:
    out = []
    n_devices = max(len(devices), 1) if devices is not None else 1
    for i, r in _rows(steps):
        where = str(r["step"])
        share = _number(r.get("bandwidth_share_peak"))
        if share is not None and share > RATE_SLACK:
            out.append(Flag("steps", i, where, "bandwidth_share_peak", share, RATE_SLACK,
                            f"({TOLERANCE}) the step's bytes (from the cost model) over its GPU window exceed the device's peak bandwidth: "
                            "bytes re-read from cache are counted as memory traffic, or the bytes are overcounted"))
        window, busy = _number(r.get("duration_ns")), _number(r.get("busy_in_window_ns"))
        if window and busy is not None and busy > window * n_devices * SHARE_SLACK:
            out.append(Flag("steps", i, where, "busy_in_window_ns", busy, window * n_devices,
                            "GPU busy time inside the step's window exceeds the window on every device"))
    return out


def _shares(table: str, frame: pd.DataFrame, column: str, name, total: bool = False) -> list[Flag]:
    out = []
    if frame is None or not len(frame):
        return out
    values = _column(frame, column)
    for i, r in _rows(frame, np.flatnonzero(values > SHARE_SLACK)):
        v = _number(r.get(column))
        if v is not None and v > SHARE_SLACK:
            out.append(Flag(table, i, name(r), column, v, 1.0, f"a share of more than the whole: {column} over 100%"))
    if total:
        s = sum(v for v in values.tolist() if np.isfinite(v))  # in row order, as the rows add up
        if s > SHARE_SLACK:
            out.append(Flag(table, -1, "all rows", f"sum of {column}", s, 1.0, "the rows' shares add up to more than the whole"))
    return out


def _above_roofline(table: str, frame: pd.DataFrame, name, device: Device | None) -> list[Flag]:
    """A group's roofline efficiency (sum of t_min over time) above RATE_SLACK: it ran faster
    than the device's peak FLOP rate for its dtype or its memory bandwidth allows."""
    out = []
    if device is None or frame is None or not len(frame):
        return out
    with np.errstate(invalid="ignore"):
        maybe = (_column(frame, "efficiency") > RATE_SLACK) | (_column(frame, "achieved_tbps") * 1e12 > device.bandwidth * RATE_SLACK)
    for i, r in _rows(frame, np.flatnonzero(maybe)):
        eff = _number(r.get("efficiency"))
        if eff is not None and eff > RATE_SLACK:
            out.append(Flag(table, i, name(r), "efficiency", eff, RATE_SLACK, _above_reason(r)))
        tbps = _number(r.get("achieved_tbps"))
        if tbps is not None and tbps * 1e12 > device.bandwidth * RATE_SLACK and r.get("bound") != "comm":
            out.append(Flag(table, i, name(r), "achieved_tbps", tbps, device.memory_gbps / 1e3 * RATE_SLACK,
                            f"(the device's bandwidth, {TOLERANCE}) more bytes per second than the device's memory bandwidth: cache-resident data (L2) "
                            "counted as memory traffic, or bytes overcounted"))
    return out


def _activities(kernels: pd.DataFrame, device: Device | None) -> list[Flag]:
    """Single activities above their roofline (kernels.parquet, the Perfetto export carry
    each one's efficiency): one flag per kind of activity, naming the worst."""
    if device is None or kernels is None or not len(kernels) or "efficiency" not in kernels:
        return []
    eff = kernels["efficiency"].to_numpy(dtype=np.float64)
    over = kernels["over_peak"].to_numpy(dtype=bool)  # the roofline's columns come together
    out = []
    kinds = kernels["kind"].astype(str).to_numpy()
    near = (eff > 1.0) & ~over  # above 100% but within the tolerance: counted in the line, not flagged
    for kind in sorted(set(kinds[over])):
        rows = np.flatnonzero(over & (kinds == kind))
        worst = rows[np.argmax(eff[rows])]
        name = str(kernels["name"].iat[int(worst)])
        within = int(np.count_nonzero(near & (kinds == kind)))
        also = f"; {within:,} more {kind}s between 100% and {RATE_SLACK:.0%} are within it" if within else ""
        out.append(Flag("activities", -1, f"{len(rows):,} {kind}s, the worst {name}", "efficiency", float(eff[worst]),
                        RATE_SLACK, _above_reason({"name": name}, also)))
    return out


def _above_reason(r: dict, also: str = "") -> str:
    return f"({TOLERANCE}{also}) " + _above_cause(r)


def _above_cause(r: dict) -> str:
    text = " ".join(str(r.get(c) or "") for c in ("name", "op", "block", "kernel_class")).lower()
    if "winograd" in text or "fft" in text:
        return ("a Winograd / FFT convolution does fewer multiplications than the direct formula the cost counts: "
                "above the roofline by its algorithm, not a measurement error")
    if "memset" in text or "memcpy" in text:
        return ("a copy or fill faster than memory bandwidth: small buffers written into the L2 cache "
                "(a memset of a few MB never reaches HBM before the next kernel reads it)")
    if "conv" in text:
        return ("a convolution's FLOPs are those of the direct formula; cuDNN's transformed algorithms (Winograd, FFT, "
                "implicit GEMM on a reshaped problem) do less work")
    return ("faster than the roofline allows: data re-read from cache (L2) counted as memory traffic, "
            "or a cost model that counts more work than ran")


def _links(summary: pd.DataFrame) -> list[Flag]:
    out = []
    for i, r in _rows(summary):
        eff = _number(r.get("link_efficiency"))
        if eff is not None and eff > SHARE_SLACK:
            out.append(Flag("collectives", i, f"{r.get('collective')} {r.get('group') or ''}".strip(), "link_efficiency", eff, 1.0,
                            "bus bandwidth above the link's: the message or group size read from the trace does not match "
                            "the transfer, or the peers share memory (same node, NVLS / in-switch reduction)"))
    return out


def _devices(devices: pd.DataFrame) -> list[Flag]:
    out = []
    for i, r in _rows(devices):
        busy, span = _number(r.get("busy_ns")), _number(r.get("span_ns"))
        if busy is not None and span is not None and busy > span * SHARE_SLACK:
            out.append(Flag("devices", i, f"device {r.get('device')}", "busy_ns", busy, span, "busy longer than the capture span"))
    return out


def _overlap(overlap: pd.DataFrame) -> list[Flag]:
    out = []
    for i, r in _rows(overlap):
        share = _number(r.get("overlap_share"))
        if share is not None and share > SHARE_SLACK:
            out.append(Flag("overlap", i, f"device {r.get('device')}", "overlap_share", share, 1.0,
                            "more communication hidden than there was"))
    return out


# Columns that are a signed difference by definition, not a time.
_SIGNED = {"gpu_lag_ns"}


def _negative_times(tables: dict[str, pd.DataFrame]) -> list[Flag]:
    out = []
    for table, frame in tables.items():
        if frame is None or not len(frame):
            continue
        for column in frame.columns:
            if not str(column).endswith("_ns") or column in _SIGNED or not pd.api.types.is_numeric_dtype(frame[column]):
                continue
            values = frame[column].to_numpy(dtype=np.float64)
            for i in np.flatnonzero(values < 0):
                out.append(Flag(table, int(i), str(frame.iloc[int(i)].iloc[0]), column, float(values[i]), 0.0,
                                "a negative time: the trace's timestamps run backwards here"))
    return out


def _cut(text: str, width: int = 60) -> str:
    from tracekit.common.format import middle

    return middle(text, width)


def _value(figure: str, value: float) -> str:
    if figure.endswith("_ns"):
        from tracekit.common.format import duration

        return duration(value)
    if figure == "achieved_tbps":
        return f"{value:,.3f} TB/s"
    return f"{value:.1%}"
