"""A trace path to an Analysis: parse and link it (`load`, `scan`), resolve the GPU it ran on,
and run the pipeline (`analyze`). The API (tracekit.api), the ranks' workers and compare's
trace inputs all start here, so none of them imports the API above it."""

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
from tracekit.trace.tables import ColumnTrace

if TYPE_CHECKING:  # `tracekit info` only loads a trace: the analysis stages are imported when used
    from tracekit.analysis.result import Analysis


def load(path: str | os.PathLike, progress=None, workers: int | None = None, meanwhile=None) -> Trace:
    """Parse a trace (Kineto JSON / .json.gz, or Nsight Systems SQLite) and link it.
    `progress(done, total)`, if given, is called as the events are read. `workers`: processes
    that decode a large JSON trace (default: the cores available; 1: this process only).
    `meanwhile()`, if given, is called once while those processes decode: this one is idle
    then, so the next stages can be imported (pandas alone takes ~0.3 s) at no cost in time.

    Raises tracekit.TraceError, carrying the path and a plain reason, for bad input.
    Problems that cost only part of the trace are listed in `trace.warnings`.
    """
    with gc_paused():  # the DataFrames are built while the parse's millions of objects are young
        return as_trace(scan(path, progress, workers, meanwhile))


def scan(path: str | os.PathLike, progress=None, workers: int | None = None, meanwhile=None) -> ColumnTrace:
    """`load` without building the DataFrames: the trace comes back as linked numpy column
    tables (tracekit.trace.tables.ColumnTrace), Kineto and Nsight Systems alike, which is all
    `tracekit info` needs and costs no pandas import."""
    with gc_paused():
        return health.check(link(parse_tables(path, progress, workers, meanwhile)))


@contextlib.contextmanager
def gc_paused():
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
            frames_per_step: int | None = None, capture: str | os.PathLike | None = None, ncu=None,
            bytes_from: str = "model", step: str | None = None) -> Analysis:
    """Load a trace and analyse it: costs, roofline, coverage, phase x block attribution and
    steps, on the named (or recorded) GPU. `rules` is a TOML file extending the defaults.
    `model` (a config.json path, or tracekit.model.ModelOptions for --tp / --ep / ...) costs
    what the op shapes cannot and predicts each step. `capture`: a trace of the graph capture
    of the same run (vLLM's profiled CUDA/HIP graph capture): the graph-replayed kernels take
    the ops and shapes of the kernels captured into their graphs (tracekit.trace.capture_pairing;
    what was paired is in `analysis.meta["capture"]`). `workers`: processes that decode a
    large JSON trace (default: the cores available; 1: this process only). `step`: the range or
    Python frame (name or regex) that marks one step (tracekit.structure.steps). `meanwhile()`:
    as for `load`, after the analysis stages have been imported in that time. `ncu`: a Nsight
    Compute CSV of the same work (--csv --page raw with DRAM bytes and time): the kernels are
    compared with it (`coverage["ncu"]`); `bytes_from="measured"` puts its bytes on the roofline."""
    from tracekit.attribution import load_rules

    rule_set = load_rules(rules)
    if model is not None:  # a bad config fails before the trace is read
        from tracekit.model import ModelOptions, load_config

        if isinstance(model, (str, os.PathLike)):
            model = ModelOptions(config=os.fspath(model))

        load_config(model.config, model.weight_dtype, model.kv_dtype)
    if ncu is not None:  # a bad CSV fails before the trace is read
        from tracekit.costs.ncu import NcuOptions

        ncu = NcuOptions.read(ncu, bytes_from)

    def import_stages() -> None:  # while worker processes decode the trace: this one would wait
        import tracekit.analysis  # noqa: F401  (pandas and every stage)
        import tracekit.analysis.collectives  # noqa: F401  (imported by stages on first use)
        import tracekit.analysis.findings  # noqa: F401

        if meanwhile is not None:
            meanwhile()

    with gc_paused():  # from the parse to the last table: no cycles worth a rescan of the heap
        captured = load(capture, workers=workers) if capture is not None else None  # a bad file fails first
        trace = load(path, progress, workers, meanwhile=import_stages)
        if captured is not None:
            from tracekit.trace.capture_pairing import pair_capture

            trace = pair_capture(trace, captured, os.fspath(capture))
        else:
            trace = paired_with_own_capture(trace, os.fspath(path))
        return build_loaded(trace, path, device, device_file, sustained, rule_set, model, samples_per_step, frames_per_step,
                            ncu, step)


def paired_with_own_capture(trace: Trace, source: str) -> Trace:
    """A trace that records a graph's capture (the launches between StreamBeginCapture and
    StreamEndCapture, with their ops and shapes: torch.compile's CUDAGraphNode.record, an
    engine profiled while capturing) and its replays is its own capture trace: the replayed
    kernels take the captured ops (tracekit.trace.capture_pairing), as with --capture."""
    if not len(trace.kernels) or not trace.kernels["graph_launch"].to_numpy(dtype=bool).any():
        return trace
    from tracekit.trace.capture_pairing import captured_graphs, pair_capture

    return pair_capture(trace, trace, source) if captured_graphs(trace) else trace


def build_loaded(trace: Trace, path, device, device_file, sustained, rule_set, model=None, samples_per_step=None,
                  frames_per_step=None, ncu=None, step=None) -> Analysis:
    """The Analysis of a loaded trace on the resolved device (analyze's second half)."""
    from tracekit.analysis.pipeline import build

    gpu_work = len(trace.kernels) > 0 or health.kernel_times_unknown(trace.meta)  # its GPU times lost, not absent
    # A CPU-only profile has nothing to put on a GPU roofline; its ops are still costed.
    spec, no_device = resolve(device_name(trace), device, device_file, source=os.fspath(path)) if gpu_work or device or device_file else (None, None)
    if gpu_work:
        # The device question is settled here: one warning when no device was found, none
        # when one was. The parser's note that the export names no GPU (pointing at
        # --device) would repeat the first and be stale after the second.
        trace.warnings[:] = [w for w in trace.warnings if "--device" not in w] + ([no_device] if no_device else [])
    return build(trace, spec, sustained, rule_set, model, samples_per_step, frames_per_step, ncu, step)


