"""`tracekit project`: the same run on another GPU (tracekit.projection)."""

from __future__ import annotations

import click

from tracekit.cli.common import WORKERS_HELP, checked_device, console, emit, format_option, freeze_heap, step_option, warn


@click.command()
@click.argument("path")
@click.option("--to", "target", callback=checked_device, help="The GPU to project onto (a key or name from `tracekit devices`).")
@click.option("--tp", type=click.IntRange(1, 1024), help="The tensor-parallel degree to project to (PATH: one rank's trace, or a directory of the ranks of one job).")
@click.option("--run-tp", type=click.IntRange(1, 1024), help="With --tp: the run's own TP degree, where the model config's per-rank shapes and the collectives do not say.")
@click.option("--model", "model", type=click.Path(dir_okay=False), help="With --tp: the model's config.json (per-rank widths = config widths / TP).")
@click.option("--device", callback=checked_device, help="The GPU the trace ran on, where the trace does not name it (nsys exports without TARGET_INFO_GPU).")
@click.option("--device-file", type=click.Path(dir_okay=False), help="TOML file with device specs (for --to and --device).")
@click.option("--rules", type=click.Path(dir_okay=False), help="TOML attribution rules that extend the defaults.")
@click.option("--batch", "--samples-per-step", "samples", type=click.IntRange(1, None), help="Samples per training step (throughput) where the trace does not say.")
@click.option("--frames-per-step", type=click.IntRange(1, None), help="Frames (or images) each pipeline step produces, where the annotations do not say.")
@format_option()
@click.option("--workers", type=click.IntRange(1, 256), help=WORKERS_HELP)
@step_option
def project(path: str, target: str | None, tp: int | None, run_tp: int | None, model: str | None, device: str | None, device_file: str | None, rules: str | None, samples: int | None,
            frames_per_step: int | None, fmt: str, workers: int | None, step: str | None = None) -> None:
    """Project a trace onto another GPU: busy time, step time and throughput, per block and stage.

    Each kernel by what bounds it on the source: the part of its time its roof sets (matrix
    or vector peak for its dtype, HBM, interconnect, host link) follows the target's roof, the
    rest (latency, launch, tails) keeps its time; the host timeline is replayed apart, so a
    launch-bound step stays launch-bound. With --tp N: the same run at TP degree N (sharded
    blocks scale by TP/N, replicated ones stay, collectives follow the ring); --to and --tp
    together: at TP N on the other GPU. See docs/projection.md."""
    from tracekit.errors import TraceError

    if target is None and tp is None:
        raise TraceError(path, "say what to project to: --to DEVICE, --tp N, or both")
    if tp is not None:
        if step is not None:
            raise click.UsageError("--step works with --to, not with --tp")
        _project_tp(path, tp, target, run_tp, model, device, device_file, rules, samples, frames_per_step, fmt, workers)
        return
    from tracekit.api import project as run

    p = run(path, target, device=device, device_file=device_file, rules=rules, workers=workers, samples_per_step=samples,
            frames_per_step=frames_per_step, step=step)
    _show(path, p, fmt, "render_console", "render_markdown")


def _project_tp(path, tp, target, run_tp, model, device, device_file, rules, samples, frames_per_step, fmt, workers) -> None:
    import os

    from tracekit.api import project_tp
    from tracekit.ranks.tp import project_tp_job

    p = (project_tp_job if os.path.isdir(path) else project_tp)(path, tp, run_tp=run_tp, model=model, device=device, device_file=device_file, rules=rules, workers=workers,
                   samples_per_step=samples, frames_per_step=frames_per_step, to=target)
    _show(path, p, fmt, "render_tp_console", "render_tp_markdown")


def _show(path: str, p, fmt: str, console_renderer: str, markdown_renderer: str) -> None:
    """A projection's warnings on stderr, then the projection in the chosen format through
    the named renderers of tracekit.reports.projection (imported only when used)."""
    freeze_heap()
    for w in p.warnings:
        warn(path, w)

    def renderer(name: str):
        from tracekit.reports import projection

        return getattr(projection, name)

    emit(fmt, json=p.to_json, table=lambda: renderer(console_renderer)(p, console()),
         markdown=lambda: renderer(markdown_renderer)(p))
