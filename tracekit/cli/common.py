"""What the commands share: option groups, the output dispatcher, trace-string safety on
stderr, progress on a terminal, and the exits for a reader that goes away."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Callable

import click

WORKERS_HELP = "Processes that read a large JSON trace (default: one per core; 1: none)."
FORMATS = ("table", "json", "markdown")
WEIGHT_DTYPES = ["bf16", "fp16", "fp32", "fp8", "int8", "int4", "mxfp4", "nvfp4"]
KV_DTYPES = ["bf16", "fp16", "fp32", "fp8", "nvfp4"]  # tracekit.model.quant.KV_BYTES
# `tracekit check`: an expectation failed (2 stays bad input, 1 a bug in tracekit).
CHECK_FAILED = 3


def scan_trace(path: str, workers: int | None = None, meanwhile=None):
    from tracekit.api import scan

    trace = scan(path, workers=workers, meanwhile=meanwhile)  # linked tables; no DataFrames for a Kineto trace
    for warning in trace.warnings:
        click.echo(f"tracekit: warning: {safe(path)}: {safe(warning)}", err=True)
    return trace


def freeze_heap() -> None:
    """The trace and its analysis live until this process ends: move them out of the cyclic
    collector's sight, so that rendering's collections do not rescan millions of objects."""
    import gc

    gc.freeze()


def importer(*modules: str):
    """A `meanwhile` for api.load / api.scan: imports the modules a command needs next while
    worker processes decode the trace, when this process would only wait for them."""

    def run() -> None:
        import importlib

        for name in modules:
            importlib.import_module(name)

    return run


def console():
    from tracekit.reports.terminal import console

    return console()


def safe(text) -> str:
    """A trace string (a path, a name inside a warning) for a line written to the terminal."""
    from tracekit.reports.text import plain_terminal

    return plain_terminal(text)


def checked_device(ctx, param, value: str | None) -> str | None:
    """Checked before any trace is read (tracekit.hardware.check_device_name)."""
    if value is not None:
        from tracekit.hardware import MAX_NAME

        if len(value.strip()) > MAX_NAME:
            raise click.BadParameter(f"{len(value.strip()):,} characters long; a device key or name has at most {MAX_NAME} "
                                     "(see `tracekit devices`)")
    return value


def device_options(command):
    """--device and --device-file: the GPU a trace is put on."""
    options = [
        click.option("--device", callback=checked_device, help="GPU to put the trace on (a key or name from `tracekit devices`); default: the trace's own."),
        click.option("--device-file", type=click.Path(dir_okay=False), help="TOML file with device specs (format: tracekit/hardware/devices.toml)."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def min_change_option(command):
    """--min-change: the smallest change diff and check call faster or slower (tracekit.compare.noise)."""
    return click.option("--min-change", default=0.02, show_default=True, type=click.FloatRange(0.0, 10.0),
                        help="A change smaller than this share is within noise even when its interval excludes no change.")(command)


def model_options(command):
    """--model and the options that go with it."""
    return model_details(click.option("--model", "config", type=click.Path(), help="The model's Hugging Face config.json (or its directory): costs what op shapes cannot, predicts each step.")(command))


def model_details(command):
    """The options that describe the model's deployment (with --model, or calibrate's own)."""
    options = [
        click.option("--tp", type=click.IntRange(1, 4096), help="With --model: tensor-parallel degree (default: from the trace)."),
        click.option("--ep", type=click.IntRange(1, 4096), help="With --model: expert-parallel degree (default 1)."),
        click.option("--weight-dtype", type=click.Choice(WEIGHT_DTYPES), help="With --model: stored weight format (default: from the config)."),
        click.option("--batch", type=click.IntRange(1, None), help="With --model: requests per step where the trace does not say."),
        click.option("--context", type=click.IntRange(0, None), help="With --model: KV tokens cached per request where the trace does not say."),
        click.option("--kv-dtype", type=click.Choice(KV_DTYPES), help="With --model: KV-cache format (default: the checkpoint's, else the activations')."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def model_from(config: str | None, tp: int | None = None, ep: int | None = None, weight_dtype: str | None = None,
           batch: int | None = None, context: int | None = None, kv_dtype: str | None = None):
    if config is None:
        if any(v is not None for v in (tp, ep, weight_dtype, batch, context, kv_dtype)):
            raise click.UsageError("--tp, --ep, --weight-dtype, --batch, --context and --kv-dtype need --model")
        return None
    from tracekit.model import ModelOptions

    return ModelOptions(config, tp, ep, weight_dtype, batch, context, kv_dtype)


def checked_step(ctx, param, value: str | None) -> str | None:
    """--step: a range name or a regular expression; one that does not compile is a usage error."""
    if value is None:
        return None
    import re

    try:
        re.compile(value)
    except re.error as e:
        raise click.BadParameter(f"not a range name or regular expression: {e}") from None
    return value


def step_option(command):
    return click.option("--step", callback=checked_step, help="The range or Python frame (its name, or a regular expression) "
                        "that marks one step; default: the trace's own steps, else what repeats in it.")(command)


def format_option(choices: tuple[str, ...] = FORMATS):
    return click.option("--format", "fmt", type=click.Choice(list(choices)), default="table", show_default=True)


def show(fmt: str, analysis, options) -> None:
    """The output dispatcher for an Analysis: the --format's renderer (tracekit.reports.renderer)
    makes the text, stdout gets it as made (the terminal report with its colour codes)."""
    from tracekit.reports.renderer import renderer

    out = renderer(fmt).render(analysis, options)
    if isinstance(out, bytes):
        sys.stdout.buffer.write(out)
    elif fmt == "table":
        sys.stdout.write(out)
    else:
        click.echo(out)
    sys.stdout.flush()


def emit(fmt: str, *, json: Callable[[], str], table: Callable[[], None], markdown: Callable[[], str] | None = None,
         markdown_newline: bool = True) -> None:
    """The output dispatcher for the other results (a diff, ranks, an inventory, a projection):
    JSON and Markdown to stdout as text, tables through the terminal renderer (`table()` prints)."""
    if fmt == "json":
        click.echo(json())
    elif fmt == "markdown" and markdown is not None:
        click.echo(markdown(), nl=markdown_newline)
    else:
        table()


def warn(path: str | None, message: str) -> None:
    """A warning on stderr; the path and the message are trace strings."""
    click.echo(f"tracekit: warning: {safe(path) + ': ' if path else ''}{safe(message)}", err=True)


@contextlib.contextmanager
def progress(description: str):
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


def status(message: str):
    """A spinner on stderr for long loads, only when stderr is a terminal."""
    if not sys.stderr.isatty():
        return contextlib.nullcontext()
    from rich.console import Console

    return Console(stderr=True).status(message)


def reader_gone(code: int = 0) -> None:
    """The reader of stdout went away (`| head`): done, quietly, with the command's own exit
    code (0 unless it says otherwise). stdout is pointed at /dev/null so that the
    interpreter's last flush of the unwritten rest cannot fail again."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.__stdout__.fileno())
    sys.exit(code)


@contextlib.contextmanager
def exit_if_reader_gone(code: int):
    """Output of a command whose exit code means something (`check`): if the reader goes
    away while it is written, exit with that code, not click's 1 or the 0 of `| head`."""
    try:
        yield
    except BrokenPipeError:
        reader_gone(code)
