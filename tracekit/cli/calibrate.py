"""`tracekit calibrate`: fit the roofline step model's efficiencies to measured steps."""

from __future__ import annotations

import click

from tracekit.cli.common import console, device_options, emit, format_option, model_details, model_from, status, warn


@click.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--model", "config", required=True, type=click.Path(), help="The model's Hugging Face config.json (or its directory).")
@device_options
@model_details
@format_option(("table", "json"))
@click.option("--out", "out_file", type=click.Path(dir_okay=False), help="Write the fitted factors here as JSON.")
def calibrate(paths: tuple[str, ...], config: str, device: str | None, device_file: str | None, fmt: str, out_file: str | None,
              **model) -> None:
    """Fit the roofline step model (bandwidth and matrix efficiency, per device) to measured steps."""
    from tracekit.api import calibrate as fit
    from tracekit.common.atomic import check_out_file
    from tracekit.reports.prediction import render_calibration
    from tracekit.strict_json import dumps

    check_out_file(out_file, "--out", inputs=(*paths, config, device_file))

    with status(f"analysing {len(paths)} traces"):
        result = fit(list(paths), model_from(config, **model), device=device, device_file=device_file)
    for left in result["left_out"]:  # never dropped from the fit without a word
        warn(left["path"], f"left out of the fit: {left['reason']}")
    if not result["traces"]:
        from tracekit.errors import TraceError

        why = "; ".join(f"{left['path']}: {left['reason']}" for left in result["left_out"])
        raise TraceError(paths[0], f"no trace can be used to calibrate ({why})")
    if out_file is not None:
        from tracekit.common.atomic import write_file

        write_file(out_file, dumps(result, indent=2) + "\n")
        click.echo(f"tracekit: wrote {out_file}", err=True)
    emit(fmt, json=lambda: dumps(result, indent=2), table=lambda: render_calibration(result, console()))
