"""Helpers every stage stands on, importing nothing of tracekit but `errors`: how numbers and
unknowns are printed (format.py, the one place), the sketch of a set of durations that
summaries store and diffs resample (sketch.py), and the atomic writer every output goes
through (atomic.py: staged, published together or not at all), and one regex searched over
many distinct names in one pass (text_match.py). They sit below parsers, trace
and analysis so that no stage imports upward (report helpers used by analysis and compare
made a loop of six packages)."""
