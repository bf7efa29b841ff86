"""The report bundle `tracekit analyze --out DIR` writes, to attach to an experiment.

    summary.json     versioned, documented in docs/summary-schema.md
    report.md        the summary and tables in Markdown (links the PNGs)
    report.html      one self-contained page: inline CSS, plots embedded
    kernels.parquet  one row per GPU activity: trace columns, costs, roofline, phase, block
    ops.parquet      one row per (op, input shapes)
    blocks.csv       phase x block
    roofline.png     log-log roofline with the device's ceilings
    breakdown.png    GPU time by phase and block
"""

from __future__ import annotations

import os

from tracekit.analysis import Analysis


def _with_names(k):
    """The kernels table with, beside the raw name, its demangled name and its report label."""
    from tracekit.names import labels, readable

    k = k.copy()
    names = k["name"].astype(str)
    label = labels(names.unique())
    k["demangled"] = names.map({n: readable(n) for n in label}).astype("category")
    k["label"] = names.map(label).astype("category")
    return k


def write_bundle(a: Analysis, out_dir: str, top: int = 15) -> list[str]:
    from tracekit.reports import html, markdown, plots

    os.makedirs(out_dir, exist_ok=True)
    written = []

    def save(name: str, data: str | bytes) -> None:
        path = os.path.join(out_dir, name)
        with open(path, "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode("utf-8"))
        written.append(path)

    images = {"roofline": plots.roofline_png(a), "breakdown": plots.breakdown_png(a)}
    save("summary.json", a.to_json(top))
    save("report.md", markdown.render(a, top))
    save("report.html", html.render(a, images, top))
    save("roofline.png", images["roofline"])
    save("breakdown.png", images["breakdown"])
    kernels = _with_names(a.kernels)
    for col in kernels.columns:  # parquet wants one type per column; categories of str
        if kernels[col].dtype == object:
            kernels[col] = kernels[col].astype("string")
    kernels.to_parquet(os.path.join(out_dir, "kernels.parquet"), index=False)
    written.append(os.path.join(out_dir, "kernels.parquet"))
    a.ops.astype({c: "string" for c in a.ops.columns if a.ops[c].dtype == object}).to_parquet(os.path.join(out_dir, "ops.parquet"), index=False)
    written.append(os.path.join(out_dir, "ops.parquet"))
    a.blocks.to_csv(os.path.join(out_dir, "blocks.csv"), index=False)
    written.append(os.path.join(out_dir, "blocks.csv"))
    return written
