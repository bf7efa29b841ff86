"""Check a run against expectations written as data (TOML), and against a baseline run.

    [[expect]]                       # a block: "phase/block", or "block" over every phase
    block = "decode/attention"
    min_efficiency = 0.5             # also: min_coverage, max_time_ms, max_share
    max_regression = 0.05            # vs --baseline: time may grow at most 5%
                                     # (metric = "efficiency": may drop at most 5%)
    [[expect]]                       # the run as a whole
    max_step_time_ms = 30            # median step
    max_exposed_comm_share = 0.1     # exposed communication / capture span
    min_coverage = 0.9               # share of kernel time with a cost
    max_regression = 0.05            # vs --baseline: the median step may grow at most 5%
    [[expect]]                       # a kernel (its name or readable label), vs --baseline
    kernel = "flash_fwd_kernel"
    max_regression = 0.05            # time per call may grow at most 5%

Each limit gives one Verdict. A value that cannot be measured fails its limit with the
reason (an efficiency over less than half of the block's time is unknown, not a pass).

A regression against a baseline uses diff's normalisation and noise verdict
(tracekit.compare.noise): the median step (interval over steps), a kernel's time per call
(interval over its calls), a block's time per step when the captures cover different
steps. It fails when the change is above the limit *and* beyond the noise (`slower`); a
change inside the interval passes, with the interval in its reason. Where one side has a
single sample (no spread to measure), the change alone decides."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

from tracekit.compare.noise import DEFAULT_MIN_CHANGE, SLOWER, Samples, compare as noise
from tracekit.compare.summary import coverage_share, exposed_comm_share, number, records, step_time_ns
from tracekit.common.format import MIN_COVERAGE  # an efficiency over less than half its time is unknown
from tracekit.errors import TraceError


# limit key -> (what it measures, direction, unit); direction "min": measured >= limit
RUN_LIMITS = {
    "max_step_time_ms": ("step_time", "max", "ms"),
    "max_exposed_comm_share": ("exposed_comm_share", "max", "share"),
    "min_coverage": ("coverage", "min", "share"),
    "min_efficiency": ("efficiency", "min", "share"),
    "max_regression": ("regression", "max", "share"),
}
BLOCK_LIMITS = {
    "min_efficiency": ("efficiency", "min", "share"),
    "min_coverage": ("coverage", "min", "share"),
    "max_time_ms": ("time", "max", "ms"),
    "max_share": ("share", "max", "share"),
    "max_regression": ("regression", "max", "share"),
}
KERNEL_LIMITS = {
    "max_regression": ("regression", "max", "share"),
}
# What max_regression compares, and which way is worse: +1 when a larger value is worse.
REGRESSION_METRICS = {"run": {"step_time": +1, "efficiency": -1, "exposed_comm_share": +1},
                      "block": {"time": +1, "efficiency": -1, "share": +1},
                      "kernel": {"time_per_call": +1}}
OTHER_KEYS = {"block", "kernel", "name", "metric"}
SCOPE_LIMITS = {"run": RUN_LIMITS, "block": BLOCK_LIMITS, "kernel": KERNEL_LIMITS}


def scope_of(item: dict[str, Any]) -> str:
    return "block" if "block" in item else "kernel" if "kernel" in item else "run"


@dataclass
class Verdict:
    expectation: str  # "decode/attention efficiency", "run step_time"
    limit: str  # ">= 0.5", "<= 30 ms"
    measured: float | None
    unit: str  # "share" or "ms"
    ok: bool
    reason: str  # why it failed (or "")
    interval: list[float] | None = None  # regression: the 95% interval of the change (as a share), when measured
    change: str | None = None  # regression: faster / slower / within noise (tracekit.compare.noise)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_expectations(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The [[expect]] tables of a TOML file, validated (unknown keys are errors: a typo
    must not turn a limit into a silent pass)."""
    from tracekit.userfile import load_toml

    path = os.fspath(path)
    data = load_toml(path, "expectations file")
    unknown = sorted(set(data) - {"expect"})
    if unknown:
        raise TraceError(path, f"{unknown[0]}: unknown key (an expectations file holds [[expect]] tables)")
    items = data.get("expect")
    if not isinstance(items, list) or not items:
        raise TraceError(path, "no [[expect]] tables")
    for i, item in enumerate(items):
        validate(item, f"{path}: expect[{i}]")
    return items


def validate(item: Any, where: str) -> None:
    path, _, prefix = where.partition(": ")
    def bad(reason: str):
        return TraceError(path, f"{prefix}: {reason}" if prefix else reason)

    if not isinstance(item, dict):
        raise bad("an expectation must be a table")
    scope = scope_of(item)
    limits = SCOPE_LIMITS[scope]
    if "block" in item and "kernel" in item:
        raise bad("an expectation names a block or a kernel, not both")
    unknown = set(item) - set(limits) - OTHER_KEYS
    if unknown:
        raise bad(f"unknown key {sorted(unknown)[0]!r} for a {scope} expectation (known: {', '.join(sorted(limits))})")
    if scope == "block" and (not isinstance(item["block"], str) or not item["block"].strip("/")):
        raise bad("block must be a name: \"phase/block\" or \"block\"")
    if scope == "kernel" and (not isinstance(item["kernel"], str) or not item["kernel"]):
        raise bad("kernel must be a kernel's name or label")
    if not any(k in limits for k in item):
        raise bad(f"no limit given (one of: {', '.join(sorted(limits))})")
    for key in limits:
        if key in item and number(item[key]) is None:
            numeric = isinstance(item[key], (int, float)) and not isinstance(item[key], bool)
            raise bad(f"{key} must be a {'finite ' if numeric else ''}number")
        if key in item and key != "max_regression" and item[key] < 0:
            raise bad(f"{key} must be at least 0, not {item[key]}")
    if "name" in item and not isinstance(item["name"], str):
        raise bad("name must be a string")
    metric = item.get("metric")
    if metric is not None and (not isinstance(metric, str) or metric not in REGRESSION_METRICS[scope]):
        raise bad(f"metric must be one of {', '.join(REGRESSION_METRICS[scope])}")


def require_baseline(expectations: list[dict[str, Any]], source: str | os.PathLike = "<expectations>") -> None:
    """Without a baseline: an error naming `source` (the expectations file) if any
    expectation is a max_regression, which needs one."""
    for i, item in enumerate(expectations):
        if isinstance(item, dict) and "max_regression" in item:
            raise TraceError(source, f"expect[{i}]: max_regression needs a baseline summary (--baseline)")


def check(summary: dict[str, Any], expectations: list[dict[str, Any]], baseline: dict[str, Any] | None = None,
          min_change: float = DEFAULT_MIN_CHANGE, source: str | os.PathLike = "<expectations>") -> list[Verdict]:
    """One Verdict per limit (in a fixed order per expectation), expectations in the order written.
    `min_change`: the smallest change a regression verdict calls slower (tracekit.compare.noise).
    `source`: where the expectations came from (their file), named in errors."""
    source = os.fspath(source)
    for i, item in enumerate(expectations):
        validate(item, f"{source}: expect[{i}]")
    if baseline is None:
        require_baseline(expectations, source)
    verdicts = []
    for item in expectations:
        scope = scope_of(item)
        limits = SCOPE_LIMITS[scope]
        subject = item.get("name") or (item[scope] if scope != "run" else "run")
        for key, (metric, direction, unit) in limits.items():
            if key not in item:
                continue
            limit = float(item[key])
            if metric == "regression":
                compared = item.get("metric") or {"block": "time", "kernel": "time_per_call", "run": "step_time"}[scope]
                change = _regression(summary, baseline, item, scope, compared, min_change)
                verdicts.append(_regression_verdict(f"{subject} {compared} regression", limit, change))
                continue
            else:
                measured, reason = _measure(summary, item, scope, metric)
                name = f"{subject} {metric}"
            verdicts.append(_verdict(name, direction, limit, measured, unit, reason))
    return verdicts


def _verdict(name: str, direction: str, limit: float, measured: float | None, unit: str, unknown_reason: str) -> Verdict:
    shown = f"{limit:g} ms" if unit == "ms" else f"{limit:g}"
    text = (">= " if direction == "min" else "<= ") + shown
    if measured is None:
        return Verdict(name, text, None, unit, False, unknown_reason or "unknown")
    ok = measured >= limit if direction == "min" else measured <= limit
    return Verdict(name, text, measured, unit, ok, "" if ok else ("below the minimum" if direction == "min" else "above the maximum"))


def _measure(summary: dict[str, Any], item: dict[str, Any], scope: str, metric: str) -> tuple[float | None, str]:
    """The measured value (None when unknown) and, if unknown, why."""
    if scope == "run":
        if metric == "step_time":
            t = step_time_ns(summary)
            return (t / 1e6, "") if t is not None else (None, "unknown (the trace marks no steps)")
        if metric == "exposed_comm_share":
            share = exposed_comm_share(summary)
            return (share, "") if share is not None else (None, "unknown (no per-device span in the summary)")
        coverage = coverage_share(summary)
        if metric == "coverage":
            return (coverage, "") if coverage is not None else (None, "unknown (no coverage in the summary)")
        efficiency = number((summary.get("coverage") or {}).get("efficiency"))
        return _efficiency(efficiency, coverage)
    block = select_block(summary, item["block"])
    if block is None:
        return None, f"no block {item['block']!r} in this run"
    if metric == "time":
        return block["time_ns"] / 1e6, ""
    if metric == "efficiency":
        return _efficiency(block["efficiency"], block["coverage"])
    value = block[metric]
    return (value, "") if value is not None else (None, f"unknown ({metric} not in the summary)")


def _efficiency(value: float | None, coverage: float | None) -> tuple[float | None, str]:
    if coverage is None or coverage < MIN_COVERAGE or value is None:
        shown = "unknown" if coverage is None else f"{100 * coverage:.1f}%"
        return None, f"unknown (coverage {shown})"
    return value, ""


def select_block(summary: dict[str, Any], selector: str) -> dict[str, float | None] | None:
    """The phase x block rows `selector` names ("phase/block", or "block" in any phase),
    merged: time and share add up; coverage and efficiency are time-weighted as the
    analysis builds them (efficiency = Σ t_min / Σ modeled time). None when no row matches."""
    phase, _, block = selector.rpartition("/")
    rows = [r for r in records(summary, "blocks") if r.get("block") == block and (not phase or r.get("phase") == phase)]
    if not rows:
        return None
    kernel_ns = [number(r.get("kernel_time_ns")) or 0.0 for r in rows]
    coverage = [number(r.get("coverage")) for r in rows]
    modeled = [k * (c or 0.0) for k, c in zip(kernel_ns, coverage)]
    t_min = [m * number(r.get("efficiency")) for m, r in zip(modeled, rows) if m and number(r.get("efficiency")) is not None]
    modeled_with_eff = sum(m for m, r in zip(modeled, rows) if m and number(r.get("efficiency")) is not None)
    shares = [number(r.get("share")) for r in rows]
    return {
        "time_ns": sum(number(r.get("gpu_time_ns")) or 0.0 for r in rows),
        "share": sum(shares) if None not in shares else None,
        "coverage": sum(modeled) / sum(kernel_ns) if sum(kernel_ns) and None not in coverage else None,
        "efficiency": sum(t_min) / modeled_with_eff if modeled_with_eff else None,
    }


def _regression_verdict(name: str, limit: float, change: dict[str, Any]) -> Verdict:
    """Fails when the change is above the limit and not inside the noise."""
    measured, interval, noise_verdict = change["measured"], change.get("interval"), change.get("verdict")
    text = f"<= {limit:g}"
    if measured is None:
        return Verdict(name, text, None, "share", False, change["reason"] or "unknown")
    shown = f" (95% interval {interval[0]:+.1%} – {interval[1]:+.1%})" if interval else ""
    if measured <= limit:
        reason = "" if noise_verdict != SLOWER else f"slower beyond noise, within the limit{shown}"
        return Verdict(name, text, measured, "share", True, reason, interval, noise_verdict)
    if noise_verdict is None:  # no spread to measure on either side: the change decides
        return Verdict(name, text, measured, "share", False, "above the maximum (one sample each side: no noise estimate)",
                       interval, noise_verdict)
    if noise_verdict != SLOWER:
        return Verdict(name, text, measured, "share", True, f"{noise_verdict}{shown}: not a regression", interval, noise_verdict)
    return Verdict(name, text, measured, "share", False, f"above the maximum, slower beyond noise{shown}", interval, noise_verdict)


def _regression(summary, baseline, item, scope, metric, min_change) -> dict[str, Any]:
    """How much worse the run is than the baseline, as a share of the baseline (positive =
    worse): time growth, or efficiency drop; with the interval and noise verdict where the
    figure has samples (steps, a kernel's calls)."""
    worse = REGRESSION_METRICS[scope][metric]
    if scope == "kernel":
        (now, now_samples), why_now = _kernel_per_call(summary, item["kernel"])
        (then, then_samples), why_then = _kernel_per_call(baseline, item["kernel"])
        if now is None:
            return {"measured": None, "reason": why_now}
        if then is None:
            return {"measured": None, "reason": f"baseline {why_then}"}
        return _change(then, now, then_samples, now_samples, "mean", min_change, worse)
    now, why_now = _measure(summary, item, scope, metric)
    then, why_then = _measure(baseline, item, scope, metric)
    if now is None:
        return {"measured": None, "reason": why_now}
    if then is None:
        return {"measured": None, "reason": f"baseline {why_then}"}
    if scope == "block" and metric == "time":  # per step when the captures cover different steps
        from tracekit.compare.diff_steps import same_steps

        steps_now, steps_then = len(records(summary, "steps")), len(records(baseline, "steps"))
        if not same_steps(summary, baseline)[0] and steps_now and steps_then:
            now, then = now / steps_now, then / steps_then
    samples = (None, None)
    if scope == "run" and metric == "step_time":
        from tracekit.compare.diff_steps import step_samples

        samples = (step_samples(baseline), step_samples(summary))
    return _change(then, now, *samples, "median", min_change, worse)


def _change(then: float, now: float, then_samples, now_samples, statistic: str, min_change: float, worse: int) -> dict[str, Any]:
    if then == 0:
        return {"measured": None, "reason": "unknown (baseline value is 0)"}
    ratio = now / then
    out = {"measured": worse * (ratio - 1), "reason": "", "interval": None, "verdict": None}
    if worse > 0 and then_samples is not None and now_samples is not None:
        n = noise(then_samples, now_samples, ratio, statistic, min_change)
        out["verdict"] = n["verdict"]
        out["interval"] = [n["interval"][0] - 1, n["interval"][1] - 1] if n["interval"] else None
    return out


def kernel_function(name: str) -> str:
    """A kernel's function name alone: no return type, namespace, template or parameters
    (`void pytorch_flash::flash_fwd_kernel<traits...>(params)` -> `flash_fwd_kernel`), so an
    expectation names the flash kernel as a user would, whatever build wrapped it."""
    head = name[:512].removeprefix("void ").strip()
    for stop in ("<", "("):
        head = head.split(stop, 1)[0]
    return head.rsplit("::", 1)[-1].strip()


def _kernel_per_call(summary: dict[str, Any], selector: str) -> tuple[tuple[float | None, Samples | None], str]:
    """A kernel's time per call over every top-list row whose name, readable label or
    function name (kernel_function) is `selector`, with its calls' sketch; (None, None) and why when it is not there."""
    from tracekit.trace.kernel_names import kernel_label

    rows = [r for r in records(summary, "top_kernels")
            if selector in (r.get("name"), kernel_label(str(r.get("name")), 200), kernel_function(str(r.get("name"))))]
    if not rows:
        return (None, None), f"no kernel {selector!r} in this run's top kernels"
    calls = sum(int(r.get("count") or 0) for r in rows)
    time = sum(number(r.get("time_ns")) or 0.0 for r in rows)
    if not calls:
        return (None, None), f"kernel {selector!r} has no calls"
    sketches = [Samples.sketched(r.get("duration_sketch_ns"), r.get("count")) for r in rows]
    return (time / calls, Samples.merged(sketches) if None not in sketches else None), ""
