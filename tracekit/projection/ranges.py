"""Ranges from the method's own error on the pairs it can check.

The point projection (tracekit.projection.bounds) is wrong by some amount on every pair of
one workload recorded on two GPUs; the range says by how much it has been wrong. Each part
of a kernel's time gets the band of the rule that moved it:

    low  = t · (s · r · ROOF[0] + (1 − s) · LATENCY[0])        r = t_sus' / t_sus
    high = t · (s · r · ROOF[1] + (1 − s) · LATENCY[1])

an uncosted kernel its own range (unchanged … link ratio, or the class's peak … HBM ratio)
widened by ROOF, and the host timeline (launch times, host-bound gaps) is replayed at
HOST[0] and HOST[1] of its measured pace: the target runs on another machine, whose CPU,
driver and launch path are not in the device table.

The bands are the hull of truth / point over the shared pairs (H100 ↔ MI300X: TimeSformer,
FalconsAI ViT, bert-small; both ways), widened by 5%: `python benchmarks/projection.py`
prints each pair's error and whether its range holds the truth. The roof band comes from the
pairs whose time is mostly roof-set (TimeSformer: −9% … +13% at the point), the latency
band from the launch-bound ones (bert-small, ViT: busy time 24–35% short on the MI300X and
30–48% long the other way: the MI300X runs the same µs-scale kernels slower, by dispatch
and library, which the device table does not describe), the host band from the host-bound
steps' windows (−10% … +12%: the two machines' hosts). They are measured on one
pair of GPUs (two vendors): between GPUs of one vendor and one library the error is
expected to be smaller, so these ranges are wide there.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

ROOF = (0.80, 1.25)      # the roof-set part of a kernel's time
LATENCY = (0.62, 1.60)   # the kept part (launch latency, tails, small grids)
HOST = (0.85, 1.18)      # the host timeline's pace on the target machine


def banded(r: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per kernel: (low, high) projected / measured time with the error bands, from the
    rule table of tracekit.projection.bounds.kernel_rules."""
    share = np.nan_to_num(r["roof_share"].to_numpy(dtype=np.float64))
    costed = r["costed"].to_numpy()
    roof_ratio = np.nan_to_num(r["roof_ratio"].to_numpy(dtype=np.float64), nan=1.0)
    low = np.where(costed, share * roof_ratio * ROOF[0] + (1.0 - share) * LATENCY[0], r["low"].to_numpy() * ROOF[0])
    high = np.where(costed, share * roof_ratio * ROOF[1] + (1.0 - share) * LATENCY[1], r["high"].to_numpy() * ROOF[1])
    return low, high


def assumption() -> str:
    return (f"ranges are the method's own error on the shared pairs of one workload recorded on two GPUs (H100 ↔ MI300X, both "
            f"ways): roof-set time ×{ROOF[0]:.2f}–×{ROOF[1]:.2f}, kept (latency) time ×{LATENCY[0]:.2f}–×{LATENCY[1]:.2f}, host "
            f"timeline ×{HOST[0]:.2f}–×{HOST[1]:.2f} (another machine's CPU and launch path); uncosted kernels add their own range")
