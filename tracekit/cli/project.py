"""`tracekit project`: the same run on another GPU (tracekit.projection)."""

from __future__ import annotations

import click

from tracekit.cli.common import WORKERS_HELP, console, emit, format_option, freeze_heap, warn


@click.command()
@click.argument("path")
@click.option("--to", "target", required=True, help="The GPU to project onto (a key or name from `tracekit devices`).")
@click.option("--device", help="The GPU the trace ran on, where the trace does not name it (nsys exports without TARGET_INFO_GPU).")
@click.option("--device-file", type=click.Path(dir_okay=False), help="TOML file with device specs (for --to and --device).")
@click.option("--rules", type=click.Path(dir_okay=False), help="TOML attribution rules that extend the defaults.")
@click.option("--batch", "--samples-per-step", "samples", type=click.IntRange(1, None), help="Samples per training step (throughput) where the trace does not say.")
@click.option("--frames-per-step", type=click.IntRange(1, None), help="Frames (or images) each pipeline step produces, where the annotations do not say.")
@format_option()
@click.option("--workers", type=click.IntRange(1, 256), help=WORKERS_HELP)
def project(path: str, target: str, device: str | None, device_file: str | None, rules: str | None, samples: int | None,
            frames_per_step: int | None, fmt: str, workers: int | None) -> None:
    """Project a trace onto another GPU: busy time, step time and throughput, per block and stage.

    Each kernel keeps its achieved fraction of its binding roof (matrix or vector peak for
    its dtype, HBM, interconnect, host link) and is rescaled by the target's roof; host time
    and launch overhead stay as measured. See README, "Projection"."""
    from tracekit.api import project as run

    p = run(path, target, device=device, device_file=device_file, rules=rules, workers=workers, samples_per_step=samples,
            frames_per_step=frames_per_step)
    freeze_heap()
    for w in p.warnings:
        warn(path, w)

    def table() -> None:
        from tracekit.reports.projection import render_console

        render_console(p, console())

    def markdown() -> str:
        from tracekit.reports.projection import render_markdown

        return render_markdown(p)

    emit(fmt, json=p.to_json, table=table, markdown=markdown)
