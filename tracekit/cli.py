"""Command line: parse options, call the API, pick a renderer. Nothing else lives here."""

from __future__ import annotations

import os
import sys

import click

from tracekit import __version__
from tracekit.errors import TraceError

FORMATS = click.Choice(["table", "json"])


def _load(path: str):
    from tracekit.api import load

    trace = load(path)
    for warning in trace.warnings:
        click.echo(f"tracekit: warning: {path}: {warning}", err=True)
    return trace


def _console():
    from rich.console import Console

    return Console(width=max(100, Console().width))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tracekit")
def cli() -> None:
    """Where the GPU time of a profiled run went, and how far it is from the roofline."""


@cli.command()
@click.argument("path")
@click.option("--format", "fmt", type=FORMATS, default="table", show_default=True)
@click.option("--top", default=10, show_default=True, help="How many kernels to list.")
def info(path: str, fmt: str, top: int) -> None:
    """What is in a trace: format, devices, event counts, link shares, top kernels."""
    from tracekit.inventory import inventory
    from tracekit.reports import info as render

    inv = inventory(_load(path), top=top)
    if fmt == "json":
        click.echo(render.to_json(inv))
    else:
        render.render_console(inv, _console())


@cli.command()
@click.argument("path")
@click.option("--format", "fmt", type=FORMATS, default="table", show_default=True)
@click.option("--top", default=15, show_default=True, help="How many kernels to list.")
def analyze(path: str, fmt: str, top: int) -> None:
    """Analyse a trace (for now: what `info` shows plus the top kernels)."""
    info.callback(path, fmt, top)


def main(argv: list[str] | None = None) -> None:
    debug = bool(os.environ.get("TRACEKIT_DEBUG"))
    try:
        cli.main(args=argv, prog_name="tracekit", standalone_mode=False)
    except TraceError as exc:
        click.echo(f"tracekit: error: {exc.path}: {exc.reason}", err=True)
        sys.exit(2)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2)
    except click.Abort:
        click.echo("tracekit: aborted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as exc:  # a bug in tracekit, not in the input
        if debug:
            raise
        click.echo(f"tracekit: internal error: {type(exc).__name__}: {exc} (set TRACEKIT_DEBUG=1 for a traceback)", err=True)
        sys.exit(1)
