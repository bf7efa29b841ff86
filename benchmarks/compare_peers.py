"""tracekit side by side with its peers on every shared trace.

    PYTHONPATH=. python benchmarks/compare_peers.py [--hta-python PATH] [--out FILE] [--no-inductor] [TRACE ...]

Peers:
  - HolisticTraceAnalysis 0.5.0 (busy, idle, compute, communication, overlap, kernel-type
    breakdown, idle breakdown, per-iteration kernels, memcpy/memset bytes), run in its own
    virtual environment (--hta-python) through benchmarks/peers/hta_probe.py. It runs twice:
    as users get it (timestamps rounded inward to whole microseconds; the last ProfilerStep
    and every kernel not launched before it dropped) and with both switched off
    (HTA_DISABLE_NS_ROUNDING=1 and its kernel filter off). The diff column is against the
    second: the same kernels, the same clock, HTA's own analyzers; the first is shown beside it.
  - torch._inductor.analysis.profile_analysis (the torch of the test extra): per-op FLOPs and
    GB from its augment_trace, matched with tracekit's costs of the same kernels
    (peers/inductor_side.py); where it crashes or skips (attention, MIOpen convolutions), torch's
    own flop_counter formulas on the recorded shapes; where its External-id link finds no op,
    its formulas on the op tracekit links.
  - References with no peer code: step ownership from the raw JSON (peers/raw_steps.py); for
    Nsight Systems exports, which neither peer reads, the export's activity tables read with
    plain SQL (peers/nsys_raw.py).

tracekit's time figures are computed with HTA's definitions from tracekit's kernel table and
tracekit's labels (peers/timeline_side.py), except the rows marked "reported", which are
tracekit's own numbers. Every difference over 2% is listed at the end with the reason a check
on the data gives (a definition, their bug, or tracekit's), or "unexplained".
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from peers import inductor_side, nsys_raw, raw_steps, timeline_side  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
SHARED = HERE.parents[1] / "shared" / "fixtures"
HTA_PYTHON = "/work/hta-venv/bin/python"
# HTA 0.5.0 asks for pandas>=1.5.2 with no upper bound; under pandas 3 it stops on
# mi300x_resnet (transform_correlation_to_index writes row numbers into an int16 column, which
# pandas 3 refuses). A pandas 2.2 put first on its path (pip install --target DIR pandas==2.2.3
# pytz tzdata) runs it as its authors ran it.
HTA_PANDAS2 = "/work/hta-pandas2"
THRESHOLD = 2.0  # percent: every difference above it needs a reason


def default_jobs() -> list[tuple[str, dict[int, pathlib.Path]]]:
    """Every shared trace: each Kineto file alone, the 8 DLRM ranks as one job, each nsys export."""
    torch_dir = SHARED / "torch"
    jobs = [(p.name, {0: p}) for p in sorted(torch_dir.glob("*.json.gz"))]
    if (torch_dir / "v100_dlrm_8ranks").is_dir():
        jobs.append(job(torch_dir / "v100_dlrm_8ranks"))
    jobs += [(p.name, {0: p}) for p in sorted((SHARED / "nsys").glob("*.sqlite"))]
    return jobs


def job(path: pathlib.Path) -> tuple[str, dict[int, pathlib.Path]]:
    """A trace file is a job of one rank; a directory of rank<N>.json[.gz] files is one multi-rank job."""
    import re

    if not path.is_dir():
        return path.name, {0: path}
    ranks = {}
    for p in sorted(path.iterdir()):
        m = re.search(r"rank[_\-.]?(\d+)", p.name, re.I)
        if m and p.name.endswith((".json", ".json.gz")):
            ranks[int(m.group(1))] = p
    return path.name, ranks


# -- peers ----------------------------------------------------------------------------------

def run_hta(hta_python: str, files: dict[int, pathlib.Path], exact: bool, hta_path: str = "") -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if hta_path:
        env["PYTHONPATH"] = hta_path
    if exact:
        env["HTA_DISABLE_NS_ROUNDING"] = "1"
    cmd = [hta_python, str(HERE / "peers" / "hta_probe.py")] + (["--whole-trace"] if exact else [])
    cmd += [f"{r}={p}" for r, p in sorted(files.items())]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": f"HTA did not run: {exc}"[:200]}
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        return {"error": f"HTA exited {proc.returncode}: {tail[0][:200]}"}
    return json.loads(proc.stdout)


def hta_rank(h: dict[str, Any], rank: int) -> dict[str, Any]:
    """One rank's figures from HTA's JSON, in ns (HTA reports microseconds)."""
    if "error" in h:
        return {}
    out: dict[str, Any] = {"events": (h.get("gpu_events") or {}).get(str(rank))}
    for row in h.get("temporal") or []:
        if row["rank"] == rank:
            window, idle = row["kernel_time(us)"] * 1e3, row["idle_time(us)"] * 1e3
            out.update(window_ns=window, idle_in_window_ns=idle, busy_ns=window - idle,
                       compute_ns=row["compute_time(us)"] * 1e3, non_compute_ns=row["non_compute_time(us)"] * 1e3)
    for row in h.get("overlap") or []:
        if row["rank"] == rank and row.get("comp_comm_overlap_pctg") is not None:
            out["overlap_share"] = row["comp_comm_overlap_pctg"] / 100  # HTA rounds it to 0.01%
    for key, name in (("kernel_types_by_rank_untruncated", "types"), ("kernel_types_by_rank", "types_truncated")):
        per_rank = (h.get(key) or {}).get(str(rank))
        if per_rank is not None:
            out[name] = {k: v * 1e3 for k, v in per_rank.items()}
    out["non_kernel_gpu_events"] = (h.get("non_kernel_gpu_events") or {}).get(str(rank))
    out["copy_bytes"] = (h.get("copy_bytes") or {}).get(str(rank)) or {}
    out["steps"] = {r["iteration"]: r for r in (h.get("steps") or {}).get(str(rank), [])}
    idle = [r for r in h.get("idle_breakdown") or [] if r["rank"] == rank]
    if idle:
        cats: dict[str, float] = {}
        for r in idle:
            cats[r["idle_category"]] = cats.get(r["idle_category"], 0.0) + r["idle_time"] * 1e3
        out["idle_categories"] = cats
    return out


# -- rendering ------------------------------------------------------------------------------

def _us(ns: Any) -> str:
    return "—" if ns is None else f"{ns / 1e3:,.1f}"


def _pct(x: Any) -> str:
    return "—" if x is None else f"{100 * x:.2f}%"


def _diff(ours: Any, theirs: Any) -> tuple[str, bool]:
    if ours is None or theirs is None:
        return "", False
    if theirs == 0:
        return ("0" if ours == 0 else "∞"), ours != 0
    d = 100 * (ours - theirs) / abs(theirs)
    return f"{d:+.2f}", abs(d) > THRESHOLD


def _cell(text: str, limit: int = 120) -> str:
    """Trace strings are hostile: keep table cells single-line and pipe-free."""
    return str(text).replace("|", "\\|").replace("\n", " ").replace("`", "'")[:limit]


class Table:
    def __init__(self, title: str, peer: str):
        self.title, self.peer, self.rows = title, peer, []
        self.flagged: dict[str, list[str]] = {}  # metric -> [diff %, reason]

    def add(self, metric: str, ours: Any, theirs: Any, fmt=_us, default: Any = "", note: str = "", diff: bool = True):
        d, over = _diff(ours, theirs) if diff else ("", False)
        self.rows.append((metric, fmt(ours) if ours is not None or diff else "—", fmt(theirs), d, default, note))
        if over:
            self.flagged[metric] = [d, "unexplained"]

    def explain(self, metric_prefix: str, reason: str) -> None:
        for metric, entry in self.flagged.items():
            if metric.startswith(metric_prefix) and entry[1] == "unexplained":
                entry[1] = reason

    def diff_of(self, metric_prefix: str) -> float | None:
        for metric, _o, _t, d, _df, _n in self.rows:
            if metric.startswith(metric_prefix) and d not in ("", "∞"):
                return float(d)
        return None

    def render(self) -> str:
        lines = [f"### {_cell(self.title)}", "", f"| metric | tracekit | {self.peer} | diff % | HTA default | note |",
                 "|---|---:|---:|---:|---:|---|"]
        lines += ["| " + " | ".join([_cell(c) for c in row[:-1]] + [_cell(row[-1], 320)]) + " |" for row in self.rows]
        return "\n".join(lines) + "\n"


def hta_tables(label: str, files: dict[int, pathlib.Path], analyses: dict[int, Any], hta_exact, hta_default) -> list[Table]:
    tables = []
    for rank, a in sorted(analyses.items()):
        t = Table(f"{label} rank {rank} — HTA", "HTA (exact)")
        if isinstance(a, str):
            t.add("tracekit", None, None, note=a, diff=False)
            tables.append(t)
            continue
        ex, df = hta_rank(hta_exact, rank), hta_rank(hta_default, rank)
        ours = timeline_side.device_figures(a.kernels)
        devices = a.kernels["device"].nunique()
        reported = a.devices
        t.add("GPU activities (count)", ours["events"], ex.get("events"), fmt=lambda x: "—" if x is None else f"{x:,}",
              default=df.get("events", ""), note=f"{devices} device(s)")
        t.add("GPU-active window (us)", ours["window_ns"], ex.get("window_ns"), default=_us(df.get("window_ns")))
        t.add("busy, reported (us)", int(reported["busy_ns"].sum()), ex.get("busy_ns"), default=_us(df.get("busy_ns")))
        if "active_ns" in reported.columns:
            t.add("GPU-active window, reported (us)", int(reported["active_ns"].sum()), ex.get("window_ns"),
                  default=_us(df.get("window_ns")))
            t.add("idle in active window, reported (us)", int(reported["idle_ns"].sum()), ex.get("idle_in_window_ns"),
                  default=_us(df.get("idle_in_window_ns")))
            if "idle_span_ns" in reported.columns:
                t.add("idle over the capture span, reported (us)", int(reported["idle_span_ns"].sum()), None, diff=False,
                      note="capture span (host time before the first and after the last GPU activity); HTA has no such figure")
        else:  # tracekit before the GPU-active window: idle = capture span - busy
            t.add("idle, reported (us)", int(reported["idle_ns"].sum()), ex.get("idle_in_window_ns"),
                  default=_us(df.get("idle_in_window_ns")), note="tracekit: capture span - busy")
        t.add("idle in active window, from tracekit's kernels (us)", ours["idle_in_window_ns"], ex.get("idle_in_window_ns"), default=_us(df.get("idle_in_window_ns")))
        t.add("compute, union (us)", ours["compute_ns"], ex.get("compute_ns"), default=_us(df.get("compute_ns")))
        t.add("compute, union, HTA's name rules on tracekit's kernels (us)", ours["compute_hta_rules_ns"], ex.get("compute_ns"),
              default=_us(df.get("compute_ns")))
        t.add("non-compute (us)", ours["non_compute_ns"], ex.get("non_compute_ns"), default=_us(df.get("non_compute_ns")))
        ov = a.overlap
        comm = int(ov["comm_ns"].sum()) if len(ov) else 0
        share = None if not comm else float(ov["overlapped_ns"].sum()) / comm
        hta_comm = None
        if "types" in ex:
            hta_comm = sum(v for k, v in ex["types"].items() if "COMMUNICATION" in k)
        if ex.get("non_kernel_gpu_events"):
            t.add("HTA takes for GPU work", None, None, diff=False,
                  note="events with a 'stream' arg that are not GPU activity: " + ", ".join(ex["non_kernel_gpu_events"]))
        t.add("communication, union, reported (us)", comm, hta_comm)
        t.add("comm overlapped by compute, reported", share, ex.get("overlap_share"), fmt=_pct,
              default=_pct(df.get("overlap_share")))
        if "types" in ex or ours["types"]:
            theirs_types, default_types = ex.get("types", {}), df.get("types_truncated", {})
            truncated = ex.get("types_truncated", {})
            for k in sorted(set(ours["types"]) | set(theirs_types)):
                cut = truncated.get(k)
                note = f"HTA as-is {_us(cut)} (each segment cast to whole us)" if cut is not None and theirs_types.get(k) and \
                    abs(cut - theirs_types[k]) > 0.005 * theirs_types[k] else ""
                t.add(f"type: {k} (us)", ours["types"].get(k, 0), theirs_types.get(k), default=_us(default_types.get(k)), note=note)
        add_idle_split(t, a, ex.get("idle_categories") or {}, df.get("idle_categories") or {})
        mb = lambda x: "—" if x is None else f"{x / 1e6:,.3f} MB"  # noqa: E731
        for kind, cats in (("memcpy", ("gpu_memcpy", "Memcpy")), ("memset", ("gpu_memset", "Memset"))):
            rows = a.kernels[a.kernels["kind"] == kind]
            theirs = [ex["copy_bytes"][c] for c in cats if c in ex.get("copy_bytes", {})]
            if len(rows) or theirs:
                unknown = int((rows["bytes"] < 0).sum())
                t.add(f"{kind} bytes", float(rows["bytes"].clip(lower=0).sum()), sum(theirs) if theirs else None, fmt=mb,
                      default=mb(sum(df["copy_bytes"][c] for c in cats if c in df.get("copy_bytes", {}))) if df.get("copy_bytes") else "",
                      note=f"{unknown} {kind}s without a byte count in the trace (tracekit's kernels.bytes holds -1 for them)" if unknown else "")
        add_steps(t, a, ex.get("steps") or {}, df.get("steps") or {})
        explain_hta(t, a.kernels, ex)
        default_mode_note(t, ex, df, hta_default.get("errors") or {})
        tables.append(t)
    return tables


def straggler_table(label: str, files: dict[int, pathlib.Path], hta: dict[str, Any]) -> Table:
    """The ranks each tool names as stragglers. tracekit: the ranks that reach the matched
    collectives last (tracekit.ranks.executor); HTA: get_potential_stragglers, its default metric (the
    start of the last long ncclKernel on the (stream, kernel) whose duration varies most
    across ranks, top k). HTA as users run it (its default filter), as it needs its iterations."""
    t = Table(f"{label} — stragglers", "HTA get_potential_stragglers")
    try:
        from tracekit.ranks.executor import analyze_ranks
    except ImportError:
        t.add("tracekit", None, None, diff=False, note="this tracekit has no tracekit.ranks.executor")
        return t
    m = analyze_ranks([str(p) for _, p in sorted(files.items())])
    ours = [int(r) for r in m.summary.get("stragglers") or []]
    main = (m.summary.get("straggler") or {}).get("rank")
    theirs = hta.get("stragglers") or {}
    show = lambda v: "—" if v is None else ", ".join(str(x) for x in v) if isinstance(v, list) else str(v)  # noqa: E731
    top1 = theirs.get("1")
    t.rows.append(("straggler (top 1)", show(main), show(top1), "same" if top1 and main == top1[0] else "differs", "", ""))
    k = str(max(1, min(3, len(ours))))
    same = sorted(ours) == sorted(theirs.get(k) or [])
    t.rows.append((f"stragglers (top {k})", show(ours), show(theirs.get(k)), "same" if same else "differs", "",
                   f"tracekit: last to arrive at {m.summary.get('collective_instances')} matched collective instances "
                   f"(above {m.summary.get('straggler_threshold')} of the median step); HTA: start time of one collective"))
    if not same:
        t.flagged[f"stragglers (top {k})"] = ["", "definition: HTA ranks by when one collective (the last long "
                                               "ncclKernel whose duration varies most across ranks) starts; tracekit by how often and how "
                                               "late a rank reaches all matched collective instances last"]
    if top1 and main != top1[0]:
        t.flagged["straggler (top 1)"] = ["", "unexplained"]
    return t


def add_idle_split(t: Table, a: Any, theirs: dict[str, float], default: dict[str, float]) -> None:
    """tracekit's idle split (findings: host_wait / sync / other, device-wide, inside the steps)
    beside HTA's idle breakdown (host_wait / kernel_wait / other, per stream, between consecutive
    kernels, summed over streams). Where the device runs one stream the two count the same gaps
    once tracekit's rules run on HTA's window (first to last activity): that pair is diffed."""
    for cat, ns in sorted(theirs.items()):
        t.add(f"HTA idle breakdown: {cat} (us)", None, ns, default=_us(default.get(cat)), diff=False,
              note="per stream, between consecutive kernels, summed over streams")
    try:
        from tracekit import findings
    except ImportError:
        return
    f = findings.compute(a)
    for r in f.idle.itertuples():
        t.add(f"tracekit idle split, reported: {r.category} (us)", float(r.idle_ns), None, diff=False,
              note=f"device-wide, {f.idle_window}")
    if a.kernels["stream"].nunique() != 1 or not theirs or not hasattr(findings, "_gaps"):
        return
    k = a.kernels
    window = {int(k["device"].iloc[0]): np.array([[int(k["start"].min()), int(k["end"].max())]], dtype=np.int64)}
    gaps = findings._gaps(a, window)  # tracekit's rules on HTA's window
    by = gaps.groupby("category")["idle_ns"].sum() if len(gaps) else {}
    host, sync, other = (float(by.get(c, 0.0)) for c in ("host_wait", "sync", "other"))
    t.add("idle host_wait + sync, tracekit's rules on HTA's window (us)", host + sync, theirs.get("host_wait"),
          note=f"sync {_us(sync)} us of it: HTA has no sync category; a gap the host spent in a synchronising call "
               "ends with a late launch, which HTA calls host_wait")
    t.add("idle other, tracekit's rules on HTA's window (us)", other, theirs.get("kernel_wait", 0.0) + theirs.get("other", 0.0),
          note="HTA: kernel_wait (gaps under its 30-unit threshold, us in practice) + other")
    t.add("idle total, tracekit's rules on HTA's window (us)", host + sync + other, sum(theirs.values()))


def add_steps(t: Table, a: Any, theirs: dict[int, dict], default: dict[int, dict]) -> None:
    """Per ProfilerStep#N: kernels and busy time against HTA's iteration of each GPU event."""
    import re

    steps = a.steps
    if steps is None or steps.empty:
        return
    raw = raw_steps.step_counts(str(a.meta.get("path")))
    for row in steps.itertuples():
        m = re.match(r"ProfilerStep#(\d+)$", str(row.step))
        if not m:
            continue
        h, hd = theirs.get(int(m.group(1)), {}), default.get(int(m.group(1)), {})
        t.add(f"{row.step}: GPU activities", int(row.kernels), h.get("events"), fmt=lambda x: "—" if x is None else f"{x:,}",
              default=hd.get("events", "—"), note=f"raw JSON (launch inside the step window): {raw.get(str(row.step), 0):,}")
        busy = getattr(row, "busy_ns", None)
        t.add(f"{row.step}: busy (us)", None if busy is None or busy != busy else int(busy),
              None if "busy_us" not in h else h["busy_us"] * 1e3, default=_us(hd["busy_us"] * 1e3) if "busy_us" in hd else "—",
              note="HTA: merged intervals of the iteration's GPU events")
    on_stream0 = int((a.kernels["stream"] == 0).sum())
    if on_stream0:
        t.explain("ProfilerStep#", f"their bug: HTA's add_iteration gives an iteration only to GPU events on streams > 0 "
                                   f"(df['stream'].gt(0)); {on_stream0} of {len(a.kernels)} GPU events here run on stream 0")


def default_mode_note(t: Table, ex: dict[str, Any], df: dict[str, Any], errors: dict[str, str]) -> None:
    """HTA as users get it against HTA with its filter and rounding off: what the defaults cost."""
    parts = []
    kept, whole = df.get("events"), ex.get("events")
    if kept is not None and whole and kept < whole:
        parts.append(f"keeps {kept:,} of {whole:,} GPU events (drops the last ProfilerStep and every event not launched "
                     "by a CPU event before it)")
    if df.get("busy_ns") and ex.get("busy_ns"):
        d = 100 * (df["busy_ns"] - ex["busy_ns"]) / ex["busy_ns"]
        if abs(d) > THRESHOLD:
            parts.append(f"busy {d:+.1f}%")
    if kept == whole and parts:
        parts.append("with the same events: it rounds every event inward to whole microseconds (ceil start, floor end)")
    for what, err in errors.items():
        parts.append(f"{what} fails: {err[:80]}" + (" (the inward rounding leaves sub-microsecond kernels with end < start)"
                                                    if "Assertion" in err else ""))
    if parts:
        t.rows.append(("HTA default vs HTA exact", "", "", "", "", "; ".join(parts)))
        t.flagged["HTA default vs HTA exact"] = ["", "their defaults: " + "; ".join(parts)]


def explain_hta(t: Table, kernels: Any, ex: dict[str, Any]) -> None:
    """Reasons for the differences over the threshold that a check on the data can give."""
    window_idle = t.diff_of("idle in active window, from tracekit's kernels")
    if window_idle is not None and abs(window_idle) <= THRESHOLD:
        t.explain("idle, reported", "tracekit's bug (fixed on main by the GPU-active window): idle counted over the capture "
                                    "span, host time before the first and after the last GPU activity included")
    mine = timeline_side.kernel_types(kernels)
    theirs = timeline_side.hta_types(kernels["name"])
    differ = mine != theirs
    odd = ex.get("non_kernel_gpu_events")
    rules_diff = t.diff_of("compute, union, HTA's name rules")
    if differ.any() and (rules_diff is None or abs(rules_diff) <= THRESHOLD or odd):
        frame = kernels.loc[differ, ["name"]].assign(mine=mine[differ], theirs=theirs[differ])
        parts = []
        for (a, b), g in frame.groupby(["mine", "theirs"]):
            top = g["name"].astype(str).value_counts().index[0]
            parts.append(f"{len(g)} kernels tracekit {a}, HTA {b} (e.g. {top[:60]})")
        why = ("definition: kernel classification (HTA: communication is only ^nccl.*Kernel; tracekit's collective "
               "block also takes other collectives): " + "; ".join(parts) + ". With HTA's name rules on tracekit's "
               "kernels the compute union agrees")
        for m in ("compute, union (us)", "non-compute", "communication", "type:", "comm overlapped"):
            t.explain(m, why)
    if odd:
        bug = ("their bug: HTA takes every event with a 'stream' arg for GPU work, so a CPU op carrying one "
               f"(Triton's launcher: {', '.join(odd)[:80]}) counts as a kernel")
        for m in ("GPU activities", "busy", "idle in active window", "compute, union, HTA's", "type: COMPUTATION", "idle other,",
                  "idle total,"):
            t.explain(m, bug)



def inductor_table(label: str, path: pathlib.Path, a: Any) -> tuple[Table, Any]:
    t = Table(f"{label} — torch profile_analysis", "profile_analysis")
    with gzip.open(path, "rt") if path.suffix == ".gz" else open(path) as f:
        data = json.load(f)
    raw, notes = inductor_side.augment(data)
    if raw.empty:
        t.add("kernels augmented", None, 0, fmt=lambda x: "—" if x is None else str(x), diff=False, note="; ".join(notes))
        matched = inductor_side.on_tracekit_links(a)
        if matched.empty:
            return t, None
        t.add("kernels costed by its formulas on the ops tracekit links", len(matched), None,
              fmt=lambda x: "—" if x is None else f"{x:,}", diff=False,
              note="its _calculate_flops needs 'Concrete Inputs'; where the trace has none it returns 0")
    else:
        matched = inductor_side.match(raw, a.kernels)
        t.add("kernels augmented / matched", int(matched["start"].count()), len(raw), fmt=lambda x: f"{x:,}", note="; ".join(notes))
    ops = inductor_side.per_op(matched)
    multi = ops[ops["kernels"] > 1] if len(ops) else ops
    if len(multi):
        t.add("ops that launch more than one kernel", len(multi), None, fmt=lambda x: "—" if x is None else f"{x:,}", diff=False,
              note=f"{int(multi['kernels'].sum()):,} kernels: profile_analysis puts the op's whole count on each of them, tracekit "
                   "shares it among them; compared per op (External id), not per kernel")
    for row in inductor_side.summary_rows(ops):
        unit = row["unit"]
        fmt = (lambda x: "—" if x is None else f"{x / 1e9:,.4f} G") if unit == "flop" else (lambda x: "—" if x is None else f"{x / 1e6:,.3f} MB")
        t.add(row["metric"], row["tracekit"], row["peer"], fmt=fmt)
    explain_inductor(t)
    return t, inductor_side.mismatches(ops)


def explain_inductor(t: Table) -> None:
    conv = t.diff_of("FLOPs convolution, torch conv_flop_count")
    if conv is not None and abs(conv) <= THRESHOLD:
        t.explain("FLOPs convolution, profile_analysis's conv_adapter",
                  "their bug: conv_adapter sizes the output as (x - k) // stride + 1, ignoring padding and dilation; "
                  "torch's conv_flop_count with the real output size agrees with tracekit (row above)")
    causal = t.diff_of("FLOPs attention, causal ops")
    if causal is not None and abs(causal) <= THRESHOLD:
        t.explain("FLOPs attention, torch sdpa_flop_count", "definition: causal masking; the next row (torch x (S+1)/2S) agrees")
    for kind in ("GEMM 2x(A+B+C)", "other ops, tensor args as read"):
        rest = t.diff_of(f"bytes, {kind}, true sizes, ops no rule explains")
        if rest is not None and abs(rest) <= THRESHOLD:
            t.explain(f"bytes, {kind}, true sizes (", "every op group over 2% has a reason in the table below; "
                      "the ops no rule explains agree")


def render_mismatches(label: str, bad: Any, limit: int = 12) -> str:
    if bad is None or bad.empty:
        return ""
    lines = [f"#### {_cell(label)}: op groups over {THRESHOLD:.0f}% (tracekit vs profile_analysis)", "",
             "| op | shapes | types | n | FLOPs tk | FLOPs pa | diff % | bytes tk (their def) | bytes pa | bytes pa, true sizes | diff % | reason |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    flops = bad["inductor_flops"].fillna(bad["ref_flops"] if "ref_flops" in bad.columns else 0).fillna(0)
    bad = bad.assign(weight=bad["count"] * (flops + bad["pa_true_bytes"].fillna(0)))
    for r in bad.sort_values("weight", ascending=False).head(limit).itertuples():
        f = lambda x: "—" if x != x or x is None else f"{x:,.0f}"  # noqa: E731
        p = lambda x: "" if x != x or x is None else f"{100 * x:+.1f}"  # noqa: E731
        lines.append("| " + " | ".join(_cell(c, 240) for c in (r.op, r.shapes, r.types, r.count, f(r.tk_flops), _pa_flops(r),
                                                            p(r.flop_diff), f(r.tk_bytes), f(r.inductor_bytes), f(r.pa_true_bytes), p(r.byte_diff),
                                                            r.reason)) + " |")
    if len(bad) > limit:
        rest = bad.sort_values("weight", ascending=False).iloc[limit:]
        lines.append(f"| … {len(rest)} more groups | | | | | | | | | | | " + "; ".join(
            f"{n}: {c}" for n, c in rest["reason"].str.split(":").str[0].value_counts().items()) + " |")
    return "\n".join(lines) + "\n"


def _pa_flops(r: Any) -> str:
    """profile_analysis's FLOPs, or torch's sdpa_flop_count where profile_analysis crashed."""
    if r.inductor_flops == r.inductor_flops:
        return f"{r.inductor_flops:,.0f}"
    torch_flops = getattr(r, "ref_flops", float("nan"))
    return f"torch {torch_flops:,.0f}" if torch_flops == torch_flops else "—"


def tracekit_only(label: str, path: pathlib.Path, a: Any) -> Table:
    """Nsight exports: HTA and profile_analysis read only Kineto JSON. The reference column is
    the export's own activity tables read with plain SQL (peers/nsys_raw.py)."""
    t = Table(f"{label} — nsys export (HTA and profile_analysis cannot read it)", "SQLite tables, plain SQL")
    if isinstance(a, str):
        t.add("tracekit", None, None, note=a, diff=False)
        return t
    raw = nsys_raw.device_figures(str(path))
    count = lambda x: "—" if x is None else f"{x:,}"  # noqa: E731
    for device in sorted(set(raw) | set(int(d) for d in a.kernels["device"].unique())):
        k = a.kernels[a.kernels["device"] == device]
        ours = timeline_side.device_figures(k) if len(k) else {}
        ref = raw.get(device, {})
        reported = a.devices[a.devices["device"] == device]
        t.add(f"device {device}: GPU activities (count)", ours.get("events"), ref.get("events"), fmt=count)
        t.add(f"device {device}: GPU-active window (us)", ours.get("window_ns"), ref.get("window_ns"))
        t.add(f"device {device}: busy, reported (us)", int(reported["busy_ns"].sum()) if len(reported) else None, ref.get("busy_ns"))
        if "idle_ns" in reported.columns and "active_ns" in reported.columns and len(reported):
            theirs_idle = ref["window_ns"] - ref["busy_ns"] if ref else None
            t.add(f"device {device}: idle in active window, reported (us)", int(reported["idle_ns"].sum()), theirs_idle)
        if ours:
            t.add(f"device {device}: compute, union (us)", ours["compute_ns"], None, diff=False, note="tracekit only")
            t.add(f"device {device}: communication, union (us)", ours["comm_ns"], None, diff=False, note="tracekit only")
            t.add(f"device {device}: comm overlapped by compute", ours["overlap_share"], None, fmt=_pct, diff=False, note="tracekit only")
    if a.warnings:
        t.add("tracekit warnings", None, None, diff=False, note="; ".join(a.warnings)[:300])
    return t


def _has_torch() -> bool:
    try:
        import torch._inductor.analysis.profile_analysis  # noqa: F401
    except ImportError:
        print("[compare_peers] torch with _inductor.analysis not installed: no profile_analysis tables", file=sys.stderr)
        return False
    return True


def analyze_or_reason(path: pathlib.Path) -> Any:
    import tracekit

    try:
        return tracekit.analyze(path)
    except Exception as exc:  # shown in the table: tracekit failing is a finding too
        return f"tracekit failed: {type(exc).__name__}: {exc}"[:200]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="*", help="trace files, or directories of one job's rank<N> traces (default: every shared fixture)")
    ap.add_argument("--hta-python", default=HTA_PYTHON)
    ap.add_argument("--hta-pythonpath", default=HTA_PANDAS2 if os.path.isdir(HTA_PANDAS2) else "",
                    help="put first on HTA's path (a pandas 2.2; '' for the venv as installed)")
    ap.add_argument("--out", help="also write the Markdown here")
    ap.add_argument("--no-inductor", action="store_true")
    args = ap.parse_args(argv)
    jobs = [job(pathlib.Path(p)) for p in args.traces] if args.traces else default_jobs()
    import tracekit

    try:
        import torch

        torch_version = torch.__version__
    except ImportError:
        torch_version = "not installed"
    parts = [f"# tracekit vs HTA and torch profile_analysis\n\ntracekit from `{pathlib.Path(tracekit.__file__).parent}`; "
             f"torch {torch_version}; HTA from `{args.hta_python}`"
             + (f" with `{args.hta_pythonpath}` first on its path" if args.hta_pythonpath else "")
             + f". Differences over {THRESHOLD:.0f}% are listed at the end.\n"]
    flagged: list[str] = []
    for label, files in jobs:
        print(f"[compare_peers] {label}", file=sys.stderr, flush=True)
        analyses = {r: analyze_or_reason(p) for r, p in files.items()}
        if next(iter(files.values())).suffix == ".sqlite":
            t = tracekit_only(label, next(iter(files.values())), analyses[0])
            parts.append(t.render())
            flagged += [f"{t.title}: {m}: " + (f"{d}% — " if d else "") + r for m, (d, r) in t.flagged.items()]
            continue
        exact = run_hta(args.hta_python, files, exact=True, hta_path=args.hta_pythonpath)
        default = run_hta(args.hta_python, files, exact=False, hta_path=args.hta_pythonpath)
        notes = [f"{n}: {m}" for h, n in ((exact, "HTA exact"), (default, "HTA default")) for m in
                 ([h["error"]] if "error" in h else [f"{k}: {v}" for k, v in h.get("errors", {}).items()])]
        for t in hta_tables(label, files, analyses, exact, default):
            parts.append(t.render())
            flagged += [f"{t.title}: {m}: " + (f"{d}% — " if d else "") + r for m, (d, r) in t.flagged.items()]
        if len(files) > 1:
            t = straggler_table(label, files, default)
            parts.append(t.render())
            flagged += [f"{t.title}: {m}: " + (f"{d}% — " if d else "") + r for m, (d, r) in t.flagged.items()]
        if notes:
            parts.append("HTA errors: " + "; ".join(_cell(n) for n in notes) + "\n")
        if args.no_inductor or not _has_torch():
            continue
        for rank, path in sorted(files.items()):
            if isinstance(analyses[rank], str):
                continue
            t, bad = inductor_table(f"{label} rank {rank}" if len(files) > 1 else label, path, analyses[rank])
            parts.append(t.render())
            parts.append(render_mismatches(label, bad))
            if bad is not None and len(bad):
                for r in bad[bad["reason"].str.startswith("tracekit's bug") | bad["reason"].str.startswith("unexplained")].itertuples():
                    d = r.byte_diff if r.flop_diff != r.flop_diff else r.flop_diff
                    flagged.append(f"{t.title}: {r.op} {r.shapes}: {100 * d:+.1f}% — {r.reason}")
            flagged += [f"{t.title}: {m}: " + (f"{d}% — " if d else "") + r for m, (d, r) in t.flagged.items()]
    parts.append("## Differences over 2%\n\n" + "\n".join(f"- {_cell(f, 600)}" for f in flagged) + "\n")
    text = "\n".join(parts)
    print(text)
    if args.out:
        pathlib.Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
