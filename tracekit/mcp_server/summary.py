"""The `analyze` tool's body: the figures `tracekit analyze --format json` gives (the same
summary, docs/summary-schema.md), cut to what answers "where did the time go": headline,
causes, blocks, steps, stages, coverage, device, health, flags; and the headline's figures as
fields of their own. Long lists are bounded; top kernels and ops are the `top` tool's."""

from __future__ import annotations

from typing import Any

from tracekit.mcp_server.fields import MAX_ROWS, clean

SUMMARY_KEYS = ("schema_version", "trace", "device", "headline", "coverage", "health", "what_to_fix_first", "blocks",
                "steps", "throughput", "devices", "overlap", "flags", "warnings")


def analysis_summary(a, limit: int = 50) -> dict[str, Any]:
    """The summary's sections; `blocks` and `steps` hold at most `limit` rows each."""
    from tracekit.reports.summary_json import summary

    limit = max(1, min(int(limit), MAX_ROWS))
    full = summary(a)  # the dict `--format json` prints (clean() below makes it strict JSON data)
    out: dict[str, Any] = {key: full[key] for key in SUMMARY_KEYS if key in full}
    left_off = {}
    for key in ("blocks", "steps"):
        rows = out.get(key)
        if isinstance(rows, list) and len(rows) > limit:
            left_off[key] = len(rows) - limit
            out[key] = rows[:limit]
    throughput = out.get("throughput")
    if isinstance(throughput, dict) and isinstance(throughput.get("steps"), list) and len(throughput["steps"]) > limit:
        left_off["throughput.steps"] = len(throughput["steps"]) - limit
        out["throughput"] = {**throughput, "steps": throughput["steps"][:limit]}
    out["left_off"] = left_off
    out["headline_figures"] = headline_figures(a)
    return clean(out)


def headline_figures(a) -> dict[str, Any] | None:
    """The headline's figures as fields (the sentences above hold trace names inside the
    report's words; here each name is a field of its own): the top phase x block shares of
    GPU busy time, the idle share of the denominator, the roofline efficiency (sustained,
    peak) over the costed kernel time, the bound split."""
    h = a.findings.headline if a.findings is not None else None
    if h is None:
        return None
    efficiency = h.efficiency or (None, None)
    return {"kind": h.kind, "busy_ns": h.busy_ns, "denominator": h.denominator, "idle_share_of_denominator": h.idle_share,
            "blocks": [{"phase": p, "block": b, "share_of_busy": share} for p, b, share in h.blocks or ()],
            "efficiency_sustained": efficiency[0], "efficiency_peak": efficiency[1],
            "costed_share_of_kernel_time": h.work_covered,
            "bound_shares": [{"bound": bound, "share": share} for bound, share in h.bounds or ()]}
