"""The verdicts tracekit gives on every trace it has: the headline, the top three causes
with their evidence, every plausibility flag, and any figure that breaks a physical limit
without a flag (checked by tests/physical_limits.py, written apart from tracekit's own
pass). A verdict is a claim about the trace; this is the page to read them all on.

    python benchmarks/verdicts.py [TRACE_OR_DIR ...] [--json]

Without arguments: every trace under ../shared/fixtures (torch/, torch/*/ rank
directories, nsys/) and fixtures/. Exit 1 when any figure breaks a limit unflagged.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from physical_limits import unflagged  # noqa: E402


def every_trace() -> list[pathlib.Path]:
    shared = REPO.parent / "shared" / "fixtures"
    found = sorted(shared.glob("torch/*.json.gz")) + sorted(shared.glob("torch/*/*.json.gz")) + sorted(shared.glob("nsys/*.sqlite"))
    return found + sorted((REPO / "fixtures").glob("*.json.gz"))


def verdict(path: pathlib.Path) -> dict:
    import tracekit
    from tracekit.errors import TraceError

    try:
        a = tracekit.analyze(path)
    except TraceError as exc:  # e.g. an export that names no GPU: analysed without a roofline
        return {"trace": str(path), "error": str(exc)}
    summary = json.loads(tracekit.summary_json(a, top=max(len(a.ops), len(a.kernel_summary), len(a.copy_summary), 1)))
    return {"trace": str(path), "headline": summary["headline"], "causes": summary["what_to_fix_first"].get("causes", [])[:3],
            "flags": summary["flags"], "unflagged": unflagged(summary)}


def _evidence(evidence: dict) -> str:
    parts = []
    for key, value in evidence.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k} {str(v)[:60]}" for k, v in value.items())
        elif isinstance(value, float):
            value = f"{value / 1e6:,.3f} ms" if key.endswith("_ns") else f"{value:,.3g}"
        parts.append(f"{key}: {str(value)[:80]}")
    return "; ".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="*", type=pathlib.Path)
    parser.add_argument("--json", action="store_true", help="one JSON document instead of text")
    args = parser.parse_args()
    traces = args.traces or every_trace()
    results = [verdict(p) for p in traces]
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        for r in results:
            print(f"== {pathlib.Path(r['trace']).name}")
            if "error" in r:
                print(f"   (not analysed: {r['error']})")
                continue
            for line in r["headline"]:
                print(f"   {line}")
            for i, c in enumerate(r["causes"], 1):
                share = f"{c['share']:.1%}" if c["share"] is not None else "—"
                print(f"   cause {i}: {c['cause']} {c['time_ns'] / 1e6:,.3f} ms ({share}): {_evidence(c['evidence'])}")
            for f in r["flags"]:
                print(f"   flag: {f['table']}[{f['row']}] {f['where'][:60]} {f['figure']} = {f['value']:.4g} > {f['limit']:.4g}: {f['reason'][:90]}")
            for v in r["unflagged"]:
                print(f"   UNFLAGGED: {v}")
    bad = sum(len(r.get("unflagged", [])) for r in results)
    print(f"\n{len(results)} traces, {sum(len(r.get('flags', [])) for r in results)} flags, {bad} unflagged figures past a limit",
          file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
