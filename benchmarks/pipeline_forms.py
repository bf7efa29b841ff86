"""Accuracy on pipelines of several networks (issue 46): every form, tracekit's figures against the truth.

    python benchmarks/pipeline_forms.py                      # this checkout
    PYTHONPATH=/path/to/old/checkout python benchmarks/pipeline_forms.py --label before

Per form: the step count, each stage's share of the stage table (its name as tracekit gives
it) and the throughput in the unit the truth counts, beside the truth (fixtures/
cpu_pipelines_truth.json; the shared H100 streaming trace's truth file). The H100 trace runs
twice: as recorded (frames and modules, no ranges) and bare (every python_function and
user_annotation event removed). Prints one Markdown table; --json writes the figures.
"""

from __future__ import annotations

import argparse
import gzip
import json
import pathlib
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "fixtures"
H100 = SHARED / "torch" / "h100_streaming_video_noranges_dit1.3b_chunk3_steps4.json.gz"


def _bare_copy(folder: pathlib.Path) -> pathlib.Path:
    doc = json.loads(gzip.decompress(H100.read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in ("python_function", "user_annotation")]
    path = folder / "h100_streaming_bare.json"
    path.write_text(json.dumps(doc))
    return path


def _figures(path: pathlib.Path, unit: str) -> dict:
    import tracekit

    a = tracekit.analyze(str(path), workers=1)
    stages = a.throughput.stages
    shares = {str(r["stage"]): float(r["wall_share"] or 0) for r in stages.to_dict(orient="records")} if stages is not None else {}
    total = a.throughput.total or {}
    # the truth's unit: output tokens apart where tracekit reports them, else its headline rate
    # (over the whole pipeline call where it has one)
    if unit == "output tokens" and total.get("output_tokens_per_s") is not None:
        rate, shown = total["output_tokens_per_s"], "output tokens"
    else:
        rate, shown = total.get("pipeline_throughput") or total.get("throughput"), total.get("unit")
    return dict(steps=len(a.steps), shares=shares, unit=shown, rate=rate, output_tokens=total.get("output_tokens"))


def _forms(folder: pathlib.Path) -> list[tuple[str, pathlib.Path, dict]]:
    truth = json.loads((ROOT / "fixtures" / "cpu_pipelines_truth.json").read_text())["forms"]
    out = [(name, ROOT / "fixtures" / t["trace"], dict(steps=t["steps"], shares=t["stage_share"], unit=t["throughput"]["unit"],
                                                         rate=t["throughput"]["per_s"])) for name, t in truth.items()]
    if H100.exists():
        h = json.loads((SHARED / "truth" / "h100_streaming_noranges.truth.json").read_text())
        t = dict(steps=h["chunks_profiled"], shares=h["stage_share"], unit="frames", rate=h["fps"])
        out += [("h100_streaming", H100, t), ("h100_streaming_bare", _bare_copy(folder), t)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", default="this checkout")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    rows, figures = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, path, truth in _forms(pathlib.Path(tmp)):
            try:
                got = _figures(path, truth["unit"])
            except Exception as e:  # an old checkout may fail on a form: say so, go on
                got = dict(error=f"{type(e).__name__}: {e}")
            figures[name] = dict(got=got, truth=truth)
            if "error" in got:
                rows.append(f"| {name} | {got['error'][:80]} | | {truth['steps']} | | |")
                continue
            shown = ", ".join(f"{k} {v:.1%}" for k, v in sorted(got["shares"].items(), key=lambda kv: -kv[1])[:4])
            want = ", ".join(f"{k} {v:.1%}" for k, v in truth["shares"].items())
            rate = f"{got['rate']:,.1f} {got['unit']}/s" if got["rate"] else f"— ({got['unit']})"
            rows.append(f"| {name} | {got['steps']} | {shown or '—'} | {rate} | {truth['steps']} | {want} | "
                        f"{truth['rate']:,.1f} {truth['unit']}/s |")
    print(f"{args.label} (tracekit from {sys.modules['tracekit'].__file__})\n")
    print("| form | steps | stages | throughput | truth steps | truth stages | truth throughput |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(figures, indent=1, default=str))


if __name__ == "__main__":
    main()
