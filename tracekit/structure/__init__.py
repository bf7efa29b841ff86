"""What the run is, read from the weights it uses: takes a Trace, gives its networks (the weight
shapes one forward reads), its calls (maximal runs of reads of one network), the loop that
repeats them, the steps (the loop's periods) and the stages (network x role: once before the
loop, the repeated body, the same weights once more after it, another network after, a small
network feeding a big one). Names (ProfilerStep, annotations, frames, modules) only label
what the structure found. Read by every stage after it; it reads only tracekit.trace.
"""
