"""Independent raw-sum reference reader for GPU profiler traces.

This is a CHECK on tracekit: it shares no code with tracekit and does not import it.
It reads a torch.profiler/Kineto JSON trace (.json or .json.gz, current and 2021 schema)
or an Nsight Systems SQLite export directly, with only the standard library and numpy,
and prints plain sums and interval unions that tracekit's headline figures can be
compared against.

    python benchmarks/raw_reference.py TRACE [--json]

Definitions (all times in microseconds; nsys nanoseconds are divided by 1000):
- gpu span: first start to last end over GPU activities (kernels, memcpy, memset).
- file span: first start to last end over every timed event in the file (Kineto: any
  event with a numeric ts, instants included, except metadata 'M' and the 'Trace' envelope,
  which is reported apart; x_event_span: complete 'X' events only; nsys: kernels, memcpy,
  memset, runtime and NVTX rows).
- busy (per device): measure of the union of all GPU activity intervals on that device,
  all streams; idle = gpu span - busy.
- communication kernels: name matches COMM_PATTERNS (case-insensitive); exposed time =
  measure(union(comm) minus union(non-comm kernels on the same device)).
- steps: host ranges named ProfilerStep#N / execute_* / step[* from user_annotation
  (2021 schema: Operator) or NVTX. A step owns the kernels whose launch (runtime event with
  the same correlation id; nsys: same process) starts inside the host range on any thread
  of the same process. busy_in_window: device busy time inside the owned kernels' GPU
  window; busy_in_host_range: the same inside the host range.
- idle gaps: holes >= GAP_MIN_US between merged busy intervals of a device.
"""
import argparse
import gzip
import json
import re
import sqlite3
import sys
from collections import defaultdict

import numpy as np

COMM_PATTERNS = ["nccl", "rccl", "all_reduce", "allreduce", "all_gather", "reduce_scatter",
                 "multimem", "cross_device"]
COMM_RE = re.compile("|".join(COMM_PATTERNS), re.I)
STEP_RE = re.compile(r"^(ProfilerStep#\d+|execute_|step\[)")
SYNC_RE = re.compile(r"Synchronize|^(cuda|hip)Memcpy(?!.*Async)|^(cuda|hip)Memset(?!.*Async)")
GAP_MIN_US = 50.0
KINETO_GPU = {"kernel": "kernel", "Kernel": "kernel", "gpu_memcpy": "memcpy", "Memcpy": "memcpy",
              "gpu_memset": "memset", "Memset": "memset"}
KINETO_HOST = {"cpu_op": "cpu_op", "Operator": "cpu_op", "python_function": "python_function",
               "user_annotation": "user_annotation", "cuda_runtime": "cuda_runtime",
               "Runtime": "cuda_runtime", "cuda_driver": "cuda_runtime"}


# ---------------------------------------------------------------- interval helpers
def merge(starts, ends):
    """Union of intervals -> (starts, ends) sorted, disjoint (touching ones merged)."""
    s, e = np.asarray(starts, float), np.asarray(ends, float)
    if s.size == 0:
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], np.maximum(e[order], s[order])
    run_end = np.maximum.accumulate(e)
    new = np.empty(s.size, bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    last = np.r_[idx[1:] - 1, s.size - 1]
    return s[idx], run_end[last]


def measure(merged):
    return float(np.sum(merged[1] - merged[0])) if merged[0].size else 0.0


def covered(merged, t):
    """Length of merged ∩ (-inf, t] for each t (vectorised)."""
    s, e = merged
    t = np.asarray(t, float)
    if s.size == 0:
        return np.zeros_like(t)
    cum = np.r_[0.0, np.cumsum(e - s)]
    i = np.searchsorted(s, t, side="right") - 1
    j = np.clip(i, 0, None)
    part = np.clip(np.minimum(t, e[j]) - s[j], 0, None)
    return np.where(i < 0, 0.0, cum[j] + part)


def overlap(merged, a, b):
    """Length of merged ∩ [a, b] for each pair."""
    return covered(merged, b) - covered(merged, a)


# ---------------------------------------------------------------- readers
def _num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def read_kineto(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        doc = json.loads(f.read())
    events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    t = dict(gpu=[], host=[], launch={}, steps=[], gpu_ann=[], file=[None, None],
             xspan=[None, None], envelope=None, dup_corr=0, unit="us")
    for e in events:
        if not isinstance(e, dict) or e.get("ph") == "M" or not _num(e.get("ts")):
            continue
        ts = float(e["ts"])
        dur = float(e["dur"]) if _num(e.get("dur")) and e["dur"] >= 0 else 0.0
        cat, name = e.get("cat"), e.get("name")
        if cat == "Trace":
            t["envelope"] = [ts, ts + dur]
            continue
        t["file"] = [ts if t["file"][0] is None else min(t["file"][0], ts),
                     ts + dur if t["file"][1] is None else max(t["file"][1], ts + dur)]
        if e.get("ph") != "X" or not isinstance(name, str):
            continue
        x = t["xspan"]
        t["xspan"] = [ts if x[0] is None else min(x[0], ts), ts + dur if x[1] is None else max(x[1], ts + dur)]
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        corr = args.get("correlation", args.get("correlation id"))
        if cat in KINETO_GPU:
            dev = args.get("device", e.get("pid"))
            t["gpu"].append((KINETO_GPU[cat], name, ts, ts + dur, str(dev), corr, None))
        elif cat in KINETO_HOST:
            kind = KINETO_HOST[cat]
            t["host"].append((kind, name, ts, ts + dur, str(e.get("pid"))))
            if kind == "cuda_runtime" and corr is not None:
                if corr in t["launch"]:
                    t["dup_corr"] += 1
                else:
                    t["launch"][corr] = (ts, str(e.get("pid")))
            if kind in ("user_annotation", "cpu_op") and STEP_RE.match(name) and \
                    (kind == "user_annotation" or cat == "Operator"):
                t["steps"].append(dict(name=name, start=ts, end=ts + dur, pid=str(e.get("pid")),
                                       ext=args.get("External id"), source=cat))
        elif cat == "gpu_user_annotation":
            t["gpu_ann"].append(dict(name=name, start=ts, end=ts + dur,
                                     ext=args.get("External id")))
    return t


def read_nsys(path):
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    con.text_factory = lambda b: b.decode("utf-8", "replace")
    tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
    if not tables & {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"}:
        raise SystemExit(f"{path}: not an Nsight Systems export (no CUPTI/NVTX tables)")
    cols = lambda tb: {r[1] for r in con.execute(f"pragma table_info({tb})")}
    strings = dict(con.execute("select id, value from StringIds")) if "StringIds" in tables else {}
    pid_of = lambda gtid: str(int(gtid) & 0xFFFFFFFFFF000000) if gtid is not None else None
    t = dict(gpu=[], host=[], launch={}, steps=[], gpu_ann=[], file=[None, None],
             xspan=[None, None], envelope=None, dup_corr=0, unit="us (from ns)")
    stamps = []
    for kind, tb in (("kernel", "CUPTI_ACTIVITY_KIND_KERNEL"), ("memcpy", "CUPTI_ACTIVITY_KIND_MEMCPY"),
                     ("memset", "CUPTI_ACTIVITY_KIND_MEMSET")):
        if tb not in tables:
            continue
        c = cols(tb)
        name_sql = ("coalesce(shortName, demangledName)" if "shortName" in c else "NULL") \
            if kind == "kernel" else "NULL"
        dname = "demangledName" if "demangledName" in c else "NULL"
        for s, e, dev, corr, gpid, nid, did in con.execute(
                f"select start, end, deviceId, correlationId, globalPid, {name_sql}, {dname} "
                f"from {tb} where start is not null and end is not null"):
            name = strings.get(did) or strings.get(nid) or kind
            t["gpu"].append((kind, name, s / 1e3, e / 1e3, str(dev), corr, pid_of(gpid)))
            stamps += [s, e]
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        cls = "eventClass" if "eventClass" in cols("CUPTI_ACTIVITY_KIND_RUNTIME") else "0"
        for s, e, gtid, corr, nid, ec in con.execute(
                f"select start, end, globalTid, correlationId, nameId, {cls} "
                "from CUPTI_ACTIVITY_KIND_RUNTIME where start is not null"):
            if ec not in (0, 1, None):   # backtrace/other rows repeat correlation ids
                continue
            name = re.sub(r"_v\d+$", "", strings.get(nid, "?"))
            pid = pid_of(gtid)
            t["host"].append(("cuda_runtime", name, s / 1e3, e / 1e3, pid))
            key = (pid, corr)
            if key in t["launch"]:
                t["dup_corr"] += 1
            else:
                t["launch"][key] = (s / 1e3, pid)
            stamps += [s, e]
    if "NVTX_EVENTS" in tables:
        tid = "textId" if "textId" in cols("NVTX_EVENTS") else "NULL"
        for s, e, et, text, txid, gtid in con.execute(
                f"select start, end, eventType, text, {tid}, globalTid from NVTX_EVENTS "
                "where eventType in (59, 60) and start is not null and end is not null"):
            name = text if text is not None else strings.get(txid, "")
            pid = pid_of(gtid)
            t["host"].append(("nvtx", name, s / 1e3, e / 1e3, pid))
            if STEP_RE.match(name or ""):
                t["steps"].append(dict(name=name, start=s / 1e3, end=e / 1e3, pid=pid,
                                       ext=None, source="nvtx"))
            stamps += [s, e]
    if stamps:
        t["file"] = t["xspan"] = [min(stamps) / 1e3, max(stamps) / 1e3]
    return t


# ---------------------------------------------------------------- analysis
def analyse(t, is_nsys):
    gpu = t["gpu"]
    out = dict(unit=t["unit"], file_span=None, x_event_span=None, profiler_envelope=t["envelope"], gpu_span=None,
               devices={}, comm=dict(patterns=COMM_PATTERNS, devices={}), top_kernels=[],
               steps=[], gaps={}, duplicate_correlation_ids=t["dup_corr"])
    for key, v in (("file_span", t["file"]), ("x_event_span", t["xspan"])):
        if v[0] is not None:
            out[key] = dict(start=v[0], end=v[1], dur=v[1] - v[0])
    if not gpu:
        return out
    kind = np.array([g[0] for g in gpu])
    names = np.array([g[1] for g in gpu], dtype=object)
    st = np.array([g[2] for g in gpu], float)
    en = np.array([g[3] for g in gpu], float)
    dev = np.array([g[4] for g in gpu])
    g0, g1 = float(st.min()), float(en.max())
    span = g1 - g0
    out["gpu_span"] = dict(start=g0, end=g1, dur=span)
    is_k = kind == "kernel"
    is_comm = is_k & np.array([bool(COMM_RE.search(n)) for n in names])
    lt, lp = launches(t, gpu, is_nsys)
    out["kernels_without_launch"] = int((is_k & np.isnan(lt)).sum())
    busy_by_dev = {}
    for d in sorted(set(dev)):
        m = dev == d
        busy = merge(st[m], en[m])
        busy_by_dev[d] = busy
        mk = m & is_k
        b = measure(busy)
        out["devices"][d] = dict(
            kernels=int(mk.sum()), kernel_sum=float((en[mk] - st[mk]).sum()),
            memcpy=int((m & (kind == "memcpy")).sum()), memset=int((m & (kind == "memset")).sum()),
            busy=b, idle=span - b, busy_pct_of_gpu_span=100 * b / span if span else None,
            device_span=float(en[m].max() - st[m].min()))
        mc = m & is_comm
        if mc.any():
            cu = merge(st[mc], en[mc])
            comp = merge(st[mk & ~is_comm], en[mk & ~is_comm])
            hidden = float(overlap(comp, cu[0], cu[1]).sum())
            out["comm"]["devices"][d] = dict(
                kernels=int(mc.sum()), sum=float((en[mc] - st[mc]).sum()), union=measure(cu),
                exposed=measure(cu) - hidden, overlapped=hidden)
        # idle gaps between busy intervals
        gs, ge = busy[1][:-1], busy[0][1:]
        big = np.flatnonzero(ge - gs >= GAP_MIN_US)
        top = big[np.argsort(-(ge[big] - gs[big]), kind="stable")][:5]
        pids = {g[6] for g, keep in zip(gpu, m) if keep} if is_nsys else None
        rows = np.flatnonzero(m)
        largest = []
        for i in top:
            c = gap_context(t["host"], gs[i], ge[i], pids)
            nxt = rows[(st[rows] == ge[i])][0]   # the activity that ends the gap
            c.update(next_activity=names[nxt][:120], next_launch_after_gap_start=None
                     if np.isnan(lt[nxt]) else float(lt[nxt] - gs[i]))
            largest.append(c)
        out["gaps"][d] = dict(min_gap=GAP_MIN_US, count=int(big.size),
                              total=float((ge[big] - gs[big]).sum()), largest=largest)
    # top kernels
    ksum, kcnt = defaultdict(float), defaultdict(int)
    for n, a, b in zip(names[is_k], st[is_k], en[is_k]):
        ksum[n] += b - a
        kcnt[n] += 1
    total_k = sum(ksum.values())
    out["kernel_total"] = dict(count=int(is_k.sum()), sum=total_k)
    out["top_kernels"] = [dict(name=n, count=kcnt[n], sum=s, share_pct=100 * s / total_k if total_k else None)
                          for n, s in sorted(ksum.items(), key=lambda x: -x[1])[:10]]
    out["steps"] = step_table(t, gpu, is_k, st, en, dev, busy_by_dev, lt, lp)
    return out


def gap_context(host, a, b, pids):
    """Host events open across [a, b] (innermost first) and sync calls overlapping it."""
    open_, syncs = [], []
    for kind, name, s, e, pid in host:
        if pids is not None and pid not in pids:
            continue
        if s <= a and e >= b:
            open_.append((e - s, kind, name))
        if kind == "cuda_runtime" and SYNC_RE.search(name) and s < b and e > a:
            syncs.append(dict(name=name, start=s, dur=e - s, overlap=min(e, b) - max(s, a)))
    open_.sort(key=lambda x: x[0])
    return dict(start=float(a), end=float(b), dur=float(b - a),
                open_host_events=[dict(cat=k, name=n[:160], dur=d) for d, k, n in open_[:12]],
                open_host_events_total=len(open_), sync_calls=syncs[:10])


def launches(t, gpu, is_nsys):
    """Launch start and process of each GPU activity through its correlation id (NaN: none)."""
    lt = np.full(len(gpu), np.nan)
    lp = np.empty(len(gpu), dtype=object)
    for i, g in enumerate(gpu):
        hit = t["launch"].get((g[6], g[5]) if is_nsys else g[5]) if g[5] is not None else None
        if hit:
            lt[i], lp[i] = hit
    return lt, lp


def step_table(t, gpu, is_k, st, en, dev, busy_by_dev, lt, lp):
    ann_by_ext = {a["ext"]: a for a in t["gpu_ann"] if a["ext"] is not None}
    ann_by_name = defaultdict(list)
    for a in sorted(t["gpu_ann"], key=lambda a: a["start"]):
        ann_by_name[a["name"]].append(a)
    seen = defaultdict(int)
    rows = []
    for s in sorted(t["steps"], key=lambda s: s["start"]):
        own_act = (lp == s["pid"]) & (lt >= s["start"]) & (lt <= s["end"])
        own = own_act & is_k
        row = dict(name=s["name"], source=s["source"], host_start=s["start"], host_end=s["end"],
                   host_dur=s["end"] - s["start"], kernels=int(own.sum()), activities=int(own_act.sum()))
        if own.any():
            w0, w1 = float(st[own].min()), float(en[own].max())
            row.update(gpu_window_start=w0, gpu_window_end=w1, gpu_window_dur=w1 - w0,
                       kernel_sum=float((en[own] - st[own]).sum()),
                       gpu_end_after_host_end=w1 - s["end"],
                       busy_in_window={d: float(overlap(busy_by_dev[d], [w0], [w1])[0])
                                       for d in sorted(set(dev[own]))})
            row["busy_in_window_total"] = sum(row["busy_in_window"].values())
            row["busy_in_host_range_total"] = sum(float(overlap(busy_by_dev[d], [s["start"]], [s["end"]])[0])
                                                  for d in sorted(set(dev[own])))
        a = ann_by_ext.get(s["ext"]) if s["ext"] is not None else None
        if a is None and not ann_by_ext:
            lst = ann_by_name.get(s["name"], [])
            a = lst[seen[s["name"]]] if seen[s["name"]] < len(lst) else None
            seen[s["name"]] += 1
        if a is not None and a["name"] == s["name"]:
            row["gpu_user_annotation"] = dict(start=a["start"], end=a["end"], dur=a["end"] - a["start"])
        rows.append(row)
    return rows


# ---------------------------------------------------------------- output
def report(path, r):
    p = print
    p(f"== {path}  [{r['unit']}]")
    for k in ("file_span", "x_event_span", "profiler_envelope", "gpu_span"):
        v = r[k]
        if isinstance(v, dict):
            p(f"{k:18s} {v['start']:.3f} .. {v['end']:.3f}  dur {v['dur']:.3f}")
        elif v:
            p(f"{k:18s} {v[0]:.3f} .. {v[1]:.3f}  dur {v[1] - v[0]:.3f}")
    if r.get("kernel_total"):
        p(f"kernels            {r['kernel_total']['count']}  sum {r['kernel_total']['sum']:.3f}  "
          f"without launch event {r['kernels_without_launch']}")
    for d, v in r["devices"].items():
        p(f"device {d}: kernels {v['kernels']} sum {v['kernel_sum']:.3f} busy {v['busy']:.3f} "
          f"idle {v['idle']:.3f} ({v['busy_pct_of_gpu_span']:.2f}% busy) memcpy {v['memcpy']} memset {v['memset']}")
    p(f"comm patterns: {', '.join(COMM_PATTERNS)}")
    for d, v in r["comm"]["devices"].items():
        p(f"  comm device {d}: {v['kernels']} kernels sum {v['sum']:.3f} union {v['union']:.3f} "
          f"exposed {v['exposed']:.3f}")
    p("top kernels:")
    for k in r["top_kernels"]:
        p(f"  {k['sum']:12.3f} {k['share_pct']:6.2f}% x{k['count']:<6d} {k['name'][:100]}")
    for s in r["steps"]:
        extra = ""
        if "gpu_window_dur" in s:
            extra = (f" gpu_window {s['gpu_window_dur']:.3f} ksum {s['kernel_sum']:.3f} "
                     f"busy {s['busy_in_window_total']:.3f} (in host range {s['busy_in_host_range_total']:.3f}) "
                     f"tail {s['gpu_end_after_host_end']:.3f}")
        if "gpu_user_annotation" in s:
            extra += f" gpu_ann {s['gpu_user_annotation']['dur']:.3f}"
        p(f"step {s['name'][:50]}: host {s['host_dur']:.3f} kernels {s['kernels']} "
          f"(activities {s['activities']}){extra}")
    for d, g in r["gaps"].items():
        p(f"gaps >= {g['min_gap']} on device {d}: {g['count']} total {g['total']:.3f}")
        for x in g["largest"]:
            inner = "; ".join(f"{h['cat']}:{h['name'][:40]}" for h in x["open_host_events"][:4])
            sync = "; ".join(f"{y['name']} {y['overlap']:.1f}" for y in x["sync_calls"][:3])
            la = x["next_launch_after_gap_start"]
            la = "none" if la is None else f"{la:.1f}"
            p(f"  {x['dur']:10.3f} at {x['start']:.3f} next launched {la} after gap start; open[{inner}] sync[{sync}]")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    try:
        with open(a.trace, "rb") as f:
            is_nsys = f.read(16).startswith(b"SQLite format 3")
        t = read_nsys(a.trace) if is_nsys else read_kineto(a.trace)
    except (ValueError, OSError, EOFError, sqlite3.DatabaseError) as exc:
        raise SystemExit(f"{a.trace}: cannot read: {type(exc).__name__}: {exc}")
    r = analyse(t, is_nsys)
    r["trace"] = a.trace
    if a.json:
        json.dump(r, sys.stdout, indent=1, default=str)
        print()
    else:
        report(a.trace, r)


if __name__ == "__main__":
    main()
