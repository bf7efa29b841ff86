"""What-if runs from a trace path or an Analysis: onto another GPU (`project`, `what_if`) and
at another TP degree, optionally on another GPU too (`project_tp`). The API re-exports them;
tracekit.ranks projects a job's ranks through `project_tp`."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from tracekit.analysis.load import analyze, build_loaded, device_name, gc_paused, load
from tracekit.errors import TraceError
from tracekit.hardware import DEFAULT_SUSTAINED
from tracekit.trace.health import kernel_times_unknown

if TYPE_CHECKING:
    from tracekit.analysis.result import Analysis


def project(path: str | os.PathLike, to: str, device: str | None = None, device_file: str | None = None,
            rules: str | None = None, workers: int | None = None, samples_per_step: int | None = None,
            frames_per_step: int | None = None, analysis: Analysis | None = None, step: str | None = None):
    """Project a trace (or an `analysis` already made) onto GPU `to`: busy time, step time and
    throughput with a range, per block and stage, and which rule (compute, memory, latency, ...)
    moved how much of the time (tracekit.projection.device). `device`: the GPU it ran on where
    the trace does not name it. An unknown GPU raises TraceError."""
    from tracekit.analysis.throughput import step_items
    from tracekit.projection.device import project_device, target_device

    source = os.fspath(path)
    target = target_device(to, device_file, source)  # an unknown target fails before the trace is read
    a = analysis if analysis is not None else _analyze_for_projection(path, device, device_file, rules, workers, samples_per_step,
                                                                      frames_per_step, step)
    _check_projectable(a, source)
    p = project_device(a, target, step_items(a.trace, a.steps, samples_per_step, frames_per_step))
    p.warnings = list(a.warnings)
    return p


def what_if(analysis: Analysis, to: str | list[str], device_file: str | None = None, samples_per_step: int | None = None,
            frames_per_step: int | None = None) -> dict:
    """The what-if of an Analysis already made, for a summary: per GPU key in `to`, the
    projection's totals (busy and step time with their ranges, throughput, time by rule) and
    its assumptions, as plain JSON-ready dicts. No trace is read again."""
    targets = [to] if isinstance(to, str) else list(to)
    out = {}
    for name in targets:
        p = project(analysis.meta.get("path") or "trace", name, device_file=device_file, samples_per_step=samples_per_step,
                    frames_per_step=frames_per_step, analysis=analysis)
        out[p.target.key] = {"target": p.target.name, "totals": p.totals, "assumptions": p.assumptions}
    return out


def _analyze_for_projection(path, device, device_file, rules, workers, samples_per_step, frames_per_step, step=None) -> Analysis:
    """analyze() for a projection, built once. --device-file alone describes the target, and
    the source too only where one of its devices matches the GPU the trace names (a GPU the
    built-in table lacks): that is settled before the one build."""
    if device or not device_file:
        return analyze(path, device=device, device_file=device_file if device else None, rules=rules, workers=workers,
                       samples_per_step=samples_per_step, frames_per_step=frames_per_step, step=step)
    from tracekit.attribution import load_rules
    from tracekit.hardware import builtin_devices, find_device, load_device_file

    with gc_paused():
        trace = load(path, workers=workers)
        ran_on = device_name(trace)
        spec = None
        if ran_on and find_device(ran_on, builtin_devices()) is None:
            spec = find_device(ran_on, load_device_file(device_file))
        return build_loaded(trace, path, spec.key if spec else None, device_file if spec else None, DEFAULT_SUSTAINED,
                             load_rules(rules), None, samples_per_step, frames_per_step, step=step)


def _check_projectable(a: Analysis, source: str) -> None:
    if kernel_times_unknown(a.meta):
        raise TraceError(source, "the profiler lost every GPU activity's time (ts 0 and dur 0, see `tracekit analyze`'s "
                                 "Trace health): there are no kernel times to project onto a GPU")
    if not len(a.kernels):
        raise TraceError(source, "the trace holds no GPU work (no kernel, copy or memset: a CPU-only profile): "
                                 "there is nothing to project onto a GPU")
    if a.device is None:
        ran_on = device_name(a.trace) if a.trace is not None else None
        if ran_on:
            raise TraceError(source, f"the trace ran on {ran_on[:80]!r}, which is not in the device table: pass --device NAME "
                                     "(see `tracekit devices`), or --device-file F.toml with a device that matches it")
        raise TraceError(source, "the trace does not name its GPU: pass --device NAME for the GPU it ran on "
                                 "(see `tracekit devices`)")


def project_tp(path: str | os.PathLike, tp: int, run_tp: int | None = None, model: str | os.PathLike | None = None,
               device: str | None = None, device_file: str | None = None, rules: str | None = None,
               workers: int | None = None, samples_per_step: int | None = None, frames_per_step: int | None = None,
               to: str | None = None):
    """Project one rank's trace to TP degree `tp` (tracekit.projection.tp): which blocks are
    sharded and which replicated, the replicated share of the step, and the step time at TP
    `tp`. `run_tp`: the run's TP degree where neither the model config's per-rank shapes nor
    the collectives say; `model`: the model's config.json (per-rank widths = config widths /
    TP). `to`: another GPU to run it on as well (each kernel's TP ratio times its device
    ratio). The ranks of one job: tracekit.ranks.project_tp_job."""
    from tracekit.analysis.throughput import step_items
    from tracekit.projection.tp import project_tp as run

    source = os.fspath(path)
    if tp < 1:
        raise TraceError(source, f"--tp must be at least 1, not {tp}")
    target = None
    if to is not None:
        from tracekit.projection.device import target_device

        target = target_device(to, device_file, source)
    arch = None
    if model is not None:
        from tracekit.model import load_config

        arch = load_config(os.fspath(model))
    if target is not None:
        a = _analyze_for_projection(path, device, device_file, rules, workers, samples_per_step, frames_per_step)
        _check_projectable(a, source)
    else:
        a = analyze(path, device=device, device_file=device_file, rules=rules, workers=workers,
                    samples_per_step=samples_per_step, frames_per_step=frames_per_step)
    current, why, guessed = _run_tp(a, arch, run_tp)
    items = step_items(a.trace, a.steps, samples_per_step, frames_per_step)
    p = run(a, tp, current, why, arch, items, guessed=guessed, target=target)
    p.analysis = a
    return p


def _run_tp(a: Analysis, arch, run_tp: int | None) -> tuple[int, str, bool]:
    """The traced run's TP degree, where it came from, and whether it is only a guess from the
    job (collective group size, world size: data and model parallelism have those too), which
    the per-rank shapes must confirm (tracekit.projection.tp.stated_tp)."""
    if run_tp:
        return run_tp, "--run-tp", False
    if arch is not None and a.trace is not None:
        from tracekit.model.parallel import infer_parallel

        par = infer_parallel(a.trace, arch, None, None)
        return par.tp, par.source, False
    groups = a.kernels["coll_group_size"].to_numpy() if len(a.kernels) else []
    if len(groups) and groups.max() > 1:
        return int(groups.max()), "collective group size", True
    world = a.meta.get("world_size")
    if isinstance(world, int) and world > 1:
        return world, "world size", True
    return 1, "default (no collective, world size 1)", False
