"""Several traces of one job, one per rank: takes their paths, gives a `MultiRank`
(executor.py: each rank analysed in a worker process or on a Dask cluster) with the
cross-rank view: arrivals at collectives, stragglers, skew, bus bandwidth (arrivals.py).
"""

from tracekit.ranks.executor import MultiRank, analyze_ranks

__all__ = ["MultiRank", "analyze_ranks"]
