"""The Python API; the CLI is a thin layer over it."""

from __future__ import annotations

import contextlib
import gc
import os
from typing import TYPE_CHECKING

from tracekit.errors import TraceError
from tracekit.hardware import DEFAULT_SUSTAINED, resolve
from tracekit.trace import health
from tracekit.trace.link import link
from tracekit.parsers import as_trace, parse_tables
from tracekit.trace import Trace

if TYPE_CHECKING:  # `tracekit info` only loads a trace: the analysis stages are imported when used
    from tracekit.analysis import Analysis


def load(path: str | os.PathLike, progress=None, workers: int | None = None, meanwhile=None) -> Trace:
    """Parse a trace (Kineto JSON / .json.gz, or Nsight Systems SQLite) and link it.
    `progress(done, total)`, if given, is called as the events are read. `workers`: processes
    that decode a large JSON trace (default: the cores available; 1: this process only).
    `meanwhile()`, if given, is called once while those processes decode: this one is idle
    then, so the next stages can be imported (pandas alone takes ~0.3 s) at no cost in time.

    Raises tracekit.TraceError, carrying the path and a plain reason, for bad input.
    Problems that cost only part of the trace are listed in `trace.warnings`.
    """
    with _gc_paused():  # the DataFrames are built while the parse's millions of objects are young
        return as_trace(scan(path, progress, workers, meanwhile))


def scan(path: str | os.PathLike, progress=None, workers: int | None = None, meanwhile=None):
    """`load` without building the DataFrames where the format allows it: a Kineto trace
    comes back as linked numpy column tables (tracekit.tables.ColumnTrace), which is all
    `tracekit info` needs and costs no pandas import; Nsight Systems traces as a Trace."""
    with _gc_paused():
        return health.check(link(parse_tables(path, progress, workers, meanwhile)))


@contextlib.contextmanager
def _gc_paused():
    """Parsing makes millions of small lists and none of them forms a cycle; the cyclic
    collector would rescan them all again and again (measured: 4x slower arg decoding).
    Nested pauses keep it off until the outermost ends."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def device_name(trace: Trace) -> str | None:
    """The GPU the trace ran on: the device most kernels ran on, by its recorded name."""
    devices = trace.meta.get("devices") or []
    if not devices:
        return None
    by_id = {d.get("id"): d.get("name") for d in devices}
    if len(trace.kernels):
        busiest = trace.kernels["device"].value_counts().index[0]
        if by_id.get(int(busiest)):
            return by_id[int(busiest)]
    return devices[0].get("name")


def analyze(path: str | os.PathLike, device: str | None = None, device_file: str | None = None,
            sustained: float = DEFAULT_SUSTAINED, rules: str | None = None, progress=None, model=None,
            workers: int | None = None, meanwhile=None, samples_per_step: int | None = None,
            frames_per_step: int | None = None, capture: str | os.PathLike | None = None) -> Analysis:
    """Load a trace and analyse it: costs, roofline, coverage, phase x block attribution and
    steps, on the named (or recorded) GPU. `rules` is a TOML file extending the defaults.
    `model` (a config.json path, or tracekit.model.ModelOptions for --tp / --ep / ...) costs
    what the op shapes cannot and predicts each step. `capture`: a trace of the graph capture
    of the same run (vLLM's profiled CUDA/HIP graph capture): the graph-replayed kernels take
    the ops and shapes of the kernels captured into their graphs (tracekit.trace.capture_pairing;
    what was paired is in `analysis.meta["capture"]`). `workers`: processes that decode a
    large JSON trace (default: the cores available; 1: this process only). `meanwhile()`:
    as for `load`, after the analysis stages have been imported in that time."""
    from tracekit.attribution import load_rules

    rule_set = load_rules(rules)
    if model is not None:  # a bad config fails before the trace is read
        from tracekit.model import ModelOptions, load_config

        if isinstance(model, (str, os.PathLike)):
            model = ModelOptions(config=os.fspath(model))

        load_config(model.config, model.weight_dtype, model.kv_dtype)

    def import_stages() -> None:  # while worker processes decode the trace: this one would wait
        import tracekit.analysis  # noqa: F401  (pandas and every stage)
        import tracekit.analysis.collectives  # noqa: F401  (imported by stages on first use)
        import tracekit.analysis.findings  # noqa: F401

        if meanwhile is not None:
            meanwhile()

    with _gc_paused():  # from the parse to the last table: no cycles worth a rescan of the heap
        captured = load(capture, workers=workers) if capture is not None else None  # a bad file fails first
        trace = load(path, progress, workers, meanwhile=import_stages)
        if captured is not None:
            from tracekit.trace.capture_pairing import pair_capture

            trace = pair_capture(trace, captured, os.fspath(capture))
        return _build_loaded(trace, path, device, device_file, sustained, rule_set, model, samples_per_step, frames_per_step)


def _build_loaded(trace: Trace, path, device, device_file, sustained, rule_set, model=None, samples_per_step=None,
                  frames_per_step=None) -> Analysis:
    """The Analysis of a loaded trace on the resolved device (analyze's second half)."""
    from tracekit.analysis import build

    gpu_work = len(trace.kernels) > 0 or health.kernel_times_unknown(trace.meta)  # its GPU times lost, not absent
    # A CPU-only profile has nothing to put on a GPU roofline; its ops are still costed.
    spec, no_device = resolve(device_name(trace), device, device_file, source=os.fspath(path)) if gpu_work or device or device_file else (None, None)
    if gpu_work:
        # The device question is settled here: one warning when no device was found, none
        # when one was. The parser's note that the export names no GPU (pointing at
        # --device) would repeat the first and be stale after the second.
        trace.warnings[:] = [w for w in trace.warnings if "--device" not in w] + ([no_device] if no_device else [])
    return build(trace, spec, sustained, rule_set, model, samples_per_step, frames_per_step)


def calibrate(paths: list[str], model, device: str | None = None, device_file: str | None = None,
              sustained: float = DEFAULT_SUSTAINED) -> dict:
    """Analyse each trace with `model` (tracekit.model.ModelOptions) and fit the roofline step
    model's efficiencies per device (tracekit.model.calibrate)."""
    from tracekit.model.calibrate import calibrate as fit

    return fit([analyze(p, device=device, device_file=device_file, sustained=sustained, model=model) for p in paths])


def project(path: str | os.PathLike, to: str, device: str | None = None, device_file: str | None = None,
            rules: str | None = None, workers: int | None = None, samples_per_step: int | None = None,
            frames_per_step: int | None = None, analysis: Analysis | None = None):
    """Project a trace (or an `analysis` already made) onto GPU `to`: busy time, step time and
    throughput with a range, per block and stage, and which rule (compute, memory, latency, ...)
    moved how much of the time (tracekit.projection.device). `device`: the GPU it ran on where
    the trace does not name it. An unknown GPU raises TraceError."""
    from tracekit.analysis.throughput import step_items
    from tracekit.projection.device import project_device, target_device

    source = os.fspath(path)
    target = target_device(to, device_file, source)  # an unknown target fails before the trace is read
    a = analysis if analysis is not None else _analyze_for_projection(path, device, device_file, rules, workers, samples_per_step,
                                                                      frames_per_step)
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


def _analyze_for_projection(path, device, device_file, rules, workers, samples_per_step, frames_per_step) -> Analysis:
    """analyze() for a projection, built once. --device-file alone describes the target, and
    the source too only where one of its devices matches the GPU the trace names (a GPU the
    built-in table lacks): that is settled before the one build."""
    if device or not device_file:
        return analyze(path, device=device, device_file=device_file if device else None, rules=rules, workers=workers,
                       samples_per_step=samples_per_step, frames_per_step=frames_per_step)
    from tracekit.attribution import load_rules
    from tracekit.hardware import builtin_devices, find_device, load_device_file

    with _gc_paused():
        trace = load(path, workers=workers)
        ran_on = device_name(trace)
        spec = None
        if ran_on and find_device(ran_on, builtin_devices()) is None:
            spec = find_device(ran_on, load_device_file(device_file))
        return _build_loaded(trace, path, spec.key if spec else None, device_file if spec else None, DEFAULT_SUSTAINED,
                             load_rules(rules), None, samples_per_step, frames_per_step)


def _check_projectable(a: Analysis, source: str) -> None:
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
