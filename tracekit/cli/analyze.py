"""`tracekit analyze`: one trace, or the ranks of one job."""

from __future__ import annotations

import click

from tracekit.cli.common import (WORKERS_HELP, checked_device, console, emit, format_option, freeze_heap, importer, model_from, model_options,
                                 progress, safe, show, status, step_option, warn)
from tracekit.cli.options import checked_scheduler
from tracekit.errors import TraceError


@click.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--device", callback=checked_device, help="GPU to put the trace on (a key or name from `tracekit devices`); default: the trace's own.")
@click.option("--device-file", type=click.Path(dir_okay=False), help="TOML file with device specs (format: tracekit/hardware/devices.toml).")
@click.option("--rules", type=click.Path(dir_okay=False), help="TOML attribution rules that extend (or replace) the defaults.")
@click.option("--sustained", default=0.8, show_default=True, type=click.FloatRange(0.05, 1.0), help="Sustained share of peak memory bandwidth.")
@format_option()
@click.option("--out", "out_dir", help="Write the report bundle (summary.json, report.md, report.html, parquet, csv, png) here.")
@click.option("--force", is_flag=True, help="In --out DIR, replace files and folders of the bundle's names that tracekit did "
              "not write (by default they are refused: only what a tracekit manifest lists is replaced).")
@click.option("--full", is_flag=True, help="The whole report in the terminal (every table, the flags' paragraphs); by default "
              "the first screen: headline, top causes, top blocks, steps, stages and notes.")
@click.option("--top", default=15, show_default=True, type=click.IntRange(1, 10_000), help="How many kernels and ops to list.")
@click.option("--workers", type=click.IntRange(1, 256), help=WORKERS_HELP + " Several ranks: one process per rank, up to this many.")
@click.option("--scheduler", callback=checked_scheduler, help="Run the ranks on a Dask cluster: tcp://HOST:PORT, or `local` to start one here.")
@click.option("--straggler-threshold", default=0.05, show_default=True, type=click.FloatRange(0.0, 10.0), help="A rank is a straggler when the other ranks wait for it at collectives, each on average, more than this share of the median step time.")
@click.option("--mlflow", "to_mlflow", is_flag=True, help="Log the headline metrics and the report bundle to MLflow (MLFLOW_TRACKING_URI).")
@click.option("--mlflow-run", help="The MLflow run to log to (implies --mlflow); default: a new run.")
@click.option("--samples-per-step", type=click.IntRange(1, None), help="Samples per step (training throughput) where the trace does not say.")
@click.option("--frames-per-step", type=click.IntRange(1, None), help="Frames or images per step (diffusion throughput) where the annotations do not say.")
@click.option("--capture", type=click.Path(dir_okay=False), help="A trace of the same run's CUDA/HIP graph capture (vLLM's profiled "
              "capture): graph-replayed kernels take the ops and shapes of the kernels captured into their graphs.")
@click.option("--what-if", "what_if", multiple=True, help="Also project the run onto this GPU (repeatable): summary.json and the "
              "JSON output get `what_if` (busy and step time with ranges, throughput, time by rule; see `tracekit project`).")
@click.option("--ncu", "ncu", type=click.Path(dir_okay=False), help="A Nsight Compute CSV of the same work (ncu --csv --page raw "
              "--metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum): each kernel's modeled bytes against "
              "the DRAM bytes it measured, per kernel family (see docs/ncu.md).")
@click.option("--bytes", "bytes_from", type=click.Choice(["model", "measured"]), default="model", show_default=True,
              help="The bytes the roofline uses: the cost model's, or (with --ncu) the DRAM bytes Nsight Compute measured.")
@step_option
@model_options
def analyze(paths: tuple[str, ...], device: str | None, device_file: str | None, rules: str | None, sustained: float, fmt: str,
            out_dir: str | None, top: int, workers: int | None, scheduler: str | None, straggler_threshold: float,
            to_mlflow: bool = False, mlflow_run: str | None = None, samples_per_step: int | None = None,
            frames_per_step: int | None = None, capture: str | None = None, what_if: tuple[str, ...] = (), ncu: str | None = None,
            bytes_from: str = "model", step: str | None = None, force: bool = False, full: bool = False, **model) -> None:
    """Where the GPU time went: phase x block table, roofline, coverage, steps, collectives.

    One trace, or several (files or a directory), one per rank of a job: then each rank is
    analysed in parallel and a cross-rank report follows (stragglers, collective skew)."""
    import os

    options = model_from(**model)
    if bytes_from == "measured" and ncu is None:
        raise click.UsageError("--bytes measured needs --ncu NCU.csv (the measured bytes come from it)")
    if out_dir is not None:
        from tracekit.reports.bundle import BUNDLE_FILES, check_out_dir

        # before the work: a bad --out should not cost a whole analysis, nor replace an input
        check_out_dir(out_dir, "--out", inputs=(*paths, device_file, rules, model.get("config"), capture), names=BUNDLE_FILES,
                      force=force)
    to_mlflow = to_mlflow or bool(mlflow_run)
    if to_mlflow:
        _check_mlflow(paths)
    if what_if:  # an unknown GPU fails before the trace is read
        from tracekit.projection.device import target_device

        for name in what_if:
            target_device(name, device_file, paths[0], flag="--what-if")
    several = len(paths) > 1 or os.path.isdir(paths[0])
    if scheduler is not None and not several:
        raise click.UsageError("--scheduler runs the ranks of a job: give several traces or a directory of them")
    if several:
        if options is not None or capture is not None or what_if or ncu is not None:
            flag = "--model" if options is not None else "--capture" if capture is not None else "--what-if" if what_if else "--ncu"
            raise click.UsageError(f"{flag} works on one trace at a time")
        if step is not None:
            raise click.UsageError("--step works on one trace at a time")
        _analyze_ranks(list(paths), device, device_file, rules, sustained, fmt, out_dir, top, workers, scheduler, straggler_threshold,
                       full)
        return
    path = paths[0]
    from tracekit.api import analyze as run

    with progress(f"reading {os.path.basename(path)}") as on_progress:
        renderers = {"json": (), "markdown": ("tracekit.reports.markdown",), "table": ("tracekit.reports.analyze", "tracekit.reports.prediction", "tracekit.reports.terminal")}[fmt]
        analysis = run(path, device=device, device_file=device_file, sustained=sustained, rules=rules, progress=on_progress,
                       model=options, workers=workers, meanwhile=importer(*renderers),
                       samples_per_step=samples_per_step, frames_per_step=frames_per_step, capture=capture, ncu=ncu,
                       bytes_from=bytes_from, step=step)
        projected = _what_if(analysis, what_if, device_file, samples_per_step, frames_per_step) if what_if else None
        if out_dir:
            from tracekit.reports.bundle import write_bundle

            written = write_bundle(analysis, out_dir, top, summary_extra={"what_if": projected} if what_if else None)
    freeze_heap()
    first_screen = fmt == "table" and not full
    for warning in _shown_warnings(analysis) if first_screen else analysis.warnings:
        warn(path, warning)

    from tracekit.reports.renderer import RenderOptions

    # the warnings are on stderr already; Markdown on stdout links no images (no bundle beside it)
    show(fmt, analysis, RenderOptions(top=top, warnings=False, full=not first_screen,
                                      json_extra={"what_if": projected} if what_if else {}))
    if ncu is not None and fmt != "json":  # JSON carries it in coverage.ncu
        from tracekit.reports import ncu as ncu_section

        click.echo(ncu_section.to_markdown(analysis.coverage["ncu"]) if fmt == "markdown" else ncu_section.to_text(analysis.coverage["ncu"]),
                   nl=False)
    if out_dir:
        click.echo(f"tracekit: wrote {len(written)} files to {safe(out_dir)}", err=True)
    if to_mlflow:
        _log_to_mlflow(analysis, mlflow_run, top)


def _shown_warnings(analysis) -> list[str]:
    """The warnings the first screen keeps on stderr: what is wrong with the trace (it says so
    first). The flags' paragraphs (a figure past a physical limit) are in --full and the bundle;
    the first screen marks the figure and counts the flags in its notes."""
    from tracekit.analysis.plausibility import warnings as flag_warnings

    flagged = set(flag_warnings(analysis.flags))
    return [w for w in analysis.warnings if w not in flagged]


def _what_if(analysis, targets: tuple[str, ...], device_file, samples_per_step, frames_per_step) -> dict | None:
    """The run projected onto each --what-if GPU (tracekit.api.what_if); None for a trace with
    no GPU work or no known GPU, which cannot be projected (the analysis' warnings say why)."""
    from tracekit.api import what_if

    if not len(analysis.kernels) or analysis.device is None:
        return None
    return what_if(analysis, list(targets), device_file=device_file, samples_per_step=samples_per_step, frames_per_step=frames_per_step)


def _check_mlflow(paths: tuple[str, ...]) -> None:
    """Before any work: --mlflow needs MLflow installed and logs one trace's analysis."""
    import importlib.util
    import os

    if importlib.util.find_spec("mlflow") is None:
        raise click.UsageError("--mlflow needs MLflow: pip install 'tracekit[mlflow]'")
    if not os.environ.get("MLFLOW_TRACKING_URI", "").strip():
        # Without one MLflow falls back to a local file store, which current MLflow refuses.
        raise click.UsageError("--mlflow needs a tracking server: set MLFLOW_TRACKING_URI=http://HOST:PORT "
                               "(a local one: mlflow server --host 127.0.0.1 --port 5000; see docs/compare.md)")
    if len(paths) > 1 or os.path.isdir(paths[0]):
        raise click.UsageError("--mlflow logs one trace's analysis; give one trace (run it once per rank)")
    from tracekit.integrations.mlflow import check_server

    check_server(os.environ["MLFLOW_TRACKING_URI"].strip())


def _log_to_mlflow(analysis, run_id: str | None, top: int) -> None:
    import os

    from tracekit.integrations.mlflow import log_analysis

    from mlflow.exceptions import MlflowException

    try:
        with status("logging to MLflow"):
            run_id = log_analysis(analysis, run_id=run_id, top=top)
    except MlflowException as exc:  # a run that does not exist, a store that cannot be reached
        from tracekit.integrations.mlflow import masked

        uri = os.environ.get("MLFLOW_TRACKING_URI")
        raise TraceError(f"MLflow run {run_id}" if run_id else "MLflow", masked(str(exc.message).splitlines()[0], uri)) from None
    click.echo(f"tracekit: logged to MLflow run {run_id}", err=True)


def _analyze_ranks(paths, device, device_file, rules, sustained, fmt, out_dir, top, workers, scheduler, threshold,
                   full: bool = False) -> None:
    from tracekit.ranks.executor import analyze_ranks
    from tracekit.reports import ranks as render

    with status(f"analysing {len(paths)} inputs"):
        multi = analyze_ranks(paths, device=device, device_file=device_file, rules=rules, sustained=sustained,
                              workers=workers, scheduler=scheduler, straggler_threshold=threshold)
        written = render.write_bundle(multi, out_dir, top) if out_dir else []
    for path, why in multi.unreadable:  # the sound ranks are reported; each bad input is named
        warn(path, f"left out of the job's report: {why}")
    first_screen = fmt == "table" and not full
    for r in multi.ranks:
        for warning in _shown_warnings(r.analysis) if first_screen else r.analysis.warnings:
            warn(r.path, warning)
    emit(fmt, json=lambda: render.to_json(multi), markdown=lambda: render.to_markdown(multi, top),
         table=(lambda: render.render_first_screen(multi, console())) if first_screen else lambda: render.render_console(multi, console(), top))
    if out_dir:
        click.echo(f"tracekit: wrote {len(written)} files to {safe(out_dir)}", err=True)
