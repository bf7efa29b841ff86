"""Device tables: the built-in devices.toml and a user's device file, read into Devices
(every figure checked against its physical range, every name pattern compiled with RE2)."""

from __future__ import annotations

import functools
from typing import Any

from tracekit.errors import TraceError
from tracekit.hardware.device import DEVICE_KEYS, MAX_DEVICES, MAX_GBPS, MAX_TFLOPS, MIN_GBPS, MIN_TFLOPS, Device

def from_table(key: str, t: Any, path: str = "devices.toml") -> Device:
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
                name_pattern(pattern)
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
def name_pattern(pattern: str):
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
    import tomllib

    return tomllib


def builtin_devices() -> dict[str, Device]:
    from importlib import resources

    tomllib = _toml()
    text = resources.files("tracekit.hardware").joinpath("devices.toml").read_text(encoding="utf-8")
    return {key: from_table(key, table) for key, table in tomllib.loads(text).items()}


def load_device_file(path: str) -> dict[str, Device]:
    """The devices of a user's TOML file (same format as tracekit/hardware/devices.toml)."""
    from tracekit.userfile import load_toml

    tables = load_toml(path, "device file")
    if not tables:
        raise TraceError(path, "no device tables: see tracekit/hardware/devices.toml for the format")
    if len(tables) > MAX_DEVICES:
        raise TraceError(path, f"more than {MAX_DEVICES} devices")
    return {key: from_table(key, table, path) for key, table in tables.items()}
