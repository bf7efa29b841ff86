"""Throughput per step and each stage's share of wall time (tracekit.analysis.throughput) as Sections."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.common.format import duration, number, percent, rate
from tracekit.reports.section import Section

if TYPE_CHECKING:
    from tracekit.analysis import Analysis


def _stage_shares(shares) -> str:
    """A step's stages, largest first: `denoise 61%, recompute 31%, vae_decode 5.6%`."""
    if not isinstance(shares, dict) or not shares:
        return "—"
    ranked = sorted(shares.items(), key=lambda kv: -(kv[1] or 0))
    return ", ".join(f"{name} {percent(share)}" for name, share in ranked)


def sections(a: Analysis) -> list[Section]:
    t = a.throughput
    if t is None:
        return []
    head = ["step", "wall", "work", "throughput", "stages (share of the step)", "from"]
    rows = [[r["step"], duration(r["duration_ns"]), f"{number(r['items'], '{:,.0f}')} {r['unit']}",
             rate(r["throughput"], f"{r['unit']}/s"), _stage_shares(r.get("per_stage")), r["source"]]
            for r in t.steps.to_dict(orient="records")]
    total = t.total
    note = (f"all steps: {number(total['items'], '{:,.0f}')} {total['unit']} in {duration(total['wall_ns'])} = "
            f"{number(total['throughput'], '{:,.2f}')} {total['unit']}/s") if total else ""
    if a.meta.get("step_source"):  # where the steps came from (tracekit.structure.steps.STEP_SOURCES)
        evidence = f" ({a.meta['step_evidence']})" if a.meta.get("step_evidence") else ""
        note = f"steps from: {a.meta['step_source']}{evidence}" + (f"; {note}" if note else "")
    if (total or {}).get("pipeline_throughput") is not None:
        note += (f"; over the whole pipeline call ({duration(total['pipeline_wall_ns'])}, with the work around the loop): "
                 f"{number(total['pipeline_throughput'], '{:,.2f}')} {total['unit']}/s")
    if "output_tokens" in (total or {}):
        note += (f"; output tokens: {number(total['output_tokens'], '{:,.0f}')} = {number(total['output_tokens_per_s'], '{:,.2f}')}/s"
                 f" ({total['output_tokens_how']})")
    for stage, g in ((total or {}).get("by_main_stage") or {}).items():
        note += (f"; {stage} steps ({g['steps']:,}): {number(g['items'], '{:,.0f}')} {total['unit']} in {duration(g['wall_ns'])} = "
                 f"{number(g['throughput'], '{:,.2f}')} {total['unit']}/s")
    out = [Section("Throughput per step (wall: the step's GPU window, its host range where it has no GPU work; tokens: serving batch from the step annotation, "
                   "else the token embedding's input; frames: diffusion, or the frames a VAE stage's last convolution works on; "
                   "images: the latents a diffusion pipeline call decoded; samples: --samples-per-step, or the sequences a network "
                   "after a generate reads; "
                   "else steps)", head, rows, [0, 0, 0, 0, 1, 2], flex=0, left=(0, 4, 5), note=note, wrap=(4, 5),
                   empty="(no step annotations)")]
    in_steps = total is not None
    host = len(a.kernels) == 0
    head = ["stage", "kernels", "runs", "wall", "share of the steps' GPU windows" if in_steps else "share of GPU-active window",
            "wall per run", "busy"]
    if host:
        head[4] = "share of the steps' host time" if in_steps else "share of the capture"
    rows = [[r["stage"], f"{r['kernels']:,}", f"{r['runs']:,}", duration(r["wall_ns"]), percent(r["wall_share"]),
             duration(r["wall_per_run_ns"]), duration(r["busy_ns"])] for r in t.stages.to_dict(orient="records")]
    outside = (total or {}).get("outside_steps_kernels") or 0
    note = (f"{outside:,} GPU activities outside every step ({duration(total['outside_steps_busy_ns'])} busy) are not in "
            "this table" if outside else "")
    title = ("Stages: share of wall time (a run: consecutive kernels of one stage within one step, first start to last end)"
             if not host else "Stages: share of host time (no GPU work: each instant goes to the first phase rule whose "
             "frame, range or op is open then)")
    out.append(Section(title, head, rows, [0, 2, 2, 0, 0, 1, 1], note=note))
    d = t.denoise_steps
    if d is not None and len(d):
        mean = float(d["duration_ns"].mean())
        head = ["denoising step", "start", "wall", "host range", "kernels", "GPU busy", "from"]
        rows = [[f"{r['index']}", duration(r["start_ns"]), duration(r["duration_ns"]), duration(r["host_duration_ns"]),
                 f"{r['kernels']:,}", duration(r["busy_ns"]), r["source"]] for r in d.to_dict(orient="records")]
        out.append(Section("Denoising steps (diffusion: the UNet / transformer forward to the end of scheduler.step; wall: "
                           "its GPU window, the span of the GPU work it launched, or its host range where it launched none)", head, rows,
                           [0, 1, 0, 1, 1, 1, 2], left=(6,), note=f"{len(d)} denoising steps, mean {duration(mean)} = "
                           f"{number(1e9 / mean if mean > 0 else None, '{:,.2f}')} steps/s"))
    return out
