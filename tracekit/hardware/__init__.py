"""Hardware: device specs as data (devices.toml), read into Devices (device.py, table.py),
and the lookup of the device a trace ran on, with the user's overrides (lookup.py). Takes a
device name, a --device or a device file; gives a Device. Imports nothing of tracekit but errors."""

from tracekit.hardware.device import DEFAULT_SUSTAINED, Device
from tracekit.hardware.lookup import MAX_NAME, check_device_name, closest, find_device, product_line, resolve
from tracekit.hardware.table import builtin_devices, load_device_file

__all__ = ["DEFAULT_SUSTAINED", "Device", "MAX_NAME", "builtin_devices", "check_device_name", "closest", "find_device",
           "load_device_file", "product_line", "resolve"]
