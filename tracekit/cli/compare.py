"""`tracekit diff` and `tracekit check`: compare two runs; gate one on expectations."""

from __future__ import annotations

import os
import sys

import click

from tracekit.cli.common import (CHECK_FAILED, console, device_options, emit, exit_if_reader_gone, format_option, min_change_option,
                                 model_from, model_options, status, step_option, warn)


@click.command()
@click.argument("base")
@click.argument("new")
@format_option()
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Write diff.json and diff.md here.")
@click.option("--force", is_flag=True, help="In --out DIR, replace a diff.json or diff.md that tracekit did not write.")
@click.option("--top", default=15, show_default=True, type=click.IntRange(1, 10_000), help="How many ops and kernels to list.")
@click.option("--rules", type=click.Path(dir_okay=False), help="TOML attribution rules for both traces.")
@device_options
@min_change_option
@step_option
@model_options
def diff(base: str, new: str, fmt: str, out_dir: str | None, top: int, rules: str | None, device: str | None, device_file: str | None,
         min_change: float, step: str | None = None, force: bool = False, **model) -> None:
    """What changed between two runs, like with like: steps, phase x block, ops and kernels
    per call, collectives; each change with its interval and verdict (faster, slower,
    within noise).

    BASE and NEW are traces (any format, any GPU), stored summary.json files, or two
    directories of one trace per rank (a diff per rank and of the cross-rank summary)."""
    from tracekit.compare import diff as compare

    options = model_from(**model)
    from tracekit.reports import diff as render
    from tracekit.reports.bundle import check_out_dir

    if out_dir is not None:  # before the work; --out '' is an error, not a silent no-op
        check_out_dir(out_dir, "--out", inputs=(base, new, rules), names=render.FILES, force=force)
    if os.path.isdir(base) or os.path.isdir(new):
        if not (os.path.isdir(base) and os.path.isdir(new)):
            raise click.UsageError("give two directories of per-rank traces, or two traces")
        if options is not None or step is not None:
            raise click.UsageError(f"{'--model' if options is not None else '--step'} works on one trace at a time")
        _diff_ranks(base, new, fmt, out_dir, top, rules, device, device_file, min_change)
        return
    with status("analysing both runs"):
        result = compare(base, new, device=device, rules=rules, min_change=min_change, device_file=device_file, model=options, step=step)
    for warning in result["warnings"]:
        warn(None, warning)
    if out_dir is not None:
        written = render.write(result, out_dir, top)
    emit(fmt, json=lambda: render.to_json(result), markdown=lambda: render.to_markdown(result, top), markdown_newline=False,
         table=lambda: render.render_console(result, console(), top))
    if out_dir is not None:
        click.echo(f"tracekit: wrote {len(written)} files to {out_dir}", err=True)


def _diff_ranks(base: str, new: str, fmt: str, out_dir: str | None, top: int, rules: str | None, device: str | None,
                device_file: str | None, min_change: float) -> None:
    from tracekit.compare.diff_ranks import diff_ranks
    from tracekit.reports import diff as render

    with status("analysing both runs' ranks"):
        result = diff_ranks([base], [new], device=device, rules=rules, min_change=min_change, device_file=device_file)
    for warning in result["warnings"]:
        warn(None, warning)
    if out_dir:
        written = render.write_ranks(result, out_dir, top)
    emit(fmt, json=lambda: render.to_json(result), markdown=lambda: render.ranks_markdown(result, top), markdown_newline=False,
         table=lambda: render.render_ranks(result, console(), top))
    if out_dir:
        click.echo(f"tracekit: wrote {len(written)} files to {out_dir}", err=True)


@click.command()
@click.argument("path")
@click.option("--expect", "expect_path", required=True, type=click.Path(dir_okay=False), help="TOML file of [[expect]] tables.")
@click.option("--baseline", help="A summary.json (or trace) to measure max_regression against.")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False), help="Also write the verdicts as JUnit XML here.")
@format_option()
@device_options
@click.option("--rules", type=click.Path(dir_okay=False), help="TOML attribution rules.")
@min_change_option
@step_option
def check(path: str, expect_path: str, baseline: str | None, junit_path: str | None, fmt: str, device: str | None,
          device_file: str | None, rules: str | None, min_change: float, step: str | None = None) -> None:
    """Check a trace or summary.json against expectations: exit 0 when all hold, 3 when any fails.

    A max_regression against --baseline fails only when the change is above its limit and
    beyond the noise (the interval over steps or calls excludes no change)."""
    from tracekit.compare import as_summary, check as run_check, load_expectations
    from tracekit.reports import check as render

    from tracekit.common.atomic import check_out_file

    check_out_file(junit_path, "--junit", inputs=(path, expect_path, baseline, rules))
    expectations = load_expectations(expect_path)
    if baseline is None:  # before the analysis, naming the file
        from tracekit.compare.check import require_baseline

        require_baseline(expectations, expect_path)
    with status(f"analysing {path}"):
        summary = as_summary(path, device=device, rules=rules, device_file=device_file, step=step)
        base = as_summary(baseline, device=device, rules=rules, device_file=device_file, step=step) if baseline else None
    for warning in summary.get("warnings") or []:
        warn(path, warning)
    verdicts = run_check(summary, expectations, base, min_change=min_change, source=expect_path)
    if junit_path is not None:
        from tracekit.reports.check import junit_xml
        from tracekit.common.atomic import write_file

        write_file(junit_path, junit_xml(verdicts, path))
    failed = not all(v.ok for v in verdicts)
    with exit_if_reader_gone(CHECK_FAILED if failed else 0):  # `| head` must not turn a failure into 0
        emit(fmt, json=lambda: render.to_json(verdicts, path), markdown=lambda: render.to_markdown(verdicts, path),
             markdown_newline=False, table=lambda: render.render_console(verdicts, console(), path))
    if failed:
        sys.exit(CHECK_FAILED)
