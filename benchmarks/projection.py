"""Validation of `tracekit project` against measurement: the shared H100 / MI300X pairs (the
same HF inference recorded on both GPUs). Each side is projected onto the other and compared
with what the other side measured: GPU busy time (kernels, exclusive) and step time (the
step's GPU window on both sides: the figure `analyze` reports and the projection projects).

Goal (issue 21): busy time within 15% where the step has more than 10 ms of kernels;
launch-bound steps projected as host-bound (barely moving), as measured: the other GPU's
step is host-bound too and the projected step is within 15% of the step it measured.

    python benchmarks/projection.py [--format markdown]
"""

from __future__ import annotations

import argparse
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tracekit.api import analyze, project  # noqa: E402

FIXTURES = ROOT.parent.parent / "shared" / "fixtures" / "torch"
if not FIXTURES.exists():
    FIXTURES = pathlib.Path("/work/shared/fixtures/torch")
PAIRS = ["timesformer", "falconsai_vit", "bert_small"]
SIDES = ("h100", "mi300x")
BIG_MS = 10.0  # the goal holds where the step has more than this much kernel time
GOAL = 0.15


def host_bound(a) -> bool:
    """Measured: every step's GPU was idle, waiting for launches, most of its kernels' span
    (busy < half of first start .. last end), the test the projection applies."""
    k = a.kernels[a.kernels["step"] >= 0]
    spans = k.groupby("step").agg(busy=("exclusive_ns", "sum"), first=("start", "min"), last=("end", "max"))
    return bool(len(spans)) and bool((spans["busy"] < 0.5 * (spans["last"] - spans["first"])).all())


def rows():
    for model in PAIRS:
        runs = {side: analyze(FIXTURES / f"{side}_{model}_hf_inference.json.gz") for side in SIDES}
        for src, dst in (SIDES, SIDES[::-1]):
            a, b = runs[src], runs[dst]
            p = project(a.meta["path"], b.device.key, analysis=a)
            t = p.totals
            busy_b = float(b.kernels["exclusive_ns"].sum())
            step_b = float(b.steps["duration_ns"].sum())  # the GPU window, as analyze and the projection measure a step
            err_busy = t["busy_projected_ns"] / busy_b - 1
            err_step = t["step_projected_ns"] / step_b - 1
            big = t["busy_ns"] / 1e6 > BIG_MS
            host, host_b = bool(p.steps["host_bound"].all()), host_bound(b)
            # launch-bound: projected host-bound, measured host-bound on the other GPU too, and the projected step
            # (barely moving) within the goal of the step the other GPU measured
            ok = abs(err_busy) <= GOAL if big else host and host_b and abs(err_step) <= GOAL
            yield {"model": model, "from→to": f"{src}→{dst}", "busy measured (from)": t["busy_ns"] / 1e6,
                   "busy projected": t["busy_projected_ns"] / 1e6, "busy range": f"{t['busy_low_ns'] / 1e6:.2f}…{t['busy_high_ns'] / 1e6:.2f}",
                   "busy measured (to)": busy_b / 1e6, "busy error": err_busy, "step measured (from)": t["step_measured_ns"] / 1e6,
                   "step projected": t["step_projected_ns"] / 1e6, "step measured (to)": step_b / 1e6, "step error": err_step,
                   "host-bound proj/meas": f"{'yes' if host else 'no'}/{'yes' if host_b else 'no'}",
                   "goal": ("busy ±15%" if big else "host-bound, step ±15%") + (": met" if ok else ": MISSED")}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--format", choices=["table", "markdown"], default="table")
    args = parser.parse_args()
    out = list(rows())
    head = list(out[0])
    cells = [[f"{v:+.1%}" if "error" in k else f"{v:,.2f}" if isinstance(v, float) else str(v) for k, v in r.items()] for r in out]
    if args.format == "markdown":
        print("| " + " | ".join(h + (" (ms)" if "busy" in h or "step" in h and "error" not in h else "") for h in head) + " |")
        print("|" + "---|" * len(head))
        for c in cells:
            print("| " + " | ".join(c) + " |")
        return
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    for c in cells:
        print("  ".join(v.ljust(w) for v, w in zip(c, widths)))
    print("times in ms; error = projected / measured on the target - 1")


if __name__ == "__main__":
    main()
