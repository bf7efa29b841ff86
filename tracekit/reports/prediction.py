"""Model-aware sections: predicted vs measured per step and per block group, and calibration.

Trace strings (step names, paths, device names) reach the terminal only through the
terminal renderer (reports/terminal.py, its one escaping function) and Markdown only
through the Markdown renderer's cell escaping.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

from tracekit.reports.format import duration, percent, si

UNKNOWN = "—"


def _pct(v: Any) -> str:
    return UNKNOWN if v is None or v != v else percent(v)


def _signed(v: Any) -> str:
    return UNKNOWN if v is None or v != v else f"{v:+.1%}"


def _time(v: Any) -> str:
    return UNKNOWN if v is None or v != v else duration(v)


def _si(v: Any, unit: str = "") -> str:
    return UNKNOWN if v is None or v != v else si(v, unit)


def summary_line(a) -> str:
    s = a.model.summary
    mape = _pct(s["mape"])
    return (f"model       {s['architecture']}; TP {s['tp']} ({s['parallel_source']}), EP {s['ep']}; "
            f"{s['steps_predicted']} of {s['steps']} steps predicted, MAPE {mape} "
            f"(bandwidth x {s['bandwidth_efficiency']:.2f}, matrix x {s['matrix_efficiency']:.2f})")


def step_rows(a) -> tuple[list[str], list[list[str]]]:
    head = ["step", "batch", "GPU busy", "wall", "predicted", "error", "bytes (weights + KV + activations)", "TB/s", "of peak BW",
            "roofline eff.", "coverage"]
    rows = []
    for r in a.model.steps.to_dict(orient="records"):
        known = all(v is not None and v == v for v in (r["bytes"], r["weight_bytes"], r["kv_bytes"]))
        rest = r["bytes"] - r["weight_bytes"] - r["kv_bytes"] if known else None
        parts = f"{_si(r['bytes'], 'B')} ({_si(r['weight_bytes'], 'B')} + {_si(r['kv_bytes'], 'B')} + {_si(rest, 'B')})"
        tbps = UNKNOWN if r["achieved_tbps"] is None or r["achieved_tbps"] != r["achieved_tbps"] else f"{r['achieved_tbps']:.3f}"
        rows.append([r["step"], r["batch"], _time(r["busy_ns"]), _time(r["wall_ns"]), _time(r["predicted_ns"]), _signed(r["error"]),
                     parts, tbps, _pct(r["bandwidth_share_peak"]), _pct(r["roofline_efficiency"]), _pct(r["coverage"])])
    return head, rows


def block_rows(a) -> tuple[list[str], list[list[str]]]:
    head = ["step", "kernels", "model blocks", "count", "measured", "predicted", "error", "FLOP", "bytes", "note"]
    rows = [[r["step"], r["group"], r["blocks"], f"{r['kernels']:,}", _time(r["measured_ns"]), _time(r["predicted_ns"]),
             _signed(r["error"]), _si(r["flops"]), _si(r["bytes"], "B"), r["note"] or ""]
            for r in a.model.blocks.to_dict(orient="records")]
    return head, rows


def sections(a) -> list:
    """The model's sections (tables.Section) for every renderer; none without --model."""
    from tracekit.reports.tables import Section

    if getattr(a, "model", None) is None:
        return []
    step_head, step_body = step_rows(a)
    block_head, block_body = block_rows(a)
    return [
        # step, batch, busy, wall, predicted, error, bytes, TB/s, of peak, roofline eff., coverage
        Section("Model: predicted vs measured steps", step_head, step_body, [0, 1, 0, 2, 0, 0, 1, 1, 2, 2, 1], flex=0,
                note=summary_line(a), left=(0, 1)),
        # step, kernels, model blocks, count, measured, predicted, error, FLOP, bytes, note
        Section("Model: blocks per step", block_head, block_body, [0, 0, 2, 3, 0, 0, 0, 2, 2, 1], flex=9, left=(0, 1, 2, 9)),
    ]


def calibration_sections(result: dict[str, Any]) -> list:
    """`tracekit calibrate`'s tables as Sections (fitted to the terminal, trace strings escaped)."""
    from tracekit.reports.tables import Section

    devices = [[key, str(d["steps"]), _pct(d["mape_peak"]), _pct(d["mape_fitted"]),
                UNKNOWN if d["bandwidth_efficiency"] is None else f"{d['bandwidth_efficiency']:.2f}",
                UNKNOWN if d["matrix_efficiency"] is None else f"{d['matrix_efficiency']:.2f}",
                f"{d.get('fit', '')}" + (" (above 1: the model overcounts)" if d.get("above_one") else "")]
               for key, d in result["devices"].items()]
    traces = [[str(t["path"]), t["device"], str(t["steps"]), _pct(t["mape_peak"]), _pct(t["mape_fitted"])] for t in result["traces"]]
    return [
        # device, steps, MAPE at peak, MAPE fitted, bandwidth eff., matrix eff., fit
        Section("Calibration: roofline step model vs measured GPU busy time",
                ["device", "steps", "MAPE at peak", "MAPE fitted", "bandwidth eff.", "matrix eff.", "fit"], devices,
                [0, 1, 0, 0, 0, 0, 2], flex=6, left=(0, 6)),
        # trace, device, steps, MAPE at peak, MAPE fitted
        Section("Per trace", ["trace", "device", "steps", "MAPE at peak", "MAPE fitted"], traces, [0, 2, 1, 0, 0], flex=0, left=(0, 1)),
    ]


def render_calibration(result: dict[str, Any], console: Console) -> None:
    from tracekit.reports.terminal import print_section

    for section in calibration_sections(result):
        print_section(section, console)
