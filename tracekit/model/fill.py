"""Put the model's per-step block costs on the kernels that did the work.

Within a step, a model block's cost goes to the kernels attribution put in its block with a
class of its family (the attention core to attention kernels of the attention block, the
projections to its GEMMs, ...). A block with no such kernel (graph-launched serving kernels
carry no module context, so their GEMMs may sit in `other`) joins its family's pool: the
step's kernels of that family that no block claimed (not for elementwise work, whose
kernels' class does not say which block they serve). The cost of a group (one block, or a
pool of blocks) is spread over its kernels in proportion to their time (except the parts
tracekit.model.placement puts on their own kernels: the LM head, an MoE's GEMMs), and only kernels
without a cost take it: op shapes win where both exist. Those kernels get cost source
`model`. A group whose cost is unknown (KV lengths missing) fills nothing, and neither does
one whose kernels ran in less than half the group's roofline time: its work must have run
elsewhere (fused into other kernels), and putting it on them would report an impossible rate.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.model.blocks import BLOCKS, FAMILIES, WHOLE_BLOCKS, StepCosts
from tracekit.model.placement import place

SOURCE = "model"
IMPLAUSIBLE = 2.0  # a group's roofline time over its kernels' time above which it is not filled
# filled_share: the share of the group's kernel time that took the model's cost (the rest had op shapes)
GROUP_COLUMNS = ["step_row", "group", "blocks", "kernels", "kernel_time_ns", "flops", "bytes", "filled_kernels", "filled_share", "note"]


def _dominant(totals: dict[str, dict], names: list[str]) -> tuple[str, str]:
    """The roofline kind and dtype of a group: those of its largest block by bytes."""
    top = max(names, key=lambda n: totals[n]["bytes_read"] + totals[n]["bytes_written"])
    return totals[top]["kind"], totals[top]["dtype"]


def _targets(names, block: np.ndarray, klass: np.ndarray) -> dict[tuple[str, str], tuple[list[str], np.ndarray]]:
    """Group key -> (model blocks, positions among the step's kernels). See the module doc."""
    groups: dict[tuple[str, str], tuple[list[str], np.ndarray]] = {}
    claimed = np.zeros(len(block), dtype=bool)
    homeless = []
    for name in names:
        attr_block, family = BLOCKS[name]
        if attr_block == "other":  # the catch-all block says nothing about what a kernel does
            homeless.append(name)
            continue
        mask = block == attr_block
        if attr_block not in WHOLE_BLOCKS:
            mask &= np.isin(klass, list(FAMILIES[family]))
        if mask.any():
            groups.setdefault((attr_block, family), ([], mask))[0].append(name)
            claimed |= mask
        else:
            homeless.append(name)
    for name in homeless:
        family = BLOCKS[name][1]
        key = ("pool", family)
        if key not in groups:
            # A GEMM, attention, norm or collective kernel says by its class what it does; an
            # elementwise or copy kernel does not (rotary? activation? sampling?), so blocks of
            # that family are placed only through attribution, never pooled.
            pooled = np.isin(klass, list(FAMILIES[family])) if family != "vector" else np.zeros(len(klass), bool)
            groups[key] = ([], ~claimed & pooled)
        groups[key][0].append(name)
    return {key: (names, np.flatnonzero(mask)) for key, (names, mask) in groups.items()}


def spread(costs: pd.DataFrame, labels: pd.DataFrame, kernels: pd.DataFrame, owner: np.ndarray,
           step_costs: dict[int, tuple[StepCosts, dict | None, dict]]) -> tuple[pd.DataFrame, np.ndarray]:
    """Fill `costs` in place from each step's (block costs, roofline terms on the device or
    None, the parts tracekit.model.placement places); the LM head, MoE and projection kernels first take their own part
    (tracekit.model.placement), the rest of each group by time share; return the groups (one row per step x group) and each kernel's group row (-1: none)."""
    n = len(kernels)
    group_of = np.full(n, -1, dtype=np.int64)
    if not step_costs or not n:
        return pd.DataFrame(columns=GROUP_COLUMNS), group_of
    block = labels["block"].astype(str).to_numpy()
    klass = costs["kernel_class"].astype(str).to_numpy()
    is_kernel = (kernels["kind"].astype(str) == "kernel").to_numpy()
    time = (kernels["end"] - kernels["start"]).to_numpy(dtype=np.float64)
    out = {c: costs[c].to_numpy(dtype=np.float64).copy() for c in ("flops", "bytes_read", "bytes_written")}
    obj = {c: costs[c].astype(object).to_numpy().copy() for c in ("cost_kind", "dtype", "cost_source", "unknown_reason")}
    # the kernels of every step at once: one sort, then a slice per step
    candidates = np.flatnonzero(is_kernel & (owner >= 0))
    candidates = candidates[np.argsort(owner[candidates], kind="stable")]
    bounds = np.searchsorted(owner[candidates], list(step_costs), side="left"), np.searchsorted(owner[candidates], list(step_costs), side="right")
    rows = []
    start, kernel_name = kernels["start"].to_numpy(), kernels["name"].astype(str).to_numpy()
    grid_blocks = np.prod([np.maximum(kernels[c].to_numpy(), 0) for c in ("grid_x", "grid_y", "grid_z")], axis=0) \
        if "grid_x" in kernels else None
    for (step, (per_block, terms, parts)), lo, hi in zip(step_costs.items(), *bounds):
        mine = candidates[lo:hi]
        totals = per_block.totals()
        for key, (names, positions) in _targets(list(totals), block[mine], klass[mine]).items():
            members = mine[positions]
            placed, done = place(names, members, start, klass, kernel_name, np.isnan(out["flops"]), totals, parts,
                                 grid_blocks)
            for row, (f, r, w, kind, dtype) in placed.items():
                out["flops"][row], out["bytes_read"][row], out["bytes_written"][row] = f, r, w
                obj["cost_kind"][row], obj["dtype"][row], obj["cost_source"][row], obj["unknown_reason"][row] = kind, dtype, SOURCE, None
            group_time = float(time[members].sum())
            filled, note = _fill_by_time([n for n in names if n not in done], members[~np.isin(members, list(placed))],
                                         totals, terms, time, out, obj)
            if placed:
                filled += len(placed)
                note = "; ".join(x for x in (f"{', '.join(done)} placed on {len(placed)} kernels of their own", note) if x)
            flops, read, written = (sum(totals[n][c] for n in names) for c in ("flops", "bytes_read", "bytes_written"))
            filled_rows = members[obj["cost_source"][members] == SOURCE]
            group_of[members] = len(rows)
            label = f"{key[0]} ({key[1]})" if key[0] != "pool" else f"unattributed {key[1]} kernels"
            rows.append({"step_row": step, "group": label, "blocks": ", ".join(names), "kernels": len(members),
                         "kernel_time_ns": group_time, "flops": flops, "bytes": read + written, "filled_kernels": filled,
                         "filled_share": float(time[filled_rows].sum()) / group_time if group_time > 0 else 0.0, "note": note})
    for c, values in out.items():
        costs[c] = values
    for c, values in obj.items():
        costs[c] = pd.Categorical(values)
    return pd.DataFrame(rows, columns=GROUP_COLUMNS), group_of


def _roofline_ns(terms: dict | None, names: list[str]) -> float:
    """The blocks' roofline time at peak (0 without a device: no check)."""
    if terms is None:
        return 0.0
    from tracekit.model.predict import predicted_ns, select

    value = predicted_ns(select(terms, np.isin(terms["block"], names)), 1.0, 1.0)
    return value if value == value else 0.0


def _fill_by_time(names: list[str], members: np.ndarray, totals: dict[str, dict], terms, time: np.ndarray, out: dict,
                  obj: dict) -> tuple[int, str]:
    """The blocks `names` spread over the uncosted `members` by time share: (kernels filled, note)."""
    if not names:
        return 0, ""
    flops, read, written = (sum(totals[n][c] for n in names) for c in ("flops", "bytes_read", "bytes_written"))
    kernel_time = float(time[members].sum())
    if not len(members):
        return 0, "no kernel attributed to it in the step: predicted, not placed on kernels"
    if np.isnan(flops) or np.isnan(read) or np.isnan(written):
        return 0, "cost unknown: the step's KV lengths are unknown (pass --context)"
    if kernel_time > 0 and (ratio := _roofline_ns(terms, names) / kernel_time) > IMPLAUSIBLE:
        return 0, f"not filled: its kernels ran {ratio:.1f}x faster than the roofline allows; the work ran elsewhere (fused?)"
    if kernel_time <= 0:
        return 0, ""
    empty = members[np.isnan(out["flops"][members])]
    share = time[empty] / kernel_time
    kind, dtype = _dominant(totals, names)
    out["flops"][empty] = flops * share
    out["bytes_read"][empty] = read * share
    out["bytes_written"][empty] = written * share
    obj["cost_kind"][empty], obj["dtype"][empty], obj["cost_source"][empty] = kind, dtype, SOURCE
    obj["unknown_reason"][empty] = None
    return len(empty), ""
