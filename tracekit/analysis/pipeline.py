"""build(): the one orchestrator. Each stage is a function that takes what the stage before
produced and returns its table; the Analysis is complete when build returns it."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pandas as pd

from tracekit.analysis import plausibility
from tracekit.analysis.annotation_steps import annotation_step_table, cut_short_warning, model_step_bytes
from tracekit.analysis.collectives import collective_summary, collective_table, overlap_table
from tracekit.analysis.coverage import coverage
from tracekit.analysis.findings import compute as compute_findings
from tracekit.analysis.step_flops import step_flops
from tracekit.analysis.ops import call_sketches, cpu_ops_table, ops_table
from tracekit.analysis.measured import HostEvents, Measured
from tracekit.analysis.result import Analysis
from tracekit.analysis.rollup import block_table, duration_sketches, kernel_summary
from tracekit.analysis.per_step import step_table
from tracekit.analysis.throughput import throughput
from tracekit.attribution import Rules, attribute
from tracekit.costs.assign import kernel_costs
from tracekit.hardware import DEFAULT_SUSTAINED, Device
from tracekit.analysis.roofline import roofline
from tracekit.model import ModelOptions
from tracekit.trace.column_text import as_text as text_of
from tracekit.trace.frames import Trace
from tracekit.trace.health import kernel_times_unknown, lost_time_counts
from tracekit.structure.steps import with_inferred_steps
from tracekit.trace.step_ownership import kernel_steps
from tracekit.trace.timeline import activity_tiers, device_time, exclusive_time


def build(trace: Trace, device: Device | None, sustained: float = DEFAULT_SUSTAINED, rules: Rules | None = None,
          model: ModelOptions | None = None, samples_per_step: int | None = None,
          frames_per_step: int | None = None, ncu=None, step: str | None = None) -> Analysis:
    """With a `model`, its costs fill the kernels the op shapes leave uncosted (order:
    shape costs -> attribute -> steps -> model -> roofline -> summarize -> predict). With
    `ncu` (tracekit.costs.ncu.NcuOptions), the kernels are compared with the user's Nsight
    Compute counters before the roofline, which then uses the measured bytes if asked.
    `step`: the range or Python frame (name or regex) that marks one step (--step)."""
    trace = with_inferred_steps(trace, step)  # steps from the trace's structure where it marks none
    costs = kernel_costs(trace)
    arch = widths = None
    if model is not None:  # the model's widths place the GEMMs by their weight shapes
        from tracekit.attribution.widths import from_architecture
        from tracekit.model import infer_parallel, load_config

        arch = load_config(model.config, model.weight_dtype, model.kv_dtype)
        widths = from_architecture(arch, infer_parallel(trace, arch, model.tp, model.ep).tp)
    labels = attribute(trace, costs["kernel_class"], rules, widths)
    owner = kernel_steps(trace, trace.kernels)  # row in trace.ranges of the step that owns each kernel, -1 for none
    run = None
    if model is not None:
        from tracekit.model import run_model

        run = run_model(trace, costs, labels, owner, model, device, arch)
    # Shared time goes to compute first, then copies, then communication (its exposed time).
    tiers = activity_tiers(trace.kernels["kind"].to_numpy(), (labels["block"] == "collective").to_numpy())
    exclusive = exclusive_time(trace.kernels, tiers)
    ncu_report = None
    if ncu is not None:
        from tracekit.costs.ncu import apply as apply_ncu

        ncu_report, costs = apply_ncu(ncu, trace.kernels, costs)
    roof = roofline(trace.kernels, costs, device, sustained)
    k = trace.kernels
    op_names = text_of(trace.ops["name"])
    op_name = np.where(k["op"].to_numpy() >= 0, op_names[np.maximum(k["op"].to_numpy(), 0)] if len(op_names) else None, None)
    kernels = pd.concat([k, costs, roof, labels], axis=1).assign(
        duration_ns=k["end"] - k["start"], exclusive_ns=exclusive, op_name=pd.Categorical(op_name))
    ops = ops_table(kernels, trace) if len(k) else cpu_ops_table(trace)
    devices = device_time(k, exclusive, int(trace.meta.get("span_ns") or 0))
    kernels["step"] = owner
    if kernel_times_unknown(trace.meta):  # the profiler lost every GPU time: the GPU annotations are the steps
        steps = annotation_step_table(trace, device.bandwidth if device else None, sustained,
                                      model_step_bytes(run) if run is not None else None)
    else:
        steps = step_table(trace, kernels, exclusive, device.bandwidth if device else None, sustained, owner)
        steps = step_flops(trace, kernels, steps, device)  # achieved TFLOP/s, MFU (recompute apart), HFU
    cov = _lost_times_unknown(coverage(kernels), trace.meta)
    if ncu_report is not None:
        cov["ncu"] = ncu_report
    # what the blocks are: a model's layer parts, or a program's own units (attribution.program_blocks)
    meta = {**trace.meta, "blocks_basis": labels.attrs.get("blocks_basis")}
    measured = Measured(kernels=kernels, ops=ops, coverage=cov, device=device, sustained=sustained,
                        meta=meta, warnings=list(trace.warnings) + cut_short_warning(steps), blocks=block_table(kernels), steps=steps,
                        devices=devices, trace=trace, model_notes=list(run.notes) if run is not None else None)
    collectives = collective_table(measured)
    findings = compute_findings(measured)
    prediction = None
    if run is not None:
        from tracekit.model.predict import predict

        prediction = predict(run, kernels, exclusive, device, trace.ranges, sustained)
    model_warnings = [f"model: {note}" for note in run.notes] if run is not None else []
    summary, copies = kernel_summary(kernels), kernel_summary(kernels, copies=True)
    per_collective, overlap = collective_summary(collectives), overlap_table(kernels)
    rates = throughput(trace, kernels, steps, samples_per_step, frames_per_step, rules)
    # The last stage: every stated ratio against its physical limit (analysis.plausibility).
    rates, rate_flags = plausibility.rates(rates, kernels, device, trace.ranges, steps)
    flags = rate_flags + plausibility.check(device=device, steps=steps, blocks=measured.blocks, ops=ops, kernel_summary=summary, copy_summary=copies, kernels=kernels,
                               collective_summary=per_collective, devices=devices, overlap=overlap,
                               fix_tables={"ops": findings.fix_ops, "kernels": findings.fix_kernels, "blocks": findings.fix_blocks},
                               coverage=measured.coverage, causes=findings.causes, idle=findings.idle)
    whole = {f.name: getattr(measured, f.name) for f in fields(Measured)}
    whole["warnings"] = [*measured.warnings, *model_warnings, *plausibility.warnings(flags)]
    return Analysis(**whole, kernel_summary=summary, copy_summary=copies, collectives=collectives,
                    collective_summary=per_collective, overlap=overlap,
                    findings=findings, model=prediction, flags=flags,
                    throughput=rates,
                    # every name / (op, shapes) a summary can list, so serialising computes nothing
                    kernel_sketches=duration_sketches(kernels, summary["name"].tolist() if len(summary) else []),
                    op_sketches=call_sketches(kernels, trace) if len(kernels) else None, host=HostEvents.of(trace))


def _lost_times_unknown(cov: dict, meta: dict) -> dict:
    """Kernel and copy time are unknown, not zero, where the profiler lost every GPU time; the
    kernels it recorded are still counted (their count is known, only their times are not)."""
    if not kernel_times_unknown(meta):
        return cov
    kernels = cov["kernels"] + lost_time_counts(meta).get("kernel", 0)
    return {**cov, "kernels": kernels, "kernel_time_ns": None, "modeled_time_ns": None, "copies_time_ns": None}
