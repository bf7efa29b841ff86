"""`tracekit calibrate`: fit the roofline step model's efficiencies to measured steps."""

from __future__ import annotations

import click

from tracekit.cli.common import console, model_details, model_from, status


@click.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--model", "config", required=True, type=click.Path(), help="The model's Hugging Face config.json (or its directory).")
@click.option("--device", help="GPU to put every trace on; default: each trace's own.")
@click.option("--device-file", type=click.Path(dir_okay=False))
@model_details
@click.option("--out", "out_file", type=click.Path(dir_okay=False), help="Write the fitted factors here as JSON.")
def calibrate(paths: tuple[str, ...], config: str, device: str | None, device_file: str | None, out_file: str | None, **model) -> None:
    """Fit the roofline step model (bandwidth and matrix efficiency, per device) to measured steps."""
    from tracekit.api import calibrate as fit
    from tracekit.reports.atomic import check_out_file
    from tracekit.reports.prediction import render_calibration

    check_out_file(out_file, "--out", inputs=(*paths, config, device_file))

    with status(f"analysing {len(paths)} traces"):
        result = fit(list(paths), model_from(config, **model), device=device, device_file=device_file)
    render_calibration(result, console())
    if out_file is not None:
        from tracekit.reports.atomic import write_file
        from tracekit.strict_json import dumps

        write_file(out_file, dumps(result, indent=2) + "\n")
        click.echo(f"tracekit: wrote {out_file}", err=True)
    else:
        from tracekit.strict_json import dumps

        click.echo(dumps(result, indent=2))
