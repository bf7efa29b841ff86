"""Which device a trace ran on: its recorded name matched against the device tables (by
pattern, alias or product line), a user's --device / --device-file, and the warning when
none fits."""

from __future__ import annotations

import re

from tracekit.errors import TraceError
from tracekit.hardware.device import Device
from tracekit.hardware.table import builtin_devices, load_device_file, name_pattern

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
        if any(name_pattern(p).search(name) for p in device.exclude):
            continue
        for pattern in device.match:
            found = name_pattern(pattern).search(name)
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
    if ran_on is None and any(name_pattern(p).search(trace_device_name) for p in device.match):
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
