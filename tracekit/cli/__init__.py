"""The command line: takes argv, calls the API (tracekit.api), hands the result to one
renderer. One module per command (analyze, calibrate, compare: diff and check, trace: info,
export and devices); common.py holds the shared option groups and the output dispatcher;
main.py the group and the exit codes."""

from tracekit.cli.main import cli, main, run

__all__ = ["cli", "main", "run"]
