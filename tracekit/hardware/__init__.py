"""Device specs as data (devices.toml), lookup by the trace's device name, and overrides."""

from __future__ import annotations

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


def _from_table(key: str, t: dict[str, Any]) -> Device:
    return Device(
        key=key, name=t.get("name", key), matrix_tflops=dict(t.get("matrix_tflops", {})), vector_tflops=dict(t.get("vector_tflops", {})),
        memory_gbps=float(t["memory_gbps"]), interconnect_gbps=float(t.get("interconnect_gbps", 0.0)),
        host_link_gbps=float(t.get("host_link_gbps", 32.0)), memory_gb=t.get("memory_gb"),
        l2_mb=t.get("l2_mb"), sm_count=t.get("sm_count"), source=t.get("source", ""), match=tuple(t.get("match", ())),
        aliases=tuple(t.get("aliases", ())),
    )


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
    tomllib = _toml()
    try:
        with open(path, "rb") as f:
            tables = tomllib.load(f)
        return {key: _from_table(key, table) for key, table in tables.items()}
    except FileNotFoundError:
        raise TraceError(path, "no such device file") from None
    except (tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as exc:
        raise TraceError(path, f"not a valid device file ({type(exc).__name__}: {exc}); see tracekit/hardware/devices.toml for the format") from None


# Vendor words that a trace may or may not put before the model ("NVIDIA H100", "H100").
_VENDOR_WORDS = re.compile(r"\b(nvidia|amd|tesla)\b", re.I)
# A GPU's product line: the letters before its model number (H100 -> H, MI300X -> MI,
# GeForce RTX 4090 -> RTX, RTX A6000 -> RTX A, RTX PRO 6000 -> RTX PRO, GTX 1060 -> GTX).
_PRODUCT_LINE = re.compile(r"\b(RTX\s*PRO|RTX\s*A(?=\d)|RTX|GTX|MI|GB|GH|[A-Z])\s*-?\d", re.I)
MAX_NAME = 120  # device names come from the trace: bounded before any regex runs


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
        for pattern in device.match:
            found = re.search(pattern, name, re.I)
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
        device = find_device(requested, devices)
        if device is None:
            raise TraceError(source, f"unknown device {requested[:MAX_NAME]!r} ({_suggestion(requested, devices)}); "
                                     "pass --device NAME (see `tracekit devices`) or --device-file FILE.toml")
        return device, None
    if not trace_device_name or not trace_device_name.strip():
        return None, f"the trace does not name its GPU: {ROOFLINE_NEEDS_DEVICE}"
    device = find_device(trace_device_name, devices)
    if device is None:
        return None, (f"GPU {trace_device_name[:MAX_NAME]!r} is not in the device table "
                      f"({_suggestion(trace_device_name, devices)}): {ROOFLINE_NEEDS_DEVICE}")
    return device, None
