"""roofline.png and breakdown.png. matplotlib is imported here only: reading a trace never
pays for plotting."""

from __future__ import annotations

import functools
import io

import numpy as np

from tracekit.analysis import Analysis
from tracekit.analysis.roofline import roof_flops


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


LABELLED = 3  # the largest block points are labelled by name
# label offsets (points) that alternate around a point, so neighbouring labels do not stack
_OFFSETS = [(8, 8), (8, -12), (-60, 10), (-60, -14), (10, 18), (10, -22)]
_OP_OFFSETS = [(6, -12), (14, 4), (-22, -14), (-24, 6), (4, -24), (18, -20), (-10, 16), (22, 14)]


def _literal_text(render):
    """Plots keep matplotlib's math text on: its log-axis tick labels are math text
    (`$\\mathdefault{10^{2}}$`), printed raw with it off. Names from the trace (ops, shapes,
    phases, blocks, device names) are drawn as the characters they are through `_literal`
    instead: with every `$` escaped, two `$` in an op name never start TeX (a bad command,
    `$\\x$`, would fail the whole bundle). rc_context keeps usetex off locally (a notebook
    that imports tracekit keeps its own settings); it covers the save, where tick labels
    are made."""
    @functools.wraps(render)
    def drawn(*args, **kwargs):
        import matplotlib

        with matplotlib.rc_context({"text.parse_math": True, "text.usetex": False}):
            return render(*args, **kwargs)

    return drawn


def _literal(text) -> str:
    """A trace string as matplotlib draws it literally: `$` escaped, so no math text."""
    return str(text).replace("$", r"\$")


def _short(text: str, width: int = 28) -> str:
    text = str(text)
    return _literal(text if len(text) <= width else text[: width - 1] + "…")


@_literal_text
def roofline_png(analysis: Analysis, top_ops: int = 8, fmt: str = "png") -> bytes:
    """Log-log roofline: bandwidth and matrix / vector ceilings; a point per block and per
    top op at (intensity, achieved FLOP/s), sized by time."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(12, 6), dpi=110)
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
    key: list[str] = []
    if len(pts):
        pts = pts.sort_values("kernel_time_ns", ascending=False)
        total = max(float(pts["kernel_time_ns"].sum()), 1.0)
        x_b, y_b = pts["flops"] / pts["bytes"], pts["achieved_tflops"] * 1e12
        ax.scatter(x_b, y_b, s=40 + 1500 * pts["kernel_time_ns"] / total, alpha=0.55, color="tab:orange", edgecolor="black",
                   label="phase x block")
        for i, (x0, y0, r) in enumerate(zip(x_b, y_b, pts.to_dict(orient="records"))):
            name = _literal(f"{r['phase']}/{r['block']}")
            # the largest points by name, the rest by number (see the key): labels never pile up
            text = name if i < LABELLED else f"B{i + 1}"
            if i >= LABELLED:
                key.append(f"B{i + 1} {name}")
            ax.annotate(text, (x0, y0), xytext=_OFFSETS[i % len(_OFFSETS)], textcoords="offset points", fontsize=7,
                        arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "0.4"})
    ops = analysis.ops.head(top_ops)
    ops = ops[(ops["flops"] > 0) & (ops["bytes"] > 0) & (ops["time_ns"] > 0)] if len(ops) else ops
    if len(ops):
        x_o, y_o = ops["flops"] / ops["bytes"], ops["flops"] / ops["time_ns"] * 1e9
        ax.scatter(x_o, y_o, marker="x", color="tab:green", label="top ops (O1 = most time)")
        for i, (x0, y0, r) in enumerate(zip(x_o, y_o, ops.to_dict(orient="records"))):
            dx, dy = _OP_OFFSETS[i % len(_OP_OFFSETS)]
            ax.annotate(f"O{i + 1}", (x0, y0), xytext=(dx, dy), textcoords="offset points", fontsize=7, color="darkgreen",
                        arrowprops={"arrowstyle": "-", "lw": 0.4, "color": "darkgreen"})
            key.append(f"O{i + 1} {_short(r['op'], 24)} {_short(r['shapes'], 22)}")
    if not len(pts) and not len(ops):  # say why the plot is empty rather than show empty axes
        cov = analysis.coverage.get("modeled_share")
        ax.text(0.5, 0.5, "nothing to place on the roofline:\n"
                f"{'no' if not cov else f'only {cov:.1%} of'} GPU kernel time has a FLOP and byte count\n"
                "(record with record_shapes=True / emit_nvtx(record_shapes=True), or pass --model)",
                transform=ax.transAxes, ha="center", va="center", fontsize=9, color="dimgray",
                bbox={"facecolor": "white", "alpha": 0.9, "edgecolor": "none"})
    if key:  # the key sits right of the axes, one line per numbered point
        fig.text(0.735, 0.95, "\n".join(_short(line, 50) for line in key[:30]), fontsize=6.5, va="top", family="monospace")
        fig.subplots_adjust(left=0.09, right=0.72)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved FLOP/s")
    ax.set_title(f"Roofline on {_literal(dev.name)}" if dev else
                 "Roofline: GPU unknown, no roof (pass --device)" if len(analysis.kernels) else "Roofline (no GPU)")
    ax.grid(True, which="both", alpha=0.2)
    if ax.get_legend_handles_labels()[0]:  # nothing labelled (no device, nothing costed): no empty legend
        ax.legend(loc="lower right", fontsize=8)
    return _png(fig, plt, fmt)


@_literal_text
def breakdown_png(analysis: Analysis, fmt: str = "png") -> bytes:
    """GPU time by phase (bars) split by block (stacked), and GPU idle as a bar of its own
    split by cause, in the ranked list's own figures (analysis.causes)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=110)
    b = analysis.blocks
    if len(b):
        table = b.pivot_table(index="phase", columns="block", values="gpu_time_ns", aggfunc="sum", fill_value=0) / 1e6
        table = table.loc[table.sum(axis=1).sort_values().index]
        left = np.zeros(len(table))
        phases = [_literal(p) for p in table.index]
        for block in table.columns:
            ax.barh(phases, table[block], left=left, label=_literal(block))
            left += table[block].to_numpy()
    idle = _idle_by_cause(analysis)
    if idle:
        grays = ["0.35", "0.5", "0.65", "0.8", "0.9"]
        left = 0.0
        for i, (cause, ms) in enumerate(idle.items()):
            ax.barh(["GPU idle"], [ms], left=left, color=grays[i % len(grays)], hatch="//", edgecolor="white", label=f"idle: {cause}")
            left += ms
    ax.set_xlabel("GPU time (ms): busy by phase and block; idle by cause")
    ax.set_title("GPU time by phase and block, and GPU idle")
    if ax.get_legend_handles_labels()[0]:  # no blocks (no GPU work): no empty legend, no matplotlib warning
        ax.legend(fontsize=8, loc="lower right")
    return _png(fig, plt, fmt)


def _idle_by_cause(analysis: Analysis) -> dict[str, float]:
    """GPU idle (ms) per idle row of the ranked list, largest first; the steps' wall time
    where the trace has steps, else first to last GPU activity."""
    f = analysis.findings
    out: dict[str, float] = {}
    for c in (f.causes if f is not None else []):
        if c["cause"].startswith("idle_") and c["time_ns"] > 0:
            out[c["what"]] = out.get(c["what"], 0.0) + c["time_ns"] / 1e6
    return out


def _png(fig, plt, fmt: str = "png") -> bytes:
    buf = io.BytesIO()
    if fig.subplotpars.right > 0.9:  # a figure with a key beside it keeps its layout
        fig.tight_layout()
    fig.savefig(buf, format=fmt)
    plt.close(fig)
    return buf.getvalue()
