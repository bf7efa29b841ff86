"""Independent raw figures for the six H200 Kineto traces (a CHECK on tracekit).

Shares no code with tracekit and does not import it: standard library + numpy, plus the
interval helpers (merge / measure / overlap) of benchmarks/raw_reference.py.

    python benchmarks/raw_h200.py [TRACE ...] [--json] [--fixtures DIR]

With no TRACE, every /work/shared/fixtures/torch/h200_*.json.gz is read. Times are
microseconds unless a column says ms or s. Every figure is a plain sum, union or
first-start..last-end over events selected by the rules below, so it can be checked by hand.

Rules common to all traces
- GPU activity: events with cat kernel / gpu_memcpy / gpu_memset (ph X).
- launch of a GPU activity: the cuda_runtime or cuda_driver event with the same
  args.correlation (first one if repeated). Several kernels may share one correlation id
  (cudaGraphLaunch: every kernel of the replayed graph carries the launch's id).
- launching op: the innermost cpu_op on the launch's thread whose [ts, ts+dur] contains the
  launch's ts; its ancestors are the cpu_ops that contain it on the same thread.
- a kernel belongs to a host range (user_annotation such as ProfilerStep#N, denoise_step,
  decode_step) when the range's [ts, ts+dur] contains its launch's ts, on ANY thread of the
  same process (the autograd engine thread launches the backward of a training step).
- kernel sum: sum of kernel durations. union: measure of the union of their intervals.
  GPU window: first start .. last end of the selected kernels.
- busy: union of all kernels + memcpy + memset of the device. GPU span: first start .. last
  end over GPU activities (activities with ts == 0 and dur == 0 are left out and counted).

Per-trace rules
1 streaming video: the stage ranges denoise_step / kv_recompute / vae_decode (user_annotation).
  A chunk is the ProfilerStep#N range when there is one; this trace has NONE, so a chunk is the
  run of stage ranges ending with a vae_decode (host: first stage start .. vae_decode end).
  Stage wall = GPU window of the kernels launched inside the stage's host range (the two
  denoise_step windows of a chunk are added); share = stage wall / sum of the three stage
  walls over all chunks (also given with kernel unions and with gpu_user_annotation
  durations). frames/s = 12 / chunk GPU window; also 12 / period (start of a chunk's window
  to the start of the next one's, i.e. including the GPU gap between chunks).
2 training (non-reentrant checkpointing). Backward = ops nested (same thread) under an
  `autograd::engine::evaluate_function: *` op. Recompute (rule A, the one used): a cpu_op nested
  under evaluate_function that carries args["Sequence number"] (recorded with grad mode on,
  i.e. a forward op building autograd graph again), is not itself a *Backward*/AccumulateGrad
  node and has no such op above it, is a recompute root; kernels launched by a root or by an op
  below it are recompute. In this trace every root sits INSIDE `MmBackward0` (unpacking a
  saved tensor of the layer's first backward node triggers the recompute), so a rule of the
  form "forward op name not inside a *Backward* op" (rule B, printed for comparison) misses
  it entirely, and "forward op name anywhere in backward" (rule C) counts the backward's own
  mm/mul. Tokens = B*T from aten::embedding Input Dims[1]. GEMM role: outermost
  aten::linear/matmul/mm/addmm/bmm above the kernel; weight [out, in] = linear's Input Dims[1];
  for a 2-D mm [M,K]x[K,N]: [K,N] if M == tokens (grad input), [M,N] if K == tokens (grad
  weight); matched to the config: [h,h] q/o, [kv,h] k/v, [ff,h] gate/up, [h,ff] down,
  [vocab,h] lm_head (q vs o and k vs v have the same shapes and are not told apart).
3 HF generate: each aten::embedding call starts a model forward ([B,T]: T > 1 prefill,
  T == 1 decode); the forward ends at the end of the last lm_head aten::linear (weight
  [vocab, hidden]) before the next embedding; "token" = embedding .. next embedding.
  Decode i (0-based) reads weight_bytes + kv_bytes_per_token * (prompt + 1 + i) (truth file).
4 eager decode: per decode_step range; bytes = weights + KV read from the decode truth file;
  attention = kernels with a cpu_op whose name contains "attention" above the launching op
  (aten::scaled_dot_product_attention > _scaled_dot_product_cudnn_attention >
  _cudnn_attention_forward), and separately the user range "attention" (whole block).
5 zero-time trace: counts of ts == 0 / dur == 0 per GPU category (and ts == 0 for every
  category), gpu_user_annotation durations, sane span = first start .. last end over them.
"""
import argparse
import glob
import gzip
import json
import os
import re
import sys
from collections import Counter, defaultdict

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from raw_reference import merge, measure, overlap  # noqa: E402  (interval helpers only)

FIXTURES = "/work/shared/fixtures"
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
GEMM_OPS = ("aten::linear", "aten::matmul", "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
GEMM_KERNEL_RE = re.compile(r"gemm|nvjet|cutlass|xmma|cublas", re.I)
NOT_GEMM_KERNEL_RE = re.compile(r"sdpa|fmha|flash|attention", re.I)


# ------------------------------------------------------------------ loading
class Trace:
    """The events one needs, as numpy arrays, plus launch -> op attribution."""

    def __init__(self, path):
        self.path = path
        self.name = os.path.basename(path).replace(".json.gz", "").replace(".json", "")
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:
            doc = json.loads(f.read())
        self.doc_keys = {k: v for k, v in doc.items() if k != "traceEvents"}
        ev = doc["traceEvents"]
        self.cat_counts = Counter()
        self.zero_ts_counts = Counter()
        gpu, ops, launches, ranges, granges = [], [], [], [], []
        self.thread_names = {}
        for e in ev:
            cat = e.get("cat")
            ph = e.get("ph")
            self.cat_counts[f"{cat}/{ph}" if cat else f"(none)/{ph}"] += 1
            if ph != "M" and e.get("ts") == 0:
                self.zero_ts_counts[f"{cat}/{ph}"] += 1
            if ph == "M":
                if e.get("name") == "thread_name":
                    self.thread_names[(e.get("pid"), e.get("tid"))] = e.get("args", {}).get("name")
                continue
            if ph != "X":
                continue
            args = e.get("args") or {}
            ts = float(e.get("ts", 0.0))
            dur = float(e.get("dur", 0.0) or 0.0)
            if cat in GPU_CATS:
                gpu.append((cat, e["name"], ts, dur, e.get("tid"), args.get("correlation")))
            elif cat in LAUNCH_CATS:
                launches.append((e["name"], ts, dur, e.get("pid"), e.get("tid"), args.get("correlation")))
            elif cat == "cpu_op":
                ops.append(dict(name=e["name"], ts=ts, end=ts + dur, pid=e.get("pid"), tid=e.get("tid"),
                                args=args))
            elif cat == "user_annotation":
                ranges.append(dict(name=e["name"], ts=ts, end=ts + dur, pid=e.get("pid"), tid=e.get("tid"),
                                   ext=args.get("External id")))
            elif cat == "gpu_user_annotation":
                granges.append(dict(name=e["name"], ts=ts, end=ts + dur, stream=e.get("tid"),
                                    ext=args.get("External id")))
        self.ranges = sorted(ranges, key=lambda r: r["ts"])
        self.granges = sorted(granges, key=lambda r: r["ts"])
        # GPU activities
        self.g_cat = np.array([g[0] for g in gpu], dtype=object)
        self.g_name = np.array([g[1] for g in gpu], dtype=object)
        self.g_st = np.array([g[2] for g in gpu], float)
        self.g_en = self.g_st + np.array([g[3] for g in gpu], float)
        self.g_stream = np.array([g[4] for g in gpu], dtype=object)
        self.g_corr = [g[5] for g in gpu]
        self.is_k = self.g_cat == "kernel"
        self.zero = (self.g_st == 0) & (self.g_en == 0)
        # launches by correlation
        self.launch_by_corr = {}
        self.dup_corr = 0
        for i, l in enumerate(launches):
            if l[5] is None:
                continue
            if l[5] in self.launch_by_corr:
                self.dup_corr += 1
            else:
                self.launch_by_corr[l[5]] = i
        self.launches = launches
        # ops per thread, parent links, launch -> innermost op
        self.ops = ops
        self.op_parent = [-1] * len(ops)
        self.launch_op = [-1] * len(launches)
        by_tid = defaultdict(list)
        for i, o in enumerate(ops):
            by_tid[(o["pid"], o["tid"])].append(("o", o["ts"], -(o["end"] - o["ts"]), i))
        for i, l in enumerate(launches):
            by_tid[(l[3], l[4])].append(("l", l[1], 1.0, i))
        for key, items in by_tid.items():
            items.sort(key=lambda x: (x[1], x[2]))
            stack = []
            for kind, t, _, i in items:
                while stack and ops[stack[-1]]["end"] < t:
                    stack.pop()
                if kind == "o":
                    self.op_parent[i] = stack[-1] if stack else -1
                    stack.append(i)
                else:
                    self.launch_op[i] = stack[-1] if stack else -1
        # per GPU activity: launch index, launch ts, launching op
        n = len(gpu)
        self.g_launch = np.full(n, -1)
        self.g_lts = np.full(n, np.nan)
        self.g_lpid = np.empty(n, dtype=object)
        self.g_op = np.full(n, -1)
        for i, c in enumerate(self.g_corr):
            j = self.launch_by_corr.get(c) if c is not None else None
            if j is not None:
                self.g_launch[i] = j
                self.g_lts[i] = launches[j][1]
                self.g_lpid[i] = launches[j][3]
                self.g_op[i] = self.launch_op[j]

    # -------------------------------------------------------------- helpers
    def ancestors(self, i):
        """op i, its parent, ... (innermost first)."""
        out = []
        while i >= 0:
            out.append(i)
            i = self.op_parent[i]
        return out

    def in_host_range(self, r, mask=None):
        """GPU activities whose launch ts lies in range r (same process, any thread)."""
        m = (self.g_lpid == r["pid"]) & (self.g_lts >= r["ts"]) & (self.g_lts <= r["end"])
        return m if mask is None else m & mask

    def kstats(self, m):
        """kernel count, sum, union, window for the GPU-activity mask m (kernels only)."""
        m = m & self.is_k & ~self.zero
        if not m.any():
            return dict(kernels=0, kernel_sum=0.0, union=0.0, window_start=None, window_end=None, window=0.0)
        st, en = self.g_st[m], self.g_en[m]
        w0, w1 = float(st.min()), float(en.max())
        return dict(kernels=int(m.sum()), kernel_sum=float((en - st).sum()), union=measure(merge(st, en)),
                    window_start=w0, window_end=w1, window=w1 - w0)

    def range_gpu_annotation(self, r):
        for g in self.granges:
            if g["ext"] is not None and g["ext"] == r.get("ext") and g["name"] == r["name"]:
                return g
        return None


def truth(name):
    p = os.path.join(FIXTURES, "truth", name + ".truth.json")
    if os.path.exists(p):
        with open(p) as f:
            return json.load(f)
    return None


def rel(a, b):
    return None if a is None or b in (None, 0) else 100.0 * (a - b) / b


# ------------------------------------------------------------------ 6. every trace
def overview(t):
    nz = ~t.zero
    out = dict(trace=t.name, event_counts=dict(sorted(t.cat_counts.items(), key=lambda x: -x[1])),
               events_with_ts_0=dict(sorted(t.zero_ts_counts.items(), key=lambda x: -x[1])))
    cats = {}
    for c in GPU_CATS:
        m = t.g_cat == c
        cats[c] = dict(count=int(m.sum()), zero_ts_and_dur=int((m & t.zero).sum()),
                       sum=float((t.g_en[m] - t.g_st[m]).sum()))
    out["gpu_activities"] = cats
    out["kernel_total"] = dict(count=int(t.is_k.sum()), sum=float((t.g_en[t.is_k] - t.g_st[t.is_k]).sum()))
    if nz.any():
        g0, g1 = float(t.g_st[nz].min()), float(t.g_en[nz].max())
        busy = measure(merge(t.g_st[nz], t.g_en[nz]))
        out["gpu_span"] = dict(start=g0, end=g1, dur=g1 - g0, busy=busy,
                               busy_pct=100 * busy / (g1 - g0) if g1 > g0 else None)
    else:
        out["gpu_span"] = None
    out["streams"] = dict(Counter(str(s) for s in t.g_stream))
    out["threads"] = {f"{k[0]}/{k[1]}": v for k, v in t.thread_names.items()}
    out["kernels_without_launch_event"] = int((t.is_k & (t.g_launch < 0)).sum())
    out["kernels_without_launching_op"] = int((t.is_k & (t.g_launch >= 0) & (t.g_op < 0)).sum())
    out["launch_correlation_ids_repeated"] = t.dup_corr
    corr_k = Counter(c for c, k in zip(t.g_corr, t.is_k) if k)
    out["kernels_sharing_a_correlation_id"] = int(sum(v for v in corr_k.values() if v > 1))
    launch_names = Counter()
    for c, k in zip(t.g_corr, t.is_k):
        if not k:
            continue
        j = t.launch_by_corr.get(c) if c is not None else None
        launch_names[t.launches[j][0] if j is not None else "(none)"] += 1
    out["non_kernel_activities_without_launch_event"] = int((~t.is_k & (t.g_launch < 0)).sum())
    out["kernels_by_launch_call"] = dict(launch_names.most_common())
    steps = [r for r in t.ranges if r["name"].startswith("ProfilerStep#")]
    out["profiler_steps"] = [dict(name=r["name"], host_dur=r["end"] - r["ts"]) for r in steps]
    out["user_annotations"] = dict(Counter(r["name"] for r in t.ranges))
    out["gpu_user_annotations"] = dict(Counter(r["name"] for r in t.granges))
    return out


# ------------------------------------------------------------------ 1. streaming video
STAGES = ("denoise_step", "kv_recompute", "vae_decode")


def streaming(t):
    tr = truth(t.name) or {}
    fpc = tr.get("video_frames_per_chunk", 12)
    stage_ranges = [r for r in t.ranges if r["name"] in STAGES]
    steps = [r for r in t.ranges if r["name"].startswith("ProfilerStep#")]
    chunks = []
    if steps:
        for s in steps:
            chunks.append(dict(name=s["name"], host=s, stages=[r for r in stage_ranges
                                                            if r["ts"] >= s["ts"] and r["end"] <= s["end"]]))
        rule = "chunk = ProfilerStep#N host range"
    else:
        cur = []
        for r in stage_ranges:
            cur.append(r)
            if r["name"] == "vae_decode":
                chunks.append(dict(name=f"chunk{len(chunks)}", stages=cur,
                                   host=dict(name="chunk", ts=cur[0]["ts"], end=cur[-1]["end"], pid=cur[0]["pid"])))
                cur = []
        if cur:
            chunks.append(dict(name=f"chunk{len(chunks)}(incomplete)", stages=cur,
                               host=dict(name="chunk", ts=cur[0]["ts"], end=cur[-1]["end"], pid=cur[0]["pid"])))
        rule = ("NO ProfilerStep in the trace: chunk = the run of stage ranges ending with vae_decode "
                "(host first stage start .. vae_decode end)")
    rows = []
    for ci, c in enumerate(chunks):
        cm = t.in_host_range(c["host"])
        cs = t.kstats(cm)
        row = dict(chunk=c["name"], host_dur=c["host"]["end"] - c["host"]["ts"], **{f"chunk_{k}": v for k, v in cs.items()})
        in_stage = np.zeros_like(cm)
        per = {}
        for st in STAGES:
            agg = dict(ranges=0, kernels=0, kernel_sum=0.0, union=0.0, window=0.0, gpu_annotation=0.0)
            for r in c["stages"]:
                if r["name"] != st:
                    continue
                m = t.in_host_range(r)
                in_stage |= m
                s = t.kstats(m)
                ga = t.range_gpu_annotation(r)
                agg["ranges"] += 1
                for k in ("kernels", "kernel_sum", "union", "window"):
                    agg[k] += s[k]
                agg["gpu_annotation"] += (ga["end"] - ga["ts"]) if ga else 0.0
            per[st] = agg
        row["stages"] = per
        rest = cm & ~in_stage
        row["kernels_in_chunk_outside_stages"] = t.kstats(rest)["kernels"]
        row["kernel_sum_in_chunk_outside_stages"] = t.kstats(rest)["kernel_sum"]
        tot_w = sum(per[s]["window"] for s in STAGES)
        tot_u = sum(per[s]["union"] for s in STAGES)
        row["share_by_window_pct"] = {s: 100 * per[s]["window"] / tot_w for s in STAGES} if tot_w else None
        row["share_by_union_pct"] = {s: 100 * per[s]["union"] / tot_u for s in STAGES} if tot_u else None
        row["fps_chunk_window"] = fpc / (cs["window"] / 1e6) if cs["window"] else None
        rows.append(row)
    # chunk period: start of this chunk's window to the start of the next one's
    for a, b in zip(rows, rows[1:]):
        if a["chunk_window_start"] is not None and b["chunk_window_start"] is not None:
            a["period"] = b["chunk_window_start"] - a["chunk_window_start"]
            a["fps_period"] = fpc / (a["period"] / 1e6)
            a["gpu_gap_to_next_chunk"] = b["chunk_window_start"] - a["chunk_window_end"]
    full = [r for r in rows if "incomplete" not in r["chunk"]]
    summ = {}
    if full:
        W = {s: sum(r["stages"][s]["window"] for r in full) for s in STAGES}
        U = {s: sum(r["stages"][s]["union"] for r in full) for s in STAGES}
        A = {s: sum(r["stages"][s]["gpu_annotation"] for r in full) for s in STAGES}
        tw, tu, ta = sum(W.values()), sum(U.values()), sum(A.values())
        mean_w = float(np.mean([r["chunk_window"] for r in full]))
        periods = [r["period"] for r in full if "period" in r]
        summ = dict(
            chunks=len(full),
            stage_window_per_chunk_ms={s: W[s] / len(full) / 1e3 for s in STAGES},
            share_by_window_pct={s: 100 * W[s] / tw for s in STAGES},
            share_by_union_pct={s: 100 * U[s] / tu for s in STAGES},
            share_by_gpu_annotation_pct={s: 100 * A[s] / ta for s in STAGES} if ta else None,
            mean_chunk_window_ms=mean_w / 1e3,
            fps_mean_chunk_window=fpc / (mean_w / 1e6),
            mean_period_ms=float(np.mean(periods)) / 1e3 if periods else None,
            fps_mean_period=fpc / (float(np.mean(periods)) / 1e6) if periods else None,
        )
        if tr:
            ts_ = tr.get("stage_share", {})
            key = dict(denoise_step="denoise", kv_recompute="recompute", vae_decode="vae")
            summ["truth"] = dict(stage_share_pct={s: 100 * ts_[key[s]] for s in STAGES if key[s] in ts_},
                                 stage_ms={s: 1e3 * tr["stage_s"][key[s]] for s in STAGES},
                                 chunk_ms=1e3 * tr["chunk_s"], fps=tr["fps"])
            summ["diff_share_by_window_pts"] = {s: summ["share_by_window_pct"][s] - summ["truth"]["stage_share_pct"][s]
                                                for s in STAGES}
            summ["diff_share_by_union_pts"] = {s: summ["share_by_union_pct"][s] - summ["truth"]["stage_share_pct"][s]
                                               for s in STAGES}
            summ["diff_stage_window_vs_truth_pct"] = {s: rel(summ["stage_window_per_chunk_ms"][s],
                                                             summ["truth"]["stage_ms"][s]) for s in STAGES}
            summ["diff_fps_window_vs_truth_pct"] = rel(summ["fps_mean_chunk_window"], tr["fps"])
            summ["diff_fps_period_vs_truth_pct"] = rel(summ["fps_mean_period"], tr["fps"])
    return dict(rule=rule, frames_per_chunk=fpc, chunks=rows, summary=summ)


# ------------------------------------------------------------------ 2. tinyllama training
def gemm_role(t, gi, cfg, tokens):
    """Role of the outermost GEMM-family op above GPU activity gi, from the weight's [out, in]."""
    op = t.g_op[gi]
    if op < 0:
        return None, None
    top = None
    for a in t.ancestors(op):
        if t.ops[a]["name"] in GEMM_OPS:
            top = a
    if top is None:
        return None, None
    o = t.ops[top]
    dims = o["args"].get("Input Dims") or []
    w = None
    try:
        if o["name"] == "aten::linear":
            w = tuple(dims[1])
        elif o["name"] in ("aten::mm", "aten::matmul") and len(dims[0]) == 2 and len(dims[1]) == 2:
            (M, K), (K2, N) = dims[0], dims[1]
            if M == tokens:
                w = (K2, N)          # grad_input = G[T,out] @ W[out,in]  (or X @ W^T)
            elif K == tokens:
                w = (M, N)           # grad_weight = G^T[out,T] @ X[T,in]
        elif o["name"] == "aten::addmm":
            w = tuple(dims[2]) if len(dims) > 2 else None
    except (TypeError, ValueError, IndexError):
        w = None
    h, kv, ff, v = cfg["hidden_size"], cfg["num_key_value_heads"] * cfg.get(
        "head_dim", cfg["hidden_size"] // cfg["num_attention_heads"]), cfg["intermediate_size"], cfg["vocab_size"]
    roles = {(h, h): "q_proj/o_proj [h,h]", (kv, h): "k_proj/v_proj [kv,h]",
             (ff, h): "gate_proj/up_proj [ff,h]", (h, ff): "down_proj [h,ff]", (v, h): "lm_head [vocab,h]"}
    if w is not None and len(w) == 2:
        r = roles.get(tuple(w))
        if r is None and (w[1], w[0]) in roles:   # transposed layout (e.g. mm(X, W^T) outside linear)
            r = roles[(w[1], w[0])]
        return (r or f"other GEMM {list(w)}"), o["name"]
    return f"other GEMM ({o['name']} {dims[:2]})", o["name"]


FWD_NAME_RE = re.compile(r"^aten::(mm|addmm|linear|matmul|bmm|_?scaled_dot_product\w*|_flash_attention\w*|"
                         r"_efficient_attention\w*|_cudnn_attention\w*|layer_norm|native_layer_norm|rms_norm|"
                         r"_fused_rms_norm|silu|gelu|mul|add|pow|mean|rsqrt|neg|cat|embedding|softmax|_softmax|"
                         r"to|_to_copy|copy_)$")


def training(t):
    cfg = json.load(open(os.path.join(FIXTURES, "..", "models", "tinyllama-1.1b.config.json")))
    tr = truth(t.name) or {}
    kall = t.is_k & ~t.zero
    busy_all = measure(merge(t.g_st[~t.zero], t.g_en[~t.zero]))
    ksum_all = float((t.g_en[kall] - t.g_st[kall]).sum())
    # --- op classification
    n = len(t.ops)
    is_eval = np.array([o["name"].startswith("autograd::engine::evaluate_function") for o in t.ops])
    is_bwd_node = np.array([("Backward" in o["name"] or "AccumulateGrad" in o["name"]) and
                            not o["name"].startswith("autograd::engine") for o in t.ops])
    has_seq = np.array(["Sequence number" in o["args"] for o in t.ops])
    under_eval = np.zeros(n, bool)
    under_bwd_node = np.zeros(n, bool)   # strictly below a *Backward* node
    for i in range(n):
        p = t.op_parent[i]
        while p >= 0:
            if is_eval[p]:
                under_eval[i] = True
            if is_bwd_node[p]:
                under_bwd_node[i] = True
            p = t.op_parent[p]
    # rule A (used): recompute root = op under evaluate_function, recorded with a Sequence number
    # (grad mode on: a forward op building autograd graph), not a backward node itself, and
    # with no such op above it. Kernels whose launching op is, or is below, a root = recompute.
    cand = under_eval & has_seq & ~is_bwd_node & ~is_eval
    root = np.zeros(n, bool)
    for i in np.flatnonzero(cand):
        p, ok = t.op_parent[i], True
        while p >= 0:
            if cand[p]:
                ok = False
                break
            p = t.op_parent[p]
        root[i] = ok
    below_root = np.zeros(n, bool)
    for i in range(n):
        a = i
        while a >= 0:
            if root[a]:
                below_root[i] = True
                break
            a = t.op_parent[a]
    # rule B (the naive name rule): forward op name, under evaluate_function, NOT under a *Backward* node
    fwdname = np.array([bool(FWD_NAME_RE.match(o["name"])) for o in t.ops])
    ruleB_op = under_eval & fwdname & ~under_bwd_node & ~is_bwd_node
    # rule C: forward op name anywhere under evaluate_function (also catches the backward's own mm/mul)
    ruleC_op = under_eval & fwdname

    def kmask(opmask, use_ancestors=True):
        m = np.zeros(len(t.g_st), bool)
        idx = np.flatnonzero(t.is_k & (t.g_op >= 0))
        for gi in idx:
            op = t.g_op[gi]
            if use_ancestors:
                m[gi] = any(opmask[a] for a in t.ancestors(op))
            else:
                m[gi] = opmask[op]
        return m & ~t.zero

    kA = kmask(below_root, use_ancestors=False)
    kB = kmask(ruleB_op)
    kC = kmask(ruleC_op)
    in_bwd = kmask(under_eval | is_eval)
    ks = lambda m: float((t.g_en[m] - t.g_st[m]).sum())
    roots = Counter(t.ops[i]["name"] for i in np.flatnonzero(root))
    root_parents = Counter()
    for i in np.flatnonzero(root):
        p = t.op_parent[i]
        while p >= 0 and not is_bwd_node[p]:
            p = t.op_parent[p]
        root_parents[t.ops[p]["name"] if p >= 0 else "(none)"] += 1
    out = dict(kernel_count=int(kall.sum()), kernel_sum=ksum_all, busy=busy_all,
               backward_kernel_sum=ks(in_bwd),
               recompute_rule_A=dict(kernels=int(kA.sum()), kernel_sum=ks(kA), share_of_busy_pct=100 * ks(kA) / busy_all,
                                     share_of_kernel_sum_pct=100 * ks(kA) / ksum_all,
                                     root_ops=len(np.flatnonzero(root)), root_op_names=dict(roots.most_common(12)),
                                     backward_node_holding_the_roots=dict(root_parents.most_common(5))),
               rule_B_name_not_under_Backward=dict(kernels=int(kB.sum()), kernel_sum=ks(kB),
                                                   share_of_busy_pct=100 * ks(kB) / busy_all),
               rule_C_name_anywhere_in_backward=dict(kernels=int(kC.sum()), kernel_sum=ks(kC),
                                                     share_of_busy_pct=100 * ks(kC) / busy_all))
    # --- steps
    steps = [r for r in t.ranges if r["name"].startswith("ProfilerStep#")]
    emb = [i for i, o in enumerate(t.ops) if o["name"] == "aten::embedding"]
    srows = []
    for s in steps:
        m = t.in_host_range(s)
        st = t.kstats(m)
        toks = None
        for i in emb:
            o = t.ops[i]
            if s["ts"] <= o["ts"] <= s["end"] and o["pid"] == s["pid"]:
                d = o["args"].get("Input Dims")
                if d and len(d) > 1 and len(d[1]) == 2:
                    toks = (toks or 0) + d[1][0] * d[1][1]
                    bt = d[1]
        # forward = launches before the first evaluate_function of the step
        bw0 = min((o["ts"] for i, o in enumerate(t.ops) if is_eval[i] and s["ts"] <= o["ts"] <= s["end"]), default=None)
        fwd = m & (t.g_lts < bw0) if bw0 is not None else m
        # forward of the 22 layers (+ final norm): from the first _NoopSaveInputs to the lm_head linear
        nsi = [o["ts"] for o in t.ops if o["name"] == "_NoopSaveInputs" and s["ts"] <= o["ts"] <= s["end"]]
        lmh = [o["ts"] for o in t.ops if o["name"] == "aten::linear" and s["ts"] <= o["ts"] <= s["end"] and
               (o["args"].get("Input Dims") or [[], []])[1] == [cfg["vocab_size"], cfg["hidden_size"]]]
        layers = m & (t.g_lts >= min(nsi)) & (t.g_lts < min(lmh)) if nsi and lmh else None
        row = dict(step=s["name"], host_dur=s["end"] - s["ts"], **st, tokens=toks, embedding_BT=bt if toks else None,
                   tokens_per_s_window=toks / (st["window"] / 1e6) if toks and st["window"] else None,
                   forward_kernel_sum=ks(fwd & t.is_k), layers_forward_kernel_sum=ks(layers & t.is_k) if layers is not None else None,
                   recompute_A_kernel_sum=ks(kA & m), backward_kernel_sum=ks(in_bwd & m),
                   recompute_share_of_step_union_pct=100 * ks(kA & m) / st["union"] if st["union"] else None,
                   backward_host_start_after_step_start=bw0 - s["ts"] if bw0 else None)
        ga = t.range_gpu_annotation(s)
        row["gpu_annotation_dur"] = (ga["end"] - ga["ts"]) if ga else None
        srows.append(row)
    out["steps"] = srows
    if tr:
        out["truth"] = dict(tokens_per_step=tr["tokens_per_step"], step_s=tr["step_s"],
                            tokens_per_s=tr["tokens_per_step"] / tr["step_s"])
        for r in srows:
            r["diff_window_vs_truth_step_pct"] = rel(r["window"] / 1e6, tr["step_s"])
    # --- GEMM time by weight role
    tokens = srows[0]["tokens"] if srows and srows[0]["tokens"] else None
    # phase of each kernel: recompute (rule A) / backward (under evaluate_function, not recompute) /
    # forward (launched inside a ProfilerStep before its first evaluate_function) / other
    phase = np.full(len(t.g_st), "other", dtype=object)
    for s in steps:
        m = t.in_host_range(s)
        bw0 = min((o["ts"] for i, o in enumerate(t.ops) if is_eval[i] and s["ts"] <= o["ts"] <= s["end"]), default=np.inf)
        phase[m & (t.g_lts < bw0)] = "forward"
    phase[in_bwd] = "backward"
    phase[kA] = "recompute"
    phase[t.is_k & (t.g_launch < 0)] = "no launch event"
    out["kernel_sum_by_phase"] = {ph: ks(kall & (phase == ph)) for ph in
                                  ("forward", "recompute", "backward", "other", "no launch event")}
    role_sum, role_cnt, role_rec = defaultdict(float), Counter(), defaultdict(float)
    role_ph = defaultdict(lambda: defaultdict(float))
    name_gemm = 0.0
    for gi in np.flatnonzero(kall):
        d = t.g_en[gi] - t.g_st[gi]
        if GEMM_KERNEL_RE.search(t.g_name[gi]) and not NOT_GEMM_KERNEL_RE.search(t.g_name[gi]):
            name_gemm += d
        role, _ = gemm_role(t, gi, cfg, tokens)
        if role is None:
            continue
        role_sum[role] += d
        role_cnt[role] += 1
        if kA[gi]:
            role_rec[role] += d
        role_ph[role][phase[gi]] += d
    gsum = sum(role_sum.values())
    out["gemm_by_role"] = [dict(role=r, kernels=role_cnt[r], kernel_sum=v, share_of_kernel_sum_pct=100 * v / ksum_all,
                                of_which_recompute=role_rec[r], by_phase=dict(role_ph[r]))
                           for r, v in sorted(role_sum.items(), key=lambda x: -x[1])]
    out["gemm_total_by_op"] = dict(kernel_sum=gsum, share_of_kernel_sum_pct=100 * gsum / ksum_all)
    out["gemm_total_by_kernel_name"] = dict(pattern=GEMM_KERNEL_RE.pattern + " and not " + NOT_GEMM_KERNEL_RE.pattern, kernel_sum=name_gemm,
                                            share_of_kernel_sum_pct=100 * name_gemm / ksum_all)
    return out


# ------------------------------------------------------------------ 3. HF generate
def generate(t):
    cfg = json.load(open(os.path.join(FIXTURES, "..", "models", "llama3.1-8b.config.json")))
    tr = truth(t.name) or {}
    emb = sorted((o for o in t.ops if o["name"] == "aten::embedding"), key=lambda o: o["ts"])
    lmh = sorted((o for o in t.ops if o["name"] == "aten::linear" and
                  (o["args"].get("Input Dims") or [[], []])[1] == [cfg["vocab_size"], cfg["hidden_size"]]),
                 key=lambda o: o["ts"])
    gen = [r for r in t.ranges if r["name"] == "generate"]
    gen_end = gen[0]["end"] if gen else max(o["end"] for o in t.ops)
    rows = []
    ndec = 0
    for i, e in enumerate(emb):
        d = e["args"].get("Input Dims")
        B, T = d[1]
        nxt = emb[i + 1]["ts"] if i + 1 < len(emb) else gen_end
        lm = [o for o in lmh if e["ts"] <= o["ts"] < nxt]
        fend = lm[-1]["end"] if lm else nxt
        fwd = t.kstats(t.in_host_range(dict(ts=e["ts"], end=fend, pid=e["pid"])))
        tok = t.kstats(t.in_host_range(dict(ts=e["ts"], end=nxt, pid=e["pid"])))
        row = dict(i=i, kind="prefill" if T > 1 else "decode", B=B, T=T,
                   fwd_kernels=fwd["kernels"], fwd_kernel_sum=fwd["kernel_sum"], fwd_union=fwd["union"],
                   fwd_window=fwd["window"], fwd_window_start=fwd["window_start"],
                   token_kernels=tok["kernels"], token_kernel_sum=tok["kernel_sum"], token_window=tok["window"],
                   token_window_start=tok["window_start"], lm_head_found=bool(lm))
        if T == 1 and tr:
            ctx = tr["prompt"] + ndec + 1
            kv = tr["kv_bytes_per_token_of_context"] * ctx
            by = tr["weight_bytes_per_decode_step"] + kv
            row.update(context=ctx, kv_bytes=kv, bytes=by, bw_fwd_window_TBps=by / (fwd["window"] * 1e-6) / 1e12,
                       bw_fwd_kernel_sum_TBps=by / (fwd["kernel_sum"] * 1e-6) / 1e12)
            ndec += 1
        rows.append(row)
    for a, b in zip(rows, rows[1:]):
        if a["token_window_start"] is not None and b["token_window_start"] is not None:
            a["token_period"] = b["token_window_start"] - a["token_window_start"]
    dec = [r for r in rows if r["kind"] == "decode"]
    out = dict(rule=("forward = aten::embedding call .. end of the last lm_head aten::linear (weight [vocab, hidden]) "
                     "before the next embedding; token = embedding .. next embedding (or end of 'generate'); "
                     "kernels by launch ts in those host intervals"),
               forwards=len(rows), prefills=sum(r["kind"] == "prefill" for r in rows), decodes=len(dec), rows=rows)
    if dec:
        out["decode_mean"] = dict(fwd_window_ms=float(np.mean([r["fwd_window"] for r in dec])) / 1e3,
                                  fwd_kernel_sum_ms=float(np.mean([r["fwd_kernel_sum"] for r in dec])) / 1e3,
                                  token_period_ms=float(np.mean([r["token_period"] for r in dec if "token_period" in r])) / 1e3
                                  if any("token_period" in r for r in dec) else None,
                                  bw_fwd_window_TBps=float(np.mean([r["bw_fwd_window_TBps"] for r in dec])) if tr else None)
    if tr:
        out["truth"] = dict(prefills=1, decodes=tr["decode_steps"], decode_step_ms=1e3 * tr["decode_step_s_mean"],
                            weight_bytes=tr["weight_bytes_per_decode_step"],
                            kv_bytes_first=tr["kv_read_bytes_decode_step_first"],
                            kv_bytes_last=tr["kv_read_bytes_decode_step_last"])
        if dec:
            out["diff_decode_fwd_window_vs_truth_pct"] = rel(out["decode_mean"]["fwd_window_ms"], 1e3 * tr["decode_step_s_mean"])
    return out


# ------------------------------------------------------------------ 4. eager decode bs16
def eager_decode(t):
    tr = truth("h200_llama3-8b_decode_bs16") or {}
    by = (tr["weight_bytes_per_decode_step"] + tr["kv_read_bytes_per_decode_step"]) if tr else None
    att_op = np.array(["attention" in o["name"].lower() for o in t.ops])
    cud = np.array([o["name"] == "aten::_cudnn_attention_forward" for o in t.ops])
    katt, kcud = np.zeros(len(t.g_st), bool), np.zeros(len(t.g_st), bool)
    for gi in np.flatnonzero(t.is_k & (t.g_op >= 0)):
        anc = t.ancestors(t.g_op[gi])
        katt[gi] = any(att_op[a] for a in anc)
        kcud[gi] = any(cud[a] for a in anc)
    rows = []
    for r in (r for r in t.ranges if r["name"] == "decode_step"):
        m = t.in_host_range(r)
        s = t.kstats(m)
        ga = t.range_gpu_annotation(r)
        att_ranges = [a for a in t.ranges if a["name"] == "attention" and r["ts"] <= a["ts"] <= r["end"]]
        mr = np.zeros_like(m)
        for a in att_ranges:
            mr |= t.in_host_range(a)
        row = dict(host_dur=r["end"] - r["ts"], **s, gpu_annotation_dur=(ga["end"] - ga["ts"]) if ga else None,
                   attention_op_kernel_sum=t.kstats(m & katt)["kernel_sum"],
                   cudnn_attention_forward_kernel_sum=t.kstats(m & kcud)["kernel_sum"],
                   attention_range_kernel_sum=t.kstats(mr)["kernel_sum"])
        row["attention_op_share_pct"] = 100 * row["attention_op_kernel_sum"] / s["kernel_sum"] if s["kernel_sum"] else None
        row["cudnn_share_pct"] = 100 * row["cudnn_attention_forward_kernel_sum"] / s["kernel_sum"] if s["kernel_sum"] else None
        row["attention_range_share_pct"] = 100 * row["attention_range_kernel_sum"] / s["kernel_sum"] if s["kernel_sum"] else None
        if by:
            row["bytes"] = by
            row["bw_window_TBps"] = by / (s["window"] * 1e-6) / 1e12
            row["bw_kernel_sum_TBps"] = by / (s["kernel_sum"] * 1e-6) / 1e12
        rows.append(row)
    kall = t.is_k & ~t.zero
    tot = float((t.g_en[kall] - t.g_st[kall]).sum())
    out = dict(rule=("decode_step = user_annotation host range; kernels by launch ts; attention op = any cpu_op whose "
                     "name contains 'attention' (case-insensitive) above the launching op; attention range = "
                     "user_annotation 'attention' (the whole attention block incl. q/k/v/o projections)"),
               steps=rows,
               whole_trace=dict(kernel_sum=tot, attention_op_kernel_sum=float((t.g_en[katt & kall] - t.g_st[katt & kall]).sum()),
                                cudnn_attention_forward_kernel_sum=float((t.g_en[kcud & kall] - t.g_st[kcud & kall]).sum())))
    out["whole_trace"]["attention_op_share_pct"] = 100 * out["whole_trace"]["attention_op_kernel_sum"] / tot
    out["whole_trace"]["cudnn_share_pct"] = 100 * out["whole_trace"]["cudnn_attention_forward_kernel_sum"] / tot
    names = Counter()
    for gi in np.flatnonzero(kcud):
        names[t.g_name[gi][:90]] += 1
    out["cudnn_attention_kernel_names"] = dict(names.most_common(5))
    if tr:
        out["truth"] = dict(bytes=by, eager_step_ms=1e3 * tr["decode_step_eager_s"], graph_step_ms=1e3 * tr["decode_step_graph_s"],
                            note="README: eager step 20.6-22.1 ms unprofiled")
        if rows:
            mw = float(np.mean([r["window"] for r in rows]))
            out["mean_window_ms"] = mw / 1e3
            out["diff_mean_window_vs_truth_eager_pct"] = rel(mw / 1e3, 1e3 * tr["decode_step_eager_s"])
    return out


# ------------------------------------------------------------------ 5. zero-time trace
def zero_trace(t):
    tr = truth("h200_llama3-8b_decode_bs16") or {}
    cats = {}
    for c in GPU_CATS:
        m = t.g_cat == c
        cats[c] = dict(total=int(m.sum()), ts0=int((m & (t.g_st == 0)).sum()),
                       dur0=int((m & (t.g_en == t.g_st)).sum()), ts0_and_dur0=int((m & t.zero).sum()))
    anns = []
    for g in t.granges:
        anns.append(dict(name=g["name"], start=g["ts"], dur=g["end"] - g["ts"], stream=g["stream"]))
    byname = defaultdict(list)
    for a in anns:
        byname[a["name"]].append(a["dur"])
    summary = {k: dict(count=len(v), sum=float(sum(v)), mean=float(np.mean(v)), min=float(min(v)), max=float(max(v)))
               for k, v in byname.items()}
    s0 = min(a["start"] for a in anns) if anns else None
    s1 = max(a["start"] + a["dur"] for a in anns) if anns else None
    dec = [a for a in anns if a["name"] == "decode_step"]
    for a, b in zip(dec, dec[1:]):
        a["gap_to_next"] = b["start"] - (a["start"] + a["dur"])
        a["period"] = b["start"] - a["start"]
    host = {}
    for r in t.ranges:
        host.setdefault(r["name"], []).append(r["end"] - r["ts"])
    host_by_ext = {r["ext"]: r for r in t.ranges if r["ext"] is not None}
    offsets = []
    for g in t.granges:
        h = host_by_ext.get(g["ext"])
        if h is not None and g["name"] in ("prefill", "decode_step"):
            offsets.append(dict(name=g["name"], host_start=h["ts"], host_dur=h["end"] - h["ts"],
                                gpu_start_minus_host_start=g["ts"] - h["ts"], gpu_dur=g["end"] - g["ts"]))
    by = (tr["weight_bytes_per_decode_step"] + tr["kv_read_bytes_per_decode_step"]) if tr else None
    out = dict(categories=cats, host_vs_gpu_annotation=offsets, gpu_user_annotation=summary, decode_steps=dec,
               prefill=[a for a in anns if a["name"] == "prefill"],
               sane_span=dict(start=s0, end=s1, dur=(s1 - s0) if anns else None,
                              rule="first start .. last end over gpu_user_annotation events"),
               host_ranges={k: dict(count=len(v), mean=float(np.mean(v))) for k, v in host.items()},
               graph_launches=sum(1 for l in t.launches if l[0] == "cudaGraphLaunch"))
    if by and dec:
        dd = [a["dur"] for a in dec]
        out["decode_bw_from_annotation_TBps"] = dict(median=by / (float(np.median(dd)) * 1e-6) / 1e12,
                                                     bytes=by)
        out["truth"] = dict(graph_step_ms=1e3 * tr["decode_step_graph_s"], prefill_ms=1e3 * tr["prefill_s"])
    return out


# ------------------------------------------------------------------ text output
def f(x, nd=1):
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.{nd}f}"
    return str(x)


def text(res):
    p = print
    for name, r in res.items():
        o = r["overview"]
        p(f"\n==================== {name}")
        ev = o["event_counts"]
        p("events: " + ", ".join(f"{k} {v}" for k, v in ev.items()))
        if o["events_with_ts_0"]:
            p("events with ts == 0: " + ", ".join(f"{k} {v}" for k, v in o["events_with_ts_0"].items()))
        for c, v in o["gpu_activities"].items():
            p(f"  {c:11s} {v['count']:6d}  sum {f(v['sum'])} us  ts==0&dur==0: {v['zero_ts_and_dur']}")
        p(f"kernel total {o['kernel_total']['count']} sum {f(o['kernel_total']['sum'])} us")
        gs = o["gpu_span"]
        if gs:
            p(f"GPU span {f(gs['dur'])} us  busy {f(gs['busy'])} us ({f(gs['busy_pct'], 2)}%)")
        else:
            p("GPU span: none (no GPU activity with a nonzero timestamp)")
        p(f"streams {o['streams']}  threads {o['threads']}")
        p(f"kernels without launch event {o['kernels_without_launch_event']}, without launching op "
          f"{o['kernels_without_launching_op']}, sharing a correlation id {o['kernels_sharing_a_correlation_id']}; "
          f"launch calls: {o['kernels_by_launch_call']}")
        p(f"ProfilerStep: {'yes ' + str([(s['name'], round(s['host_dur'], 1)) for s in o['profiler_steps']]) if o['profiler_steps'] else 'NO'}")
        p(f"user_annotation {o['user_annotations']}  gpu_user_annotation {o['gpu_user_annotations']}")
        if "streaming" in r:
            s = r["streaming"]
            p(f"-- streaming video: {s['rule']}")
            p(f"{'chunk':8s} {'kern':>5s} {'window ms':>10s} {'period ms':>10s} {'fps(win)':>8s} "
              + " ".join(f"{st[:7]+' win/union/ksum ms':>31s}" for st in STAGES) + "  outside-stage kernels")
            for c in s["chunks"]:
                p(f"{c['chunk']:8s} {c['chunk_kernels']:5d} {f(c['chunk_window'] / 1e3, 2):>10s} "
                  f"{f(c.get('period', 0) / 1e3 if 'period' in c else None, 2):>10s} {f(c['fps_chunk_window'], 2):>8s} "
                  + " ".join(f"{f(c['stages'][st]['window'] / 1e3, 2):>10s}/{f(c['stages'][st]['union'] / 1e3, 2):>9s}/"
                             f"{f(c['stages'][st]['kernel_sum'] / 1e3, 2):>9s}" for st in STAGES)
                  + f"  {c['kernels_in_chunk_outside_stages']} ({f(c['kernel_sum_in_chunk_outside_stages'], 1)} us)"
                  + (f"  GPU gap to next chunk {f(c['gpu_gap_to_next_chunk'] / 1e3, 2)} ms" if "gpu_gap_to_next_chunk" in c else ""))
            m = s["summary"]
            if m:
                p(listed("stage share by window (%)", m["share_by_window_pct"]))
                p(listed("stage share by union  (%)", m["share_by_union_pct"]))
                if m.get("share_by_gpu_annotation_pct"):
                    p(listed("stage share by gpu_user_annotation dur (%)", m["share_by_gpu_annotation_pct"]))
                p(listed("stage window per chunk (ms)", m["stage_window_per_chunk_ms"]))
                p(f"mean chunk window {f(m['mean_chunk_window_ms'], 2)} ms -> {f(m['fps_mean_chunk_window'], 2)} frames/s; "
                  f"mean period {f(m['mean_period_ms'], 2)} ms -> {f(m['fps_mean_period'], 2)} frames/s")
                if "truth" in m:
                    tt = m["truth"]
                    p(f"truth: shares {', '.join(f'{k} {f(v, 2)}' for k, v in tt['stage_share_pct'].items())}; "
                      f"stage ms {', '.join(f'{k} {f(v, 2)}' for k, v in tt['stage_ms'].items())}; "
                      f"chunk {f(tt['chunk_ms'], 2)} ms; fps {f(tt['fps'], 2)}")
                    p(listed("diff share(window) - truth (points)", m["diff_share_by_window_pts"], signed))
                    p(listed("diff share(union)  - truth (points)", m["diff_share_by_union_pts"], signed))
                    p(listed("diff stage window vs truth stage_s (%)", m["diff_stage_window_vs_truth_pct"], signed))
                    p(f"diff fps vs truth: by window {m['diff_fps_window_vs_truth_pct']:+.2f}%, by period "
                      f"{m['diff_fps_period_vs_truth_pct']:+.2f}%")
        if "training" in r:
            s = r["training"]
            p(f"-- training: kernels {s['kernel_count']} sum {f(s['kernel_sum'])} us, busy {f(s['busy'])} us, "
              f"backward (under evaluate_function) kernel sum {f(s['backward_kernel_sum'])} us")
            a = s["recompute_rule_A"]
            p(f"recompute (rule A, used): {a['kernels']} kernels, {f(a['kernel_sum'])} us = {f(a['share_of_busy_pct'], 2)}% of busy, "
              f"{f(a['share_of_kernel_sum_pct'], 2)}% of kernel sum; {a['root_ops']} root ops {a['root_op_names']}; "
              f"held by backward nodes {a['backward_node_holding_the_roots']}")
            b, c = s["rule_B_name_not_under_Backward"], s["rule_C_name_anywhere_in_backward"]
            p(f"rule B (fwd op name, in backward, not under *Backward*): {b['kernels']} kernels {f(b['kernel_sum'])} us "
              f"({f(b['share_of_busy_pct'], 2)}% of busy)")
            p(f"rule C (fwd op name anywhere in backward): {c['kernels']} kernels {f(c['kernel_sum'])} us "
              f"({f(c['share_of_busy_pct'], 2)}% of busy)")
            for st in s["steps"]:
                p(f"{st['step']}: host {f(st['host_dur'] / 1e3, 2)} ms, GPU window {f(st['window'] / 1e3, 2)} ms, "
                  f"kernel sum {f(st['kernel_sum'] / 1e3, 2)} ms, union {f(st['union'] / 1e3, 2)} ms, "
                  f"gpu_annotation {f((st['gpu_annotation_dur'] or 0) / 1e3, 2)} ms; tokens {st['tokens']} "
                  f"(embedding [B,T]={st['embedding_BT']}) -> {f(st['tokens_per_s_window'], 0)} tokens/s (window); "
                  f"forward ksum {f(st['forward_kernel_sum'] / 1e3, 2)} ms (layers {f((st['layers_forward_kernel_sum'] or 0) / 1e3, 2)} ms), "
                  f"recompute ksum {f(st['recompute_A_kernel_sum'] / 1e3, 2)} ms "
                  f"({f(st['recompute_share_of_step_union_pct'], 2)}% of the step's kernel union), backward ksum {f(st['backward_kernel_sum'] / 1e3, 2)} ms; "
                  f"window vs truth step {st.get('diff_window_vs_truth_step_pct', 0):+.2f}%")
            if "truth" in s:
                p(f"truth: {s['truth']['tokens_per_step']} tokens/step, {f(s['truth']['step_s'] * 1e3, 2)} ms/step -> "
                  f"{f(s['truth']['tokens_per_s'], 0)} tokens/s")
            p(f"GEMM by weight role (outermost GEMM op above the kernel; total {f(s['gemm_total_by_op']['kernel_sum'])} us = "
              f"{f(s['gemm_total_by_op']['share_of_kernel_sum_pct'], 2)}% of kernel sum; by kernel name "
              f"{f(s['gemm_total_by_kernel_name']['share_of_kernel_sum_pct'], 2)}%):")
            for g in s["gemm_by_role"]:
                p(f"  {g['role']:32s} {g['kernels']:6d} kernels {f(g['kernel_sum'] / 1e3, 2):>9s} ms "
                  f"{f(g['share_of_kernel_sum_pct'], 2):>6s}%  by phase ms: "
                  + ", ".join(f"{k} {f(v / 1e3, 2)}" for k, v in sorted(g["by_phase"].items())))
            p("kernel sum by phase (ms): " + ", ".join(f"{k} {f(v / 1e3, 2)}" for k, v in s["kernel_sum_by_phase"].items()))
        if "generate" in r:
            s = r["generate"]
            p(f"-- generate: {s['rule']}")
            p(f"forwards {s['forwards']}: prefill {s['prefills']}, decode {s['decodes']}"
              + (f"  (truth: 1 prefill + {s['truth']['decodes']} decodes)" if "truth" in s else ""))
            p(f"{'#':>3s} {'kind':8s} {'[B,T]':>9s} {'kern':>5s} {'fwd win ms':>10s} {'fwd ksum ms':>11s} {'tok win ms':>10s} "
              f"{'period ms':>9s} {'ctx':>4s} {'GB':>7s} {'TB/s win':>8s} {'TB/s ksum':>9s}")
            for x in s["rows"]:
                p(f"{x['i']:3d} {x['kind']:8s} {str([x['B'], x['T']]):>9s} {x['fwd_kernels']:5d} {f(x['fwd_window'] / 1e3, 3):>10s} "
                  f"{f(x['fwd_kernel_sum'] / 1e3, 3):>11s} {f(x['token_window'] / 1e3, 3):>10s} "
                  f"{f(x['token_period'] / 1e3 if 'token_period' in x else None, 3):>9s} {f(x.get('context')):>4s} "
                  f"{f(x['bytes'] / 1e9 if 'bytes' in x else None, 3):>7s} {f(x.get('bw_fwd_window_TBps'), 3):>8s} "
                  f"{f(x.get('bw_fwd_kernel_sum_TBps'), 3):>9s}")
            if "decode_mean" in s:
                d = s["decode_mean"]
                p(f"decode mean: fwd window {f(d['fwd_window_ms'], 3)} ms, ksum {f(d['fwd_kernel_sum_ms'], 3)} ms, "
                  f"token period {f(d['token_period_ms'], 3)} ms, {f(d['bw_fwd_window_TBps'], 3)} TB/s; truth decode step "
                  f"{f(s['truth']['decode_step_ms'], 3)} ms (diff {s['diff_decode_fwd_window_vs_truth_pct']:+.2f}%)")
        if "eager_decode" in r:
            s = r["eager_decode"]
            p(f"-- eager decode: {s['rule']}")
            p(f"{'#':>2s} {'host ms':>8s} {'kern':>5s} {'window ms':>9s} {'ksum ms':>8s} {'union ms':>8s} {'gpu_ann ms':>10s} "
              f"{'TB/s win':>8s} {'TB/s ksum':>9s} {'attn op%':>8s} {'cudnn%':>7s} {'attn range%':>11s}")
            for i, x in enumerate(s["steps"]):
                p(f"{i:2d} {f(x['host_dur'] / 1e3, 3):>8s} {x['kernels']:5d} {f(x['window'] / 1e3, 3):>9s} "
                  f"{f(x['kernel_sum'] / 1e3, 3):>8s} {f(x['union'] / 1e3, 3):>8s} {f((x['gpu_annotation_dur'] or 0) / 1e3, 3):>10s} "
                  f"{f(x.get('bw_window_TBps'), 3):>8s} {f(x.get('bw_kernel_sum_TBps'), 3):>9s} {f(x['attention_op_share_pct'], 2):>8s} "
                  f"{f(x['cudnn_share_pct'], 2):>7s} {f(x['attention_range_share_pct'], 2):>11s}")
            w = s["whole_trace"]
            p(f"whole trace: kernel sum {f(w['kernel_sum'])} us; *attention* ops {f(w['attention_op_share_pct'], 2)}%, "
              f"_cudnn_attention_forward {f(w['cudnn_share_pct'], 2)}%; cuDNN kernels {s['cudnn_attention_kernel_names']}")
            if "truth" in s:
                p(f"truth bytes/step {s['truth']['bytes']:,} B; eager step {f(s['truth']['eager_step_ms'], 2)} ms unprofiled; "
                  f"mean window {f(s.get('mean_window_ms'), 3)} ms (diff {s.get('diff_mean_window_vs_truth_eager_pct', 0):+.2f}%)")
        if "zero" in r:
            s = r["zero"]
            p("-- zero-time trace")
            for c, v in s["categories"].items():
                p(f"  {c:11s} total {v['total']:6d}  ts==0 {v['ts0']:6d}  dur==0 {v['dur0']:6d}  both {v['ts0_and_dur0']:6d}")
            p(f"cudaGraphLaunch calls {s['graph_launches']}")
            for k, v in s["gpu_user_annotation"].items():
                p(f"  gpu_user_annotation {k:12s} x{v['count']:3d} sum {f(v['sum'] / 1e3, 3)} ms mean {f(v['mean'] / 1e3, 3)} "
                  f"min {f(v['min'] / 1e3, 3)} max {f(v['max'] / 1e3, 3)} ms")
            for a in s["prefill"]:
                p(f"  prefill {f(a['dur'] / 1e3, 3)} ms")
            p("  decode_step durations ms: " + ", ".join(f(a["dur"] / 1e3, 3) for a in s["decode_steps"]))
            p("  decode_step periods ms:   " + ", ".join(f(a["period"] / 1e3, 3) for a in s["decode_steps"] if "period" in a))
            ss = s["sane_span"]
            p(f"sane span ({ss['rule']}): {f(ss['dur'] / 1e3, 3)} ms")
            p("host range vs its gpu_user_annotation (same External id), ms: "
              + "; ".join(f"{x['name'][:7]} host {f(x['host_dur'] / 1e3, 2)} gpu {f(x['gpu_dur'] / 1e3, 2)} "
                          f"gpu-start-after-host-start {f(x['gpu_start_minus_host_start'] / 1e3, 2)}"
                          for x in s["host_vs_gpu_annotation"]))
            if "decode_bw_from_annotation_TBps" in s:
                p(f"bandwidth from median decode annotation: {f(s['decode_bw_from_annotation_TBps']['median'], 3)} TB/s "
                  f"(truth graph step {f(s['truth']['graph_step_ms'], 3)} ms, prefill {f(s['truth']['prefill_ms'], 1)} ms)")


def analyse(path):
    t = Trace(path)
    r = dict(overview=overview(t))
    n = t.name
    if "streaming_video" in n:
        r["streaming"] = streaming(t)
    elif "train_ckpt" in n:
        r["training"] = training(t)
    elif "generate" in n:
        r["generate"] = generate(t)
    elif "eager_decode" in n:
        r["eager_decode"] = eager_decode(t)
    elif "zero_kernel_times" in n:
        r["zero"] = zero_trace(t)
    return t.name, r



def signed(v) -> str:
    return f"{v:+.2f}"


def listed(label: str, values: dict, fmt=None) -> str:
    """`label: k v, k v` with each value printed by `fmt` (default: 2 decimals)."""
    return f"{label}: " + ", ".join(f"{k} {(fmt or (lambda x: f(x, 2)))(v)}" for k, v in values.items())

def main(argv=None):
    global FIXTURES
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--fixtures", default=FIXTURES)
    a = ap.parse_args(argv)
    FIXTURES = a.fixtures
    paths = a.traces or sorted(glob.glob(os.path.join(FIXTURES, "torch", "h200_*.json.gz")))
    res = {}
    for p in paths:
        k, r = analyse(p)
        res[k] = r
    if a.json:
        json.dump(res, sys.stdout, indent=1, default=str)
        print()
    else:
        text(res)


if __name__ == "__main__":
    main()
