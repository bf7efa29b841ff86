"""Model-aware sections: predicted vs measured per step and per block group, and calibration.

Trace strings (step names, paths, device names) reach the terminal only through the
terminal renderer (reports/terminal.py, its one escaping function) and Markdown only
through the Markdown renderer's cell escaping.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracekit.common.format import UNKNOWN, duration, number, percent, si, signed_percent

if TYPE_CHECKING:
    from rich.console import Console

    from tracekit.analysis.result import Analysis










def summary_line(a: Analysis) -> str:
    s = a.model.summary
    mape = percent(s["mape"])
    bounds = s.get("steps_lower_bound") or 0
    flags = sorted({f for f in a.model.steps["complete_with"].dropna() for f in str(f).split()}) if len(a.model.steps) else []
    lower = f" ({bounds} as lower bounds{': pass ' + ' '.join(flags) + ' to complete them' if flags else ''})" if bounds else ""
    return (f"model       {s['architecture']}; TP {s['tp']} ({s['parallel_source']}), EP {s['ep']}; "
            f"{s['steps_predicted']} of {s['steps']} steps predicted{lower}, MAPE {mape} "
            f"(bandwidth x {s['bandwidth_efficiency']:.2f}, matrix x {s['matrix_efficiency']:.2f})")


def predicted_step_rows(a: Analysis) -> tuple[list[str], list[list[str]]]:
    head = ["step", "batch", "GPU busy", "GPU window", "predicted", "error", "bytes (weights + KV + activations)", "TB/s", "of peak BW",
            "roofline eff.", "coverage"]
    rows = []
    for r in a.model.steps.to_dict(orient="records"):
        known = all(v is not None and v == v for v in (r["bytes"], r["weight_bytes"], r["kv_bytes"]))
        rest = r["bytes"] - r["weight_bytes"] - r["kv_bytes"] if known else None
        at_least = "≥ " if r.get("lower_bound") else ""  # a lower bound: the batch, prompt lengths or KV lengths are unknown
        given = r["bytes"] is not None and r["bytes"] == r["bytes"]
        parts = f"{at_least if given else ''}{si(r['bytes'], 'B')} ({si(r['weight_bytes'], 'B')} + {si(r['kv_bytes'], 'B')} + {si(rest, 'B')})"
        tbps = number(r["achieved_tbps"], "{:.3f}")
        pred = r["predicted_ns"]
        predicted = (at_least if pred is not None and pred == pred else "") + duration(pred)
        rows.append([r["step"], r["batch"], duration(r["busy_ns"]), duration(r["wall_ns"]), predicted, signed_percent(r["error"]),
                     parts, (at_least if r["achieved_tbps"] is not None else "") + tbps, percent(r["bandwidth_share_peak"]),
                     percent(r["roofline_efficiency"]), percent(r["coverage"])])
    return head, rows


def block_rows(a: Analysis) -> tuple[list[str], list[list[str]]]:
    head = ["step", "kernels", "model blocks", "count", "measured", "predicted", "error", "FLOP", "bytes", "note"]
    rows = [[r["step"], r["group"], r["blocks"], f"{r['kernels']:,}", duration(r["measured_ns"]), duration(r["predicted_ns"]),
             signed_percent(r["error"]), si(r["flops"]), si(r["bytes"], "B"), r["note"] or ""]
            for r in a.model.blocks.to_dict(orient="records")]
    return head, rows


def agreement_rows(a: Analysis) -> tuple[list[str], list[list[str]]]:
    head = ["phase", "kernels", "model blocks", "count", "costed by the trace", "FLOP: trace", "model", "difference",
            "bytes: trace", "model", "difference"]
    rows = [[r["phase"] or "", r["group"], r["blocks"], f"{r['kernels']:,}", percent(r["trace_share"]), si(r["trace_flops"]),
             si(r["model_flops"]), signed_percent(r["flops_difference"]), si(r["trace_bytes"], "B"), si(r["model_bytes"], "B"),
             signed_percent(r["bytes_difference"])]
            for r in a.model.agreement.to_dict(orient="records")]
    return head, rows


def sections(a: Analysis) -> list:
    """The model's sections (tables.Section) for every renderer; none without --model."""
    from tracekit.reports.section import Section

    if getattr(a, "model", None) is None:
        return []
    step_head, step_body = predicted_step_rows(a)
    block_head, block_body = block_rows(a)
    agree_head, agree_body = agreement_rows(a)
    return [
        # step, batch, busy, wall, predicted, error, bytes, TB/s, of peak, roofline eff., coverage
        Section("Model: predicted vs measured steps", step_head, step_body, [0, 1, 0, 2, 0, 0, 1, 1, 2, 2, 1], flex=0,
                note=summary_line(a), left=(0, 1)),
        # step, kernels, model blocks, count, measured, predicted, error, FLOP, bytes, note
        # model block names ("attention projections") wrap: an elided one (`attenti…ections`) names nothing
        Section("Model: blocks per step", block_head, block_body, [0, 0, 2, 3, 0, 0, 0, 2, 2, 1], flex=9, left=(0, 1, 2, 9),
                wrap=(2,)),
        # phase, kernels, model blocks, count, costed by the trace, FLOP x3, bytes x3
        Section("Model vs the trace's own costs (op shapes, captured shapes), per block", agree_head, agree_body,
                [1, 0, 2, 3, 1, 1, 1, 0, 1, 1, 0], flex=2, left=(0, 1, 2), wrap=(2,),
                empty="(no kernel of a model block has a cost from the trace)",
                note="the model's figure for the kernels the trace costed: its block cost times their share of the "
                     "block's kernel time; difference = trace / model - 1, shown where the trace costs at least half of that time"),
    ]


def calibration_sections(result: dict[str, Any]) -> list:
    """`tracekit calibrate`'s tables as Sections (fitted to the terminal, trace strings escaped)."""
    from tracekit.reports.section import Section

    devices = [[key, str(d["steps"]), percent(d["mape_peak"]), percent(d["mape_fitted"]),
                UNKNOWN if d["bandwidth_efficiency"] is None else f"{d['bandwidth_efficiency']:.2f}",
                UNKNOWN if d["matrix_efficiency"] is None else f"{d['matrix_efficiency']:.2f}",
                f"{d.get('fit', '')}" + (" (above 1: the model overcounts)" if d.get("above_one") else "")]
               for key, d in result["devices"].items()]
    traces = [[str(t["path"]), t["device"], str(t["steps"]), percent(t["mape_peak"]), percent(t["mape_fitted"])] for t in result["traces"]]
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
