"""roofline.png and breakdown.png. matplotlib is imported here only: reading a trace never
pays for plotting."""

from __future__ import annotations

import functools
import io
import warnings

import numpy as np

from tracekit.analysis import Analysis
from tracekit.analysis.roofline import roof_flops
from tracekit.common.format import cut
from tracekit.reports.text import plot_text


def _pyplot():
    import warnings

    # matplotlib warns from inside its own import when an optional part fails to load (under
    # an address-space limit: "Unable to import Axes3D"): the plots use no 3D projection and
    # the user can do nothing about it, so its import-time UserWarnings are not printed.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning, module=r"matplotlib(\.|$)")
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

    return plt


# label offsets (points) that alternate around a point, so neighbouring labels do not stack
_OFFSETS = [(8, 8), (8, -12), (-22, 10), (-22, -14), (10, 18), (10, -22)]
_OP_OFFSETS = [(6, -12), (14, 4), (-22, -14), (-24, 6), (4, -24), (18, -20), (-10, 16), (22, 14)]
LABEL_SIZE = 8  # points: the markers' numbers and the key, readable at the bundle's size
KEY_CHARS = 60  # a key line: the number, the phase / block or the op and its shapes, cut at a boundary
NOTHING_TO_PLOT = "no costed kernels: nothing to plot"


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

        # matplotlib's own warnings (a glyph the font lacks) quote the text drawn: none reaches stderr
        with matplotlib.rc_context({"text.parse_math": True, "text.usetex": False}), warnings.catch_warnings():
            # (matplotlib attributes them to the line that called it, so no module filter would match)
            warnings.simplefilter("ignore", UserWarning)
            return render(*args, **kwargs)

    return drawn


def _literal(text) -> str:
    """A trace string as matplotlib draws it literally (text.plot_text: controls shown, `$` escaped)."""
    return plot_text(text)


def _short(text: str, width: int = 28) -> str:
    """At most `width` characters, cut at a boundary (a shape's element, a name's separator)."""
    return _literal(cut(str(text), width))


def _nothing(plt, why: str):
    """A small figure that says there is nothing to plot, and why (no empty log-log box)."""
    fig = plt.figure(figsize=(9, 1.6), dpi=110)
    fig.text(0.5, 0.62, NOTHING_TO_PLOT, ha="center", va="center", fontsize=12)
    fig.text(0.5, 0.3, why, ha="center", va="center", fontsize=9, color="dimgray")
    return fig


def roofline_figure(analysis: Analysis, top_ops: int = 8):
    """The roofline figure (see roofline_png): every point numbered on the plot (B1.. blocks,
    O1.. ops) and named in the key beside the axes; without a costed block or op, the figure
    that says so."""
    plt = _pyplot()
    blocks = analysis.blocks
    # Collectives are bound by the interconnect, not by this roofline: they are left out.
    pts = blocks[(blocks["flops"] > 0) & (blocks["bytes"] > 0) & (blocks["block"] != "collective")] if len(blocks) else blocks
    ops = analysis.ops.head(top_ops)
    ops = ops[(ops["flops"] > 0) & (ops["bytes"] > 0) & (ops["time_ns"] > 0)] if len(ops) else ops
    if not len(pts) and not len(ops):  # say why there is no plot rather than show empty axes
        cov = analysis.coverage.get("modeled_share")
        return _nothing(plt, f"{'no' if not cov else f'only {cov:.1%} of'} GPU kernel time has a FLOP and byte count "
                             "(record with record_shapes=True / emit_nvtx(record_shapes=True), or pass --model)")
    fig = plt.figure(figsize=(13, 6), dpi=110)
    ax = fig.add_axes((0.07, 0.1, 0.52, 0.82))
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
    key: list[str] = []
    if len(pts):
        pts = pts.sort_values("kernel_time_ns", ascending=False)
        total = max(float(pts["kernel_time_ns"].sum()), 1.0)
        x_b, y_b = pts["flops"] / pts["bytes"], pts["achieved_tflops"] * 1e12
        ax.scatter(x_b, y_b, s=40 + 1500 * pts["kernel_time_ns"] / total, alpha=0.55, color="tab:orange", edgecolor="black",
                   label="phase x block (B1 = most time)")
        for i, (x0, y0, r) in enumerate(zip(x_b, y_b, pts.to_dict(orient="records"))):
            ax.annotate(f"B{i + 1}", (x0, y0), xytext=_OFFSETS[i % len(_OFFSETS)], textcoords="offset points", fontsize=LABEL_SIZE,
                        arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "0.4"})
            key.append(f"B{i + 1:<3}{_short(r['phase'] + ' / ' + r['block'], KEY_CHARS)}  {r['share']:.1%}")
    if len(ops):
        x_o, y_o = ops["flops"] / ops["bytes"], ops["flops"] / ops["time_ns"] * 1e9
        ax.scatter(x_o, y_o, marker="x", color="tab:green", label="top ops (O1 = most time)")
        for i, (x0, y0, r) in enumerate(zip(x_o, y_o, ops.to_dict(orient="records"))):
            dx, dy = _OP_OFFSETS[i % len(_OP_OFFSETS)]
            ax.annotate(f"O{i + 1}", (x0, y0), xytext=(dx, dy), textcoords="offset points", fontsize=LABEL_SIZE, color="darkgreen",
                        arrowprops={"arrowstyle": "-", "lw": 0.4, "color": "darkgreen"})
            op = _short(r["op"], 36)  # the op whole where it can be; its shapes take the rest, cut at an element
            key.append(f"O{i + 1:<3}{op} {_short(r['shapes'], max(20, KEY_CHARS - 1 - len(op)))}")
    # the key: one line per numbered point, beside the axes (never over the data)
    fig.text(0.61, 0.92, "\n".join(key[:36]), fontsize=LABEL_SIZE, va="top", family="monospace", gid="roofline-key")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved FLOP/s")
    ax.set_title(f"Roofline on {_literal(dev.name)}" if dev else "Roofline: GPU unknown, no roof (pass --device)")
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(loc="lower right", fontsize=8)
    return fig


@_literal_text
def roofline_png(analysis: Analysis, top_ops: int = 8, fmt: str = "png") -> bytes:
    """Log-log roofline: bandwidth and matrix / vector ceilings; a point per block and per
    top op at (intensity, achieved FLOP/s), blocks sized by time."""
    return _png(roofline_figure(analysis, top_ops), _pyplot(), fmt)


def breakdown_figure(analysis: Analysis):
    """The breakdown figure (see breakdown_png), its legend beside the axes, never on the bars;
    without GPU time, the figure that says there is nothing to plot."""
    plt = _pyplot()
    b = analysis.blocks
    idle = _idle_by_cause(analysis)
    if not len(b) and not idle:
        return _nothing(plt, "the trace holds no GPU time by phase and block")
    fig, ax = plt.subplots(figsize=(11, 4.5), dpi=110)
    if len(b):
        table = b.pivot_table(index="phase", columns="block", values="gpu_time_ns", aggfunc="sum", fill_value=0) / 1e6
        table = table.loc[table.sum(axis=1).sort_values().index]
        left = np.zeros(len(table))
        phases = [_literal(p) for p in table.index]
        for block in table.columns:
            ax.barh(phases, table[block], left=left, label=_literal(block))
            left += table[block].to_numpy()
    if idle:
        grays = ["0.35", "0.5", "0.65", "0.8", "0.9"]
        left = 0.0
        for i, (cause, ms) in enumerate(idle.items()):
            ax.barh(["GPU idle"], [ms], left=left, color=grays[i % len(grays)], hatch="//", edgecolor="white", label=f"idle: {cause}")
            left += ms
    ax.set_xlabel("GPU time (ms): busy by phase and block; idle by cause")
    ax.set_title("GPU time by phase and block, and GPU idle")
    fig.tight_layout(rect=(0, 0, 0.68, 1))  # the right third holds the legend
    fig.legend(*ax.get_legend_handles_labels(), loc="upper left", bbox_to_anchor=(0.69, 0.93), fontsize=LABEL_SIZE, frameon=False)
    return fig


@_literal_text
def breakdown_png(analysis: Analysis, fmt: str = "png") -> bytes:
    """GPU time by phase (bars) split by block (stacked), and GPU idle as a bar of its own
    split by cause, in the ranked list's own figures (analysis.causes)."""
    return _png(breakdown_figure(analysis), _pyplot(), fmt)


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
    fig.savefig(buf, format=fmt)  # each figure laid out its axes, key and legend itself
    plt.close(fig)
    return buf.getvalue()
