"""Compare analyses: diff two runs, check one against expectations (as data) and a baseline.

Both work on the summary dict (`Analysis.to_dict()`, the same as a stored summary.json), so
a trace analysed now and a report stored months ago look alike."""

from tracekit.compare.check import Verdict, check, load_expectations
from tracekit.compare.diff import diff
from tracekit.compare.summary import as_summary

__all__ = ["as_summary", "check", "diff", "load_expectations", "Verdict"]
