"""roofline.png and breakdown.png. matplotlib is imported here only: reading a trace never
pays for plotting."""

from __future__ import annotations

import io

import numpy as np

from tracekit.analysis import Analysis
from tracekit.roofline import roof_flops


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def roofline_png(analysis: Analysis, top_ops: int = 12) -> bytes:
    """Log-log roofline: bandwidth and matrix / vector ceilings; a point per block and per
    top op at (intensity, achieved FLOP/s), sized by time."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 6), dpi=110)
    dev = analysis.device
    x = np.logspace(-2, 4, 200)
    if dev is not None:
        bw = dev.bandwidth
        # The roof of the dtype the work ran in: bf16 work bends at the bf16 peak, not fp8's.
        roof, roof_label = roof_flops(dev, analysis.kernels)
        # the roofline itself: min(peak, intensity x bandwidth)
        ax.plot(x, np.minimum(bw * x, roof), color="black", lw=1.5, label=f"HBM {dev.memory_gbps:,.0f} GB/s, roof {roof_label}")
        ax.plot(x, np.minimum(bw * analysis.sustained * x, roof), color="black", lw=1, ls="--", label=f"sustained {analysis.sustained:.0%}")
        ceilings: dict[float, list[str]] = {}
        for dtype, value in dev.matrix_tflops.items():
            ceilings.setdefault(value, []).append(dtype)
        for value in sorted(ceilings, reverse=True)[:3]:  # dtypes sharing a peak share a line
            ax.axhline(value * 1e12, color="tab:red", lw=1, alpha=0.7)
            ax.text(x[0], value * 1e12 * 1.08, f"matrix {'/'.join(ceilings[value])} {value:,.0f} TFLOP/s", color="tab:red", fontsize=8)
        fp32 = dev.vector_tflops.get("fp32")
        if fp32:
            ax.axhline(fp32 * 1e12, color="tab:blue", lw=1, alpha=0.7)
            ax.text(x[0], fp32 * 1e12 * 1.08, f"vector fp32 {fp32:,.0f} TFLOP/s", color="tab:blue", fontsize=8)
    blocks = analysis.blocks
    # Collectives are bound by the interconnect, not by this roofline: they are left out.
    pts = blocks[(blocks["flops"] > 0) & (blocks["bytes"] > 0) & (blocks["block"] != "collective")] if len(blocks) else blocks
    if len(pts):
        total = max(float(pts["kernel_time_ns"].sum()), 1.0)
        ax.scatter(pts["flops"] / pts["bytes"], pts["achieved_tflops"] * 1e12, s=40 + 1500 * pts["kernel_time_ns"] / total,
                   alpha=0.55, color="tab:orange", edgecolor="black", label="phase x block")
        for _, r in pts.iterrows():
            ax.annotate(f"{r['phase']}/{r['block']}", (r["flops"] / r["bytes"], r["achieved_tflops"] * 1e12), fontsize=7)
    ops = analysis.ops.head(top_ops)
    ops = ops[(ops["flops"] > 0) & (ops["bytes"] > 0) & (ops["time_ns"] > 0)] if len(ops) else ops
    if len(ops):
        ax.scatter(ops["flops"] / ops["bytes"], ops["flops"] / ops["time_ns"] * 1e9, marker="x", color="tab:green", label="top ops")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved FLOP/s")
    ax.set_title(f"Roofline on {dev.name}" if dev else
                 "Roofline: GPU unknown, no roof (pass --device)" if len(analysis.kernels) else "Roofline (no GPU)")
    ax.grid(True, which="both", alpha=0.2)
    if ax.get_legend_handles_labels()[0]:  # nothing labelled (no device, nothing costed): no empty legend
        ax.legend(loc="lower right", fontsize=8)
    return _png(fig, plt)


def breakdown_png(analysis: Analysis) -> bytes:
    """GPU time by phase (bars) split by block (stacked), plus idle."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=110)
    b = analysis.blocks
    if len(b):
        table = b.pivot_table(index="phase", columns="block", values="gpu_time_ns", aggfunc="sum", fill_value=0) / 1e6
        table = table.loc[table.sum(axis=1).sort_values().index]
        left = np.zeros(len(table))
        for block in table.columns:
            ax.barh(table.index, table[block], left=left, label=block)
            left += table[block].to_numpy()
    idle = float(analysis.devices["idle_ns"].sum()) / 1e6 if len(analysis.devices) else 0.0
    ax.set_xlabel(f"GPU time (ms); idle {idle:,.2f} ms")
    ax.set_title("GPU time by phase and block")
    ax.legend(fontsize=8, loc="lower right")
    return _png(fig, plt)


def _png(fig, plt) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
