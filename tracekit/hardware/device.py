"""A GPU's figures (Device: dense peaks per dtype, bandwidths, sizes, with sources) and the
physical ranges a device file's figures must lie in."""

from __future__ import annotations

from dataclasses import dataclass, field

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
