"""`tracekit info`, `export` and `devices`: what is in a trace, its annotated timeline, the
GPUs tracekit knows."""

from __future__ import annotations

import click

from tracekit.cli.common import WORKERS_HELP, checked_device, emit, format_option, console, importer, safe, scan_trace, status


@click.command()
@click.argument("path")
@format_option(("table", "json"))
@click.option("--top", default=10, show_default=True, type=click.IntRange(1, 10_000), help="How many kernels to list.")
@click.option("--workers", type=click.IntRange(1, 256), help=WORKERS_HELP)
def info(path: str, fmt: str, top: int, workers: int | None) -> None:
    """What is in a trace: format, devices, event counts, link shares, top kernels."""
    trace = scan_trace(path, workers, meanwhile=importer("tracekit.trace.inventory", "tracekit.reports.info", "tracekit.reports.terminal"))
    from tracekit.trace.inventory import inventory
    from tracekit.reports import info as render

    inv = inventory(trace, top=top)
    emit(fmt, json=lambda: render.to_json(inv), table=lambda: render.render_console(inv, console()))


@click.command()
@click.argument("path")
@click.option("--perfetto", "out", required=True, type=click.Path(dir_okay=False), help="Output JSON for Perfetto / chrome://tracing.")
@click.option("--device", callback=checked_device, help="GPU to put the trace on; default: the trace's own.")
@click.option("--device-file", type=click.Path(dir_okay=False))
@click.option("--rules", type=click.Path(dir_okay=False))
def export(path: str, out: str, device: str | None, device_file: str | None, rules: str | None) -> None:
    """Write the timeline with every kernel annotated (phase, block, FLOPs, bytes, efficiency, bound)."""
    from tracekit.api import analyze as run
    from tracekit.common.atomic import check_out_file
    from tracekit.reports.perfetto import write_perfetto

    check_out_file(out, "--perfetto", inputs=(path, device_file, rules))

    with status(f"analysing {path}"):
        analysis = run(path, device=device, device_file=device_file, rules=rules)
        n = write_perfetto(analysis, out)
    click.echo(f"tracekit: wrote {n:,} events to {safe(out)}", err=True)


@click.command()
@click.option("--device-file", type=click.Path(dir_okay=False), help="Also list the devices of this TOML file.")
def devices(device_file: str | None) -> None:
    """The GPUs tracekit knows, with their peaks and the names they match."""
    from tracekit.hardware import builtin_devices, load_device_file
    from tracekit.reports.devices import render_devices

    known = builtin_devices()
    if device_file:
        known.update(load_device_file(device_file))
    render_devices(known, console())
