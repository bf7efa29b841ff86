"""Command line: parse options, call the API, pick a renderer. Nothing else lives here."""

from __future__ import annotations

import contextlib
import os
import sys

import click

from tracekit import __version__
from tracekit.errors import TraceError

FORMATS = click.Choice(["table", "json"])
_WORKERS_HELP = "Processes that read a large JSON trace (default: one per core; 1: none)."


def _scan(path: str, workers: int | None = None, meanwhile=None):
    from tracekit.api import scan

    trace = scan(path, workers=workers, meanwhile=meanwhile)  # linked tables; no DataFrames for a Kineto trace
    for warning in trace.warnings:
        click.echo(f"tracekit: warning: {_safe(path)}: {_safe(warning)}", err=True)
    return trace


def _freeze_heap() -> None:
    """The trace and its analysis live until this process ends: move them out of the cyclic
    collector's sight, so that rendering's collections do not rescan millions of objects."""
    import gc

    gc.freeze()


def _importer(*modules: str):
    """A `meanwhile` for api.load / api.scan: imports the modules a command needs next while
    worker processes decode the trace, when this process would only wait for them."""

    def run() -> None:
        import importlib

        for name in modules:
            importlib.import_module(name)

    return run


def _console():
    from tracekit.reports.terminal import console

    return console()


def _safe(text) -> str:
    """A trace string (a path, a name inside a warning) for a line written to the terminal."""
    from tracekit.reports.text import plain_terminal

    return plain_terminal(text)


def _model_options(command):
    """--model and the options that go with it (shared by analyze)."""
    options = [
        click.option("--model", "config", type=click.Path(), help="The model's Hugging Face config.json (or its directory): costs what op shapes cannot, predicts each step."),
        click.option("--tp", type=click.IntRange(1, 4096), help="With --model: tensor-parallel degree (default: from the trace)."),
        click.option("--ep", type=click.IntRange(1, 4096), help="With --model: expert-parallel degree (default 1)."),
        click.option("--weight-dtype", type=click.Choice(["bf16", "fp16", "fp32", "fp8", "int8", "int4", "mxfp4", "nvfp4"]), help="With --model: stored weight format (default: from the config)."),
        click.option("--batch", type=click.IntRange(1, None), help="With --model: requests per step where the trace does not say."),
        click.option("--context", type=click.IntRange(0, None), help="With --model: KV tokens cached per request where the trace does not say."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _model(config: str | None, tp: int | None = None, ep: int | None = None, weight_dtype: str | None = None,
           batch: int | None = None, context: int | None = None):
    if config is None:
        if any(v is not None for v in (tp, ep, weight_dtype, batch, context)):
            raise click.UsageError("--tp, --ep, --weight-dtype, --batch and --context need --model")
        return None
    from tracekit.model import ModelOptions

    return ModelOptions(config, tp, ep, weight_dtype, batch, context)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tracekit")
def cli() -> None:
    """Where the GPU time of a profiled run went, and how far it is from the roofline."""


@cli.command()
@click.argument("path")
@click.option("--format", "fmt", type=FORMATS, default="table", show_default=True)
@click.option("--top", default=10, show_default=True, type=click.IntRange(1, 10_000), help="How many kernels to list.")
@click.option("--workers", type=click.IntRange(1, 256), help=_WORKERS_HELP)
def info(path: str, fmt: str, top: int, workers: int | None) -> None:
    """What is in a trace: format, devices, event counts, link shares, top kernels."""
    trace = _scan(path, workers, meanwhile=_importer("tracekit.trace.inventory", "tracekit.reports.info", "tracekit.reports.terminal"))
    from tracekit.trace.inventory import inventory
    from tracekit.reports import info as render

    inv = inventory(trace, top=top)
    if fmt == "json":
        click.echo(render.to_json(inv))
    else:
        render.render_console(inv, _console())


@cli.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--device", help="GPU to put the trace on (a key or name from `tracekit devices`); default: the trace's own.")
@click.option("--device-file", type=click.Path(dir_okay=False), help="TOML file with device specs (format: tracekit/hardware/devices.toml).")
@click.option("--rules", type=click.Path(dir_okay=False), help="TOML attribution rules that extend (or replace) the defaults.")
@click.option("--sustained", default=0.8, show_default=True, type=click.FloatRange(0.05, 1.0), help="Sustained share of peak memory bandwidth.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "markdown"]), default="table", show_default=True)
@click.option("--out", "out_dir", help="Write the report bundle (summary.json, report.md, report.html, parquet, csv, png) here.")
@click.option("--top", default=15, show_default=True, type=click.IntRange(1, 10_000), help="How many kernels and ops to list.")
@click.option("--workers", type=click.IntRange(1, 256), help=_WORKERS_HELP + " Several ranks: one process per rank, up to this many.")
@click.option("--scheduler", help="Run the ranks on a Dask cluster: tcp://HOST:PORT, or `local` to start one here.")
@click.option("--straggler-threshold", default=0.05, show_default=True, type=click.FloatRange(0.0, 10.0), help="A rank is a straggler when the other ranks wait for it at collectives, each on average, more than this share of the median step time.")
@click.option("--mlflow", "to_mlflow", is_flag=True, help="Log the headline metrics and the report bundle to MLflow (MLFLOW_TRACKING_URI).")
@click.option("--mlflow-run", help="The MLflow run to log to (implies --mlflow); default: a new run.")
@_model_options
def analyze(paths: tuple[str, ...], device: str | None, device_file: str | None, rules: str | None, sustained: float, fmt: str,
            out_dir: str | None, top: int, workers: int | None, scheduler: str | None, straggler_threshold: float,
            to_mlflow: bool = False, mlflow_run: str | None = None, **model) -> None:
    """Where the GPU time went: phase x block table, roofline, coverage, steps, collectives.

    One trace, or several (files or a directory), one per rank of a job: then each rank is
    analysed in parallel and a cross-rank report follows (stragglers, collective skew)."""
    import os

    model_options = _model(**model)
    if out_dir:
        from tracekit.reports.bundle import check_out_dir

        check_out_dir(out_dir)  # before the work: a bad --out should not cost a whole analysis
    to_mlflow = to_mlflow or bool(mlflow_run)
    if to_mlflow:
        _check_mlflow(paths)
    if len(paths) > 1 or os.path.isdir(paths[0]):
        if model_options is not None:
            raise click.UsageError("--model works on one trace at a time")
        _analyze_ranks(list(paths), device, device_file, rules, sustained, fmt, out_dir, top, workers, scheduler, straggler_threshold)
        return
    path = paths[0]
    from tracekit.api import analyze as run

    with _progress(f"reading {os.path.basename(path)}") as progress:
        renderers = {"json": (), "markdown": ("tracekit.reports.markdown",), "table": ("tracekit.reports.analyze", "tracekit.reports.prediction", "tracekit.reports.terminal")}[fmt]
        analysis = run(path, device=device, device_file=device_file, sustained=sustained, rules=rules, progress=progress,
                       model=model_options, workers=workers, meanwhile=_importer(*renderers))
        if out_dir:
            from tracekit.reports.bundle import write_bundle

            written = write_bundle(analysis, out_dir, top)
    _freeze_heap()
    for warning in analysis.warnings:
        click.echo(f"tracekit: warning: {_safe(path)}: {_safe(warning)}", err=True)
    if fmt == "json":
        click.echo(analysis.to_json(top))
    elif fmt == "markdown":
        from tracekit.reports import markdown

        click.echo(markdown.render(analysis, top, images=False))
    else:
        from tracekit.reports import analyze as render

        analysis.warnings = []  # already on stderr
        render.render_console(analysis, _console(), top)
    if out_dir:
        click.echo(f"tracekit: wrote {len(written)} files to {_safe(out_dir)}", err=True)
    if to_mlflow:
        _log_to_mlflow(analysis, mlflow_run, top)


def _check_mlflow(paths: tuple[str, ...]) -> None:
    """Before any work: --mlflow needs MLflow installed and logs one trace's analysis."""
    import importlib.util
    import os

    if importlib.util.find_spec("mlflow") is None:
        raise click.UsageError("--mlflow needs MLflow: pip install 'tracekit[mlflow]'")
    if len(paths) > 1 or os.path.isdir(paths[0]):
        raise click.UsageError("--mlflow logs one trace's analysis; give one trace (run it once per rank)")


def _log_to_mlflow(analysis, run_id: str | None, top: int) -> None:
    from tracekit.integrations.mlflow import log_analysis

    from mlflow.exceptions import MlflowException

    try:
        with _status("logging to MLflow"):
            run_id = log_analysis(analysis, run_id=run_id, top=top)
    except MlflowException as exc:  # a run that does not exist, a store that cannot be reached
        raise TraceError(f"MLflow run {run_id}" if run_id else "MLflow", str(exc.message).splitlines()[0]) from None
    click.echo(f"tracekit: logged to MLflow run {run_id}", err=True)


def _analyze_ranks(paths, device, device_file, rules, sustained, fmt, out_dir, top, workers, scheduler, threshold) -> None:
    from tracekit.ranks.executor import analyze_ranks
    from tracekit.reports import ranks as render

    with _status(f"analysing {len(paths)} inputs"):
        multi = analyze_ranks(paths, device=device, device_file=device_file, rules=rules, sustained=sustained,
                              workers=workers, scheduler=scheduler, straggler_threshold=threshold)
        written = render.write_bundle(multi, out_dir, top) if out_dir else []
    for r in multi.ranks:
        for warning in r.analysis.warnings:
            click.echo(f"tracekit: warning: {_safe(r.path)}: {_safe(warning)}", err=True)
    if fmt == "json":
        click.echo(render.to_json(multi))
    elif fmt == "markdown":
        click.echo(render.to_markdown(multi, top))
    else:
        render.render_console(multi, _console(), top)
    if out_dir:
        click.echo(f"tracekit: wrote {len(written)} files to {_safe(out_dir)}", err=True)


@cli.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--model", "config", required=True, type=click.Path(), help="The model's Hugging Face config.json (or its directory).")
@click.option("--device", help="GPU to put every trace on; default: each trace's own.")
@click.option("--device-file", type=click.Path(dir_okay=False))
@click.option("--tp", type=click.IntRange(1, 4096), help="Tensor-parallel degree (default: from the trace).")
@click.option("--ep", type=click.IntRange(1, 4096), help="Expert-parallel degree (default 1).")
@click.option("--weight-dtype", type=click.Choice(["bf16", "fp16", "fp32", "fp8", "int8", "int4", "mxfp4", "nvfp4"]))
@click.option("--batch", type=click.IntRange(1, None), help="Requests per step where the trace does not say.")
@click.option("--context", type=click.IntRange(0, None), help="KV tokens cached per request where the trace does not say.")
@click.option("--out", "out_file", type=click.Path(dir_okay=False), help="Write the fitted factors here as JSON.")
def calibrate(paths: tuple[str, ...], config: str, device: str | None, device_file: str | None, out_file: str | None, **model) -> None:
    """Fit the roofline step model (bandwidth and matrix efficiency, per device) to measured steps."""
    import json

    from tracekit.api import calibrate as fit
    from tracekit.reports.prediction import render_calibration

    with _status(f"analysing {len(paths)} traces"):
        result = fit(list(paths), _model(config, **model), device=device, device_file=device_file)
    render_calibration(result, _console())
    if out_file:
        from tracekit.reports.atomic import write_file
        from tracekit.strict_json import dumps

        write_file(out_file, dumps(result, indent=2) + "\n")
        click.echo(f"tracekit: wrote {out_file}", err=True)
    else:
        from tracekit.strict_json import dumps

        click.echo(dumps(result, indent=2))


@cli.command()
@click.argument("path")
@click.option("--perfetto", "out", required=True, type=click.Path(dir_okay=False), help="Output JSON for Perfetto / chrome://tracing.")
@click.option("--device", help="GPU to put the trace on; default: the trace's own.")
@click.option("--device-file", type=click.Path(dir_okay=False))
@click.option("--rules", type=click.Path(dir_okay=False))
def export(path: str, out: str, device: str | None, device_file: str | None, rules: str | None) -> None:
    """Write the timeline with every kernel annotated (phase, block, FLOPs, bytes, efficiency, bound)."""
    from tracekit.api import analyze as run
    from tracekit.reports.perfetto import write_perfetto

    with _status(f"analysing {path}"):
        analysis = run(path, device=device, device_file=device_file, rules=rules)
        n = write_perfetto(analysis, out)
    click.echo(f"tracekit: wrote {n:,} events to {_safe(out)}", err=True)


@cli.command()
@click.argument("base")
@click.argument("new")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "markdown"]), default="table", show_default=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Write diff.json and diff.md here.")
@click.option("--top", default=15, show_default=True, type=click.IntRange(1, 10_000), help="How many ops and kernels to list.")
@click.option("--rules", type=click.Path(dir_okay=False), help="TOML attribution rules for both traces.")
def diff(base: str, new: str, fmt: str, out_dir: str | None, top: int, rules: str | None) -> None:
    """What changed between two runs: steps, phase x block, ops, kernels, collectives.

    BASE and NEW are traces (any format, any GPU) or stored summary.json files."""
    from tracekit.compare import diff as compare
    from tracekit.reports import diff as render

    with _status("analysing both runs"):
        result = compare(base, new, rules=rules)
    for warning in result["warnings"]:
        click.echo(f"tracekit: warning: {warning}", err=True)
    if out_dir:
        written = render.write(result, out_dir, top)
    if fmt == "json":
        click.echo(render.to_json(result))
    elif fmt == "markdown":
        click.echo(render.to_markdown(result, top), nl=False)
    else:
        render.render_console(result, _console(), top)
    if out_dir:
        click.echo(f"tracekit: wrote {len(written)} files to {out_dir}", err=True)


@cli.command()
@click.argument("path")
@click.option("--expect", "expect_path", required=True, type=click.Path(dir_okay=False), help="TOML file of [[expect]] tables.")
@click.option("--baseline", help="A summary.json (or trace) to measure max_regression against.")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False), help="Also write the verdicts as JUnit XML here.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "markdown"]), default="table", show_default=True)
@click.option("--device", help="GPU to put a trace on; default: the trace's own.")
@click.option("--rules", type=click.Path(dir_okay=False), help="TOML attribution rules.")
def check(path: str, expect_path: str, baseline: str | None, junit_path: str | None, fmt: str, device: str | None, rules: str | None) -> None:
    """Check a trace or summary.json against expectations: exit 0 when all hold, 3 when any fails."""
    from tracekit.compare import as_summary, check as run_check, load_expectations
    from tracekit.reports import check as render

    expectations = load_expectations(expect_path)
    with _status(f"analysing {path}"):
        summary = as_summary(path, device=device, rules=rules)
        base = as_summary(baseline, device=device, rules=rules) if baseline else None
    for warning in summary.get("warnings") or []:
        click.echo(f"tracekit: warning: {path}: {warning}", err=True)
    verdicts = run_check(summary, expectations, base)
    if junit_path:
        from tracekit.compare.check import junit_xml
        from tracekit.reports.atomic import write_file

        write_file(junit_path, junit_xml(verdicts, path))
    failed = not all(v.ok for v in verdicts)
    with _exit_if_reader_gone(CHECK_FAILED if failed else 0):  # `| head` must not turn a failure into 0
        if fmt == "json":
            click.echo(render.to_json(verdicts, path))
        elif fmt == "markdown":
            click.echo(render.to_markdown(verdicts, path), nl=False)
        else:
            render.render_console(verdicts, _console(), path)
    if failed:
        sys.exit(CHECK_FAILED)


# `tracekit check`: an expectation failed (2 stays bad input, 1 a bug in tracekit).
CHECK_FAILED = 3


@contextlib.contextmanager
def _progress(description: str):
    """A progress bar on stderr for the events read, only when stderr is a terminal; yields
    the callback to hand to tracekit.load / analyze (None otherwise)."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def _status(message: str):
    """A spinner on stderr for long loads, only when stderr is a terminal."""
    if not sys.stderr.isatty():
        return contextlib.nullcontext()
    from rich.console import Console

    return Console(stderr=True).status(message)


@cli.command()
@click.option("--device-file", type=click.Path(dir_okay=False), help="Also list the devices of this TOML file.")
def devices(device_file: str | None) -> None:
    """The GPUs tracekit knows, with their peaks and the names they match."""
    from tracekit.hardware import builtin_devices, load_device_file
    from tracekit.reports.analyze import render_devices

    known = builtin_devices()
    if device_file:
        known.update(load_device_file(device_file))
    render_devices(known, _console())


def _reader_gone(code: int = 0) -> None:
    """The reader of stdout went away (`| head`): done, quietly, with the command's own exit
    code (0 unless it says otherwise). stdout is pointed at /dev/null so that the
    interpreter's last flush of the unwritten rest cannot fail again."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.__stdout__.fileno())
    sys.exit(code)


@contextlib.contextmanager
def _exit_if_reader_gone(code: int):
    """Output of a command whose exit code means something (`check`): if the reader goes
    away while it is written, exit with that code, not click's 1 or the 0 of `| head`."""
    try:
        yield
    except BrokenPipeError:
        _reader_gone(code)


def run() -> None:
    """The `tracekit` command itself (console script, `python -m tracekit`): main(), then the
    process ends at once. Exit handlers still run and the streams are flushed; what is
    skipped is the interpreter freeing, one by one, the millions of objects a trace became
    (~50 ms after `analyze` of a 55 MB trace, 6% of the run). main() stays an ordinary
    function for callers that run the CLI inside their own process."""
    import atexit

    try:
        main()
        code = 0
    except SystemExit as exc:
        if exc.code is not None and not isinstance(exc.code, int):
            raise
        code = exc.code or 0
    import threading

    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.current_thread()):
        sys.exit(code)  # a thread still at work (a Dask client, ...): the interpreter joins it first
    atexit._run_exitfuncs()  # what the interpreter would run at exit (logging, multiprocessing, ...)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> None:
    debug = bool(os.environ.get("TRACEKIT_DEBUG"))
    # A path with bytes that are not UTF-8 reaches Python as surrogates: print them escaped
    # rather than fail on them (stderr already does this).
    with contextlib.suppress(AttributeError, ValueError):
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        cli.main(args=argv, prog_name="tracekit", standalone_mode=False)
    except TraceError as exc:
        click.echo(f"tracekit: error: {_safe(exc.path)}: {_safe(exc.reason)}", err=True)
        sys.exit(2)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except SystemExit as exc:
        # click turns a closed stdout (`| head`) into exit 1 after wrapping the streams in
        # its PacifyFlushWrapper: the reader went away, which is no error of tracekit's.
        if exc.code == 1 and isinstance(sys.stdout, click.utils.PacifyFlushWrapper):
            _reader_gone()
        raise
    except click.ClickException as exc:  # a usage error: one line too, like every error
        hint = f" (see `tracekit {exc.ctx.info_name} --help`)" if isinstance(exc, click.UsageError) and exc.ctx and exc.ctx.parent else ""
        click.echo(f"tracekit: error: {exc.format_message()}{hint}".replace("\n", " "), err=True)
        sys.exit(2)
    except click.Abort:
        click.echo("tracekit: aborted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        _reader_gone()
    except Exception as exc:  # a bug in tracekit, not in the input
        if debug:
            raise
        click.echo(f"tracekit: internal error: {type(exc).__name__}: {exc} (set TRACEKIT_DEBUG=1 for a traceback)", err=True)
        sys.exit(1)
