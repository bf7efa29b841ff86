"""Validation of `tracekit project` against measurement: every pair of one workload recorded on
two GPUs: in shared, the H100 / MI300X HF inference pairs; and the shared h200_* training and
video traces against the same parts recorded on an H100 by this project (fixtures/gpu/h100,
made by fixtures/gpu/device_checks.sh). Each side is projected onto the
other and compared with what the other side measured: GPU busy time (kernels, exclusive) and
step time (the step's GPU window on both sides: the figure `analyze` reports and the
projection projects), and whether each projected range holds the measured value.

Goal (issue 31): busy time and step window within ±15% (±10% for the h200 pairs), both ways,
and every range holding the measured value. A pair is found by name: the same file name after the GPU prefix
(`h100_x.json.gz` ↔ `mi300x_x.json.gz`); a trace without a twin is listed as such.

    python benchmarks/projection.py [--format markdown]
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tracekit.api import analyze, project  # noqa: E402

FIXTURES = ROOT.parent.parent / "shared" / "fixtures" / "torch"
if not FIXTURES.exists():
    FIXTURES = pathlib.Path("/work/shared/fixtures/torch")
OWN = ROOT / "fixtures" / "gpu"  # the project's own recordings
GOAL, GOAL_H200 = 0.15, 0.10
PREFIX = re.compile(r"^([a-z0-9]+?)_(.+)$")


def pairs() -> tuple[list[tuple[str, pathlib.Path, pathlib.Path]], list[str]]:
    """(workload, first, second) for each workload recorded on two GPUs; the workloads with one."""
    by_name: dict[str, list[pathlib.Path]] = {}
    for path in sorted(FIXTURES.glob("*.json.gz")) + sorted(OWN.glob("*/*.json.gz")):
        m = PREFIX.match(path.name)
        if m:
            by_name.setdefault(m.group(2), []).append(path)
    found = [(name, *paths[:2]) for name, paths in by_name.items() if len(paths) >= 2]
    return found, [paths[0].name for paths in by_name.values() if len(paths) == 1]


def rows():
    found, _ = pairs()
    for name, first, second in found:
        runs = {p: analyze(p) for p in (first, second)}
        for src, dst in ((first, second), (second, first)):
            a, b = runs[src], runs[dst]
            t = project(a.meta["path"], b.device.key, analysis=a).totals
            busy_b = float(b.kernels["exclusive_ns"].sum())
            step_b = float(b.steps["duration_ns"].sum())
            err_busy, err_step = t["busy_projected_ns"] / busy_b - 1, t["step_projected_ns"] / step_b - 1
            in_busy = t["busy_low_ns"] <= busy_b <= t["busy_high_ns"]
            in_step = t["step_low_ns"] <= step_b <= t["step_high_ns"]
            goal = GOAL_H200 if "H200" in (a.device.key, b.device.key) else GOAL
            ok = abs(err_busy) <= goal and abs(err_step) <= goal and in_busy and in_step
            yield {"workload": name.replace("_hf_inference.json.gz", "").replace(".json.gz", ""), "from→to": f"{a.device.key}→{b.device.key}",
                   "busy measured (from)": t["busy_ns"] / 1e6, "busy projected": t["busy_projected_ns"] / 1e6,
                   "busy range": f"{t['busy_low_ns'] / 1e6:.2f}…{t['busy_high_ns'] / 1e6:.2f}", "busy measured (to)": busy_b / 1e6,
                   "busy error": err_busy, "busy in range": "yes" if in_busy else "NO",
                   "step measured (from)": t["step_measured_ns"] / 1e6, "step projected": t["step_projected_ns"] / 1e6,
                   "step range": f"{t['step_low_ns'] / 1e6:.2f}…{t['step_high_ns'] / 1e6:.2f}", "step measured (to)": step_b / 1e6,
                   "step error": err_step, "step in range": "yes" if in_step else "NO",
                   "goal": f"±{goal:.0%}, in range: " + ("met" if ok else "MISSED")}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--format", choices=["table", "markdown"], default="table")
    args = parser.parse_args()
    out = list(rows())
    head = list(out[0])
    cells = [[f"{v:+.1%}" if "error" in k else f"{v:,.2f}" if isinstance(v, float) else str(v) for k, v in r.items()] for r in out]
    if args.format == "markdown":
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for c in cells:
            print("| " + " | ".join(c) + " |")
    else:
        widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]
        print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
        for c in cells:
            print("  ".join(v.ljust(w) for v, w in zip(c, widths)))
        print("times in ms; error = projected / measured on the target - 1")
    print("traces without a twin recorded on another GPU: " + ", ".join(pairs()[1]))


if __name__ == "__main__":
    main()
