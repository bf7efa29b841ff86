"""Device specs as data (devices.toml), lookup by the trace's device name, and overrides."""

from __future__ import annotations

import difflib
import re
import sys
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

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
    )


def builtin_devices() -> dict[str, Device]:
    text = resources.files("tracekit.hardware").joinpath("devices.toml").read_text(encoding="utf-8")
    return {key: _from_table(key, table) for key, table in tomllib.loads(text).items()}


def load_device_file(path: str) -> dict[str, Device]:
    try:
        with open(path, "rb") as f:
            tables = tomllib.load(f)
        return {key: _from_table(key, table) for key, table in tables.items()}
    except FileNotFoundError:
        raise TraceError(path, "no such device file") from None
    except (tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as exc:
        raise TraceError(path, f"not a valid device file ({type(exc).__name__}: {exc}); see tracekit/hardware/devices.toml for the format") from None


def find_device(name: str, devices: dict[str, Device]) -> Device | None:
    """The device whose key, name or match patterns fit `name` (case-insensitive)."""
    wanted = name.strip().lower()
    for device in devices.values():
        if wanted in (device.key.lower(), device.name.lower()):
            return device
    for device in devices.values():
        if any(re.search(p, name, re.I) for p in device.match):
            return device
    return None


def closest(name: str, devices: dict[str, Device], n: int = 3) -> list[str]:
    labels = {d.key: d for d in devices.values()}
    keys = difflib.get_close_matches(name.upper(), list(labels), n=n, cutoff=0.2)
    return keys or list(labels)[:n]


def resolve(trace_device_name: str | None, requested: str | None = None, device_file: str | None = None, *, source: str = "trace") -> Device:
    """The device to put the trace on: --device / --device-file first, else the trace's own."""
    devices = builtin_devices()
    if device_file:
        extra = load_device_file(device_file)
        devices.update(extra)
        if requested is None and len(extra) == 1:
            return next(iter(extra.values()))
    wanted = requested or trace_device_name
    if not wanted:
        raise TraceError(source, "the trace does not name its GPU; pass --device NAME (see `tracekit devices`) or --device-file FILE.toml")
    device = find_device(wanted, devices)
    if device is None:
        suggestions = ", ".join(closest(wanted, devices))
        raise TraceError(source, f"unknown device {wanted!r}; closest known: {suggestions}. Pass --device NAME (see `tracekit devices`) or --device-file FILE.toml")
    return device
