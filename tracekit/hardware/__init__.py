"""Device specs as data (devices.toml), lookup by the trace's device name, and overrides."""

from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from tracekit.errors import TraceError

DEFAULT_SUSTAINED = 0.8  # share of peak memory bandwidth a well-written kernel sustains


@dataclass(frozen=True)
class Device:
    key: str
    name: str
    matrix_tflops: dict[str, float]
    vector_tflops: dict[str, float]
    memory_gbps: float
    interconnect_gbps: float
    host_link_gbps: float = 32.0
    memory_gb: float | None = None
    l2_mb: float | None = None
    sm_count: int | None = None
    source: str = ""
    match: tuple[str, ...] = field(default=())
    aliases: tuple[str, ...] = field(default=())
    exclude: tuple[str, ...] = field(default=())  # names matching one of these are not this device

    def peak_flops(self, kind: str, dtype: str) -> float | None:
        """FLOP/s for work of `kind` in `dtype`; None when the device has no such unit."""
        table = self.matrix_tflops if kind == "matrix" else self.vector_tflops
        value = table.get(dtype)
        if value is None and dtype in ("int64", "int32", "int16", "uint8", "bool", "int8") and kind != "matrix":
            value = table.get("fp32")  # integer elementwise work runs on the same lanes
        if value is None and dtype == "fp32" and kind == "matrix":
            value = self.vector_tflops.get("fp32")
        return value * 1e12 if value else None

    @property
    def bandwidth(self) -> float:
        return self.memory_gbps * 1e9

    @property
    def interconnect(self) -> float:
        return self.interconnect_gbps * 1e9


DEVICE_KEYS = ("name", "matrix_tflops", "vector_tflops", "memory_gbps", "interconnect_gbps", "host_link_gbps", "memory_gb",
               "l2_mb", "sm_count", "source", "match", "exclude", "aliases")
MAX_DEVICES = 10_000


# Physical ranges of a device's figures: below a GB/s or 0.01 TFLOP/s no GPU was ever made
# (and a denormal peak, 5e-324, overflows every division by it); above a PB/s or an
# exaflop neither (and x 1e9 or 1e12 would reach infinity).
MIN_GBPS, MAX_GBPS = 1.0, 1e6
MIN_TFLOPS, MAX_TFLOPS = 0.01, 1e6


def _from_table(key: str, t: Any, path: str = "devices.toml") -> Device:
    """One device table, every key typed and in its physical range (MIN_GBPS, MIN_TFLOPS: a
    zero bandwidth would divide by zero, a negative one is a typo, a denormal one
    overflows), the `match` and `exclude` patterns valid for RE2."""
    from tracekit.userfile import Fields

    f = Fields(path, f"[{key}]", t, "table of device figures")
    f.unknown(DEVICE_KEYS)
    peaks = {}
    for unit in ("matrix_tflops", "vector_tflops"):
        table = f.sub(unit, {})
        peaks[unit] = {str(dtype): table.number(dtype, minimum=MIN_TFLOPS, maximum=MAX_TFLOPS) for dtype in table.table}
    matches, excludes = f.strings("match"), f.strings("exclude")
    for name, patterns in (("match", matches), ("exclude", excludes)):
        for i, pattern in enumerate(patterns):
            try:
                _pattern(pattern)
            except ValueError as exc:
                raise f.error(f"{name}[{i}]", f"bad regular expression for RE2 ({exc}); lookaround and backreferences are not supported") from None
    return Device(
        key=key, name=f.string("name", key), matrix_tflops=peaks["matrix_tflops"], vector_tflops=peaks["vector_tflops"],
        memory_gbps=f.number("memory_gbps", minimum=MIN_GBPS, maximum=MAX_GBPS), interconnect_gbps=_interconnect(f),
        host_link_gbps=f.number("host_link_gbps", 32.0, minimum=MIN_GBPS, maximum=MAX_GBPS), memory_gb=f.number("memory_gb", None, positive=True),
        l2_mb=f.number("l2_mb", None, positive=True), sm_count=f.number("sm_count", None, positive=True, integer=True),
        source=f.string("source", ""), match=matches, aliases=f.strings("aliases"), exclude=excludes,
    )


def _interconnect(f) -> float:
    """0 says the GPU has no interconnect (or it is unknown); any other value is a bandwidth."""
    value = f.number("interconnect_gbps", 0.0, minimum=0.0, maximum=MAX_GBPS)
    if 0 < value < MIN_GBPS:
        raise f.error("interconnect_gbps", f"must be 0 (none) or at least {MIN_GBPS:g}, not {value}")
    return value


@functools.lru_cache(maxsize=4096)
def _pattern(pattern: str):
    """A device-name pattern compiled with RE2, case-insensitively: linear time in the name
    for any pattern (a user's `(a+)+$` cannot hang the lookup). ValueError when RE2 refuses it."""
    import re2

    options = re2.Options()
    options.log_errors = False
    options.case_sensitive = False
    try:
        return re2.compile(pattern, options=options)
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ValueError(reason) from None


def _toml():
    """The TOML reader, imported when a device table is read (`tracekit info` reads none)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    return tomllib


def builtin_devices() -> dict[str, Device]:
    from importlib import resources

    tomllib = _toml()
    text = resources.files("tracekit.hardware").joinpath("devices.toml").read_text(encoding="utf-8")
    return {key: _from_table(key, table) for key, table in tomllib.loads(text).items()}


def load_device_file(path: str) -> dict[str, Device]:
    """The devices of a user's TOML file (same format as tracekit/hardware/devices.toml)."""
    from tracekit.userfile import load_toml

    tables = load_toml(path, "device file")
    if not tables:
        raise TraceError(path, "no device tables: see tracekit/hardware/devices.toml for the format")
    if len(tables) > MAX_DEVICES:
        raise TraceError(path, f"more than {MAX_DEVICES} devices")
    return {key: _from_table(key, table, path) for key, table in tables.items()}


# Vendor words that a trace may or may not put before the model ("NVIDIA H100", "H100").
_VENDOR_WORDS = re.compile(r"\b(nvidia|amd|tesla)\b", re.I)
# A GPU's product line: the letters before its model number (H100 -> H, MI300X -> MI,
# GeForce RTX 4090 -> RTX, RTX A6000 -> RTX A, RTX PRO 6000 -> RTX PRO, GTX 1060 -> GTX).
_PRODUCT_LINE = re.compile(r"\b(RTX\s*PRO|RTX\s*A(?=\d)|RTX|GTX|MI|GB|GH|[A-Z])\s*-?\d", re.I)
MAX_NAME = 120  # device names come from the trace: bounded before any regex runs


def check_device_name(requested: str, source: str = "--device") -> None:
    """A --device value longer than any device name is refused, never cut: matched cut, a
    long name could select a different device than the one typed."""
    if len(requested.strip()) > MAX_NAME:
        raise TraceError(source, f"--device value is {len(requested.strip()):,} characters long; a device key or name has at most "
                                 f"{MAX_NAME} (see `tracekit devices`)")


def _normal(name: str) -> str:
    """Lower case, vendor words and punctuation dropped: "NVIDIA H100" and "h-100" -> "h100"."""
    return re.sub(r"[^a-z0-9]", "", _VENDOR_WORDS.sub("", name.lower()))


def product_line(name: str) -> str | None:
    match = _PRODUCT_LINE.search(_VENDOR_WORDS.sub("", name[:MAX_NAME]))
    return re.sub(r"\s+", " ", match.group(1).upper()) if match else None


def find_device(name: str, devices: dict[str, Device]) -> Device | None:
    """The device `name` means, case-insensitively: its key, name or an alias exactly
    (punctuation and vendor words aside), else the device whose `match` pattern covers the
    longest part of the name (the most specific: "H200 NVL" over "H200")."""
    name = name.strip()[:MAX_NAME]
    wanted = _normal(name)
    if not wanted:
        return None
    for device in devices.values():
        if wanted in {_normal(n) for n in (device.key, device.name, *device.aliases)}:
            return device
    best, best_len = None, 0
    for device in devices.values():
        if any(_pattern(p).search(name) for p in device.exclude):
            continue
        for pattern in device.match:
            found = _pattern(pattern).search(name)
            if found and len(found.group(0)) > best_len:
                best, best_len = device, len(found.group(0))
    return best


def closest(name: str, devices: dict[str, Device], n: int = 3) -> list[str]:
    """Known devices of the same product line as `name`, most similar first; none when no
    known device shares its line (a GTX 1060 has no close relative among data-center GPUs)."""
    import difflib

    line = product_line(name)
    if line is None:
        return []
    same_line = [d for d in devices.values() if product_line(d.name) == line or product_line(d.key) == line]
    wanted = _normal(name)
    same_line.sort(key=lambda d: -difflib.SequenceMatcher(None, wanted, _normal(d.name)).ratio())
    return [d.key for d in same_line[:n]]


def _suggestion(name: str, devices: dict[str, Device]) -> str:
    near = closest(name, devices)
    return f"closest known: {', '.join(near)}" if near else "no known device of the same product line"


ROOFLINE_NEEDS_DEVICE = ("time, blocks, steps and overlap are analysed; roofline figures (t_min, efficiency, bound, "
                         "% of peak) are left empty: pass --device NAME (see `tracekit devices`) or --device-file FILE.toml")


def _other_gpu(trace_device_name: str | None, device: Device, devices: dict[str, Device]) -> str | None:
    """A warning when --device names another GPU than the one the trace ran on: every
    roofline figure is then held against the named GPU's peaks (a projection, not a
    measurement of this run's efficiency). None when the trace names no GPU or the same one."""
    if not trace_device_name or not trace_device_name.strip():
        return None
    ran_on = find_device(trace_device_name, devices)
    if ran_on is not None and ran_on.key == device.key:
        return None
    if ran_on is None and any(_pattern(p).search(trace_device_name) for p in device.match):
        return None
    return (f"the trace ran on {trace_device_name[:MAX_NAME]!r}, but --device puts it on {device.name} ({device.key}): "
            "efficiencies are against that GPU's peaks, not the one that ran it")


def resolve(trace_device_name: str | None, requested: str | None = None, device_file: str | None = None, *,
            source: str = "trace") -> tuple[Device | None, str | None]:
    """The device to put the trace on, and a warning when there is none: --device /
    --device-file first (an unknown --device is an error), else the trace's own GPU. A GPU
    the trace does not name, or one not in the table, leaves the device None: the analysis
    goes on without the roofline."""
    devices = builtin_devices()
    if device_file:
        extra = load_device_file(device_file)
        devices.update(extra)
        if requested is None and len(extra) == 1:
            return next(iter(extra.values())), None
    if requested:
        check_device_name(requested, source)
        device = find_device(requested, devices)
        if device is None:
            raise TraceError(source, f"unknown device {requested[:MAX_NAME]!r} ({_suggestion(requested, devices)}); "
                                     "pass --device NAME (see `tracekit devices`) or --device-file FILE.toml")
        return device, _other_gpu(trace_device_name, device, devices)
    if not trace_device_name or not trace_device_name.strip():
        return None, f"the trace does not name its GPU: {ROOFLINE_NEEDS_DEVICE}"
    device = find_device(trace_device_name, devices)
    if device is None:
        return None, (f"GPU {trace_device_name[:MAX_NAME]!r} is not in the device table "
                      f"({_suggestion(trace_device_name, devices)}): {ROOFLINE_NEEDS_DEVICE}")
    return device, None
