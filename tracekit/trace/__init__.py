"""The trace: the contract between the parsers and everything after, and its vectorised
operations.

Takes the tables a parser read; gives them linked (kernel -> launch -> op -> ranges,
link.py), grouped on integer codes (grouping.py), as intervals (intervals.py,
timeline.py), and with the one rule of which step owns which kernel (step_ownership.py);
health.py names what the trace holds that cannot be true (lost, early or overlapping
times, unlinked or duplicated ids, missing markers) and what the analysis does about it.
What the ops' structure says: autograd.py (backward and recomputed forward ops),
forwards.py (a token model's forward passes), inferred_steps.py (steps of a trace that
marks none).
The column contract is schema.py; tables.py holds it as numpy columns, frames.py as the
pandas DataFrames of a `Trace`.
"""

from tracekit.trace.frames import Trace, make_table
from tracekit.trace.schema import KERNEL_COLUMNS, LAUNCH_COLUMNS, LINK_COLUMNS, NO_ROW, OP_COLUMNS, RANGE_COLUMNS

__all__ = ["Trace", "make_table", "KERNEL_COLUMNS", "LAUNCH_COLUMNS", "LINK_COLUMNS", "NO_ROW", "OP_COLUMNS", "RANGE_COLUMNS"]
