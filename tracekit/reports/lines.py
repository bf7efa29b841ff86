"""The report's one-line facts (device, cost coverage, graph-capture pairing, roofline) as
plain strings: every medium's renderer (terminal, Markdown, HTML, the first screen) prints
them through its own escaping function. No rich, no markupsafe: the Markdown and JSON paths
import this and nothing of the terminal's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.analysis.roofline import OVER_PEAK
from tracekit.common.format import MIN_COVERAGE, percent, percent_against

if TYPE_CHECKING:
    from tracekit.analysis import Analysis


def device_label(analysis: Analysis) -> str:
    """The device's name, or why there is none."""
    if analysis.device is not None:
        return f"{analysis.device.name} [{analysis.device.key}]"
    if len(analysis.kernels):
        return "unknown: roofline figures need --device NAME (see `tracekit devices`)"
    return "none (CPU-only profile)"


def coverage_line(analysis: Analysis) -> str:
    c = analysis.coverage
    sources = ", ".join(f"{k} {percent(v)}" for k, v in sorted(c["modeled_share_by_source"].items(), key=lambda kv: -kv[1]))
    return (f"{percent(c['modeled_share'])} of GPU kernel time has a cost "
            f"({c['kernels_modeled']:,} of {c['kernels']:,} kernels; {sources or 'none'}); "
            f"above {OVER_PEAK:.0%} of peak: {percent(c['over_peak_share'])} of modeled time")


def capture_line(analysis: Analysis) -> str | None:
    """Graph-capture pairing (--capture): what was paired, what was not and why; None without it."""
    c = analysis.meta.get("capture")
    if c is None:
        return None
    how = ", ".join(f"{n} {h}" for h, n in c["matched_by"].items())
    costed = analysis.coverage.get("modeled_share_from_capture")
    line = (f"{c['graph_launches_matched']:,} of {c['graph_launches']:,} graph launches paired with "
            f"{c['graphs_captured']:,} captured graphs{' (' + how + ')' if how else ''}: {c['kernels_matched']:,} of "
            f"{c['kernels']:,} graph kernels took a captured op ({percent(c['matched_share_of_kernel_time'])} of kernel time"
            f"{', ' + percent(costed) + ' costed from it' if costed is not None else ''})")
    if c["unmatched"]:
        top = c["unmatched"][0]
        more = f"; {len(c['unmatched']) - 1} other reasons" if len(c["unmatched"]) > 1 else ""
        line += f"; {c['kernels_unmatched']:,} unmatched: {top['kernels']:,} {top['reason']}{more}"
    return line


def device_line(analysis: Analysis) -> str:
    """The device and the bandwidth the roofline uses; its sources are in `tracekit devices`."""
    dev = analysis.device
    if dev is None and len(analysis.kernels):
        return device_label(analysis)
    if dev is None:
        return "none: the trace holds no GPU activity (a CPU-only profile); its ops are costed against CPU time"
    return (f"{dev.name} [{dev.key}]: {dev.memory_gbps:,.0f} GB/s, sustained {analysis.sustained:.0%} "
            f"(sources: tracekit devices)")


def roofline_line(analysis: Analysis) -> str:
    c = analysis.coverage
    eff, sus = c.get("efficiency"), c.get("efficiency_sustained")
    if "kernel_time_ns" in c and c["kernel_time_ns"] is None:  # the profiler lost the kernels' times (trace health)
        return "— : the kernels' times are lost (see Trace health), so no efficiency can be stated"
    if (c.get("modeled_share") or 0.0) < MIN_COVERAGE:  # unknown is not zero, nor a measurement
        return (f"— : only {percent_against(c.get('modeled_share') or 0.0, MIN_COVERAGE)} of GPU kernel time has a cost, "
                f"below the {percent(MIN_COVERAGE)} needed to state an efficiency")
    return (f"kernel time at {percent(eff)} of the peak roofline, {percent(sus)} of the sustained one "
            f"(sum t_min / sum time over the kernels with a cost)")
