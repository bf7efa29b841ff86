"""`pip freeze` of a venv the suite passed in -> constraints.txt, the lock a new user installs with.

Reads the freeze on stdin and writes the lock on stdout:
- the project itself (its editable line) and comments are dropped: a constraints file may
  name no editable install;
- local version labels are dropped (`torch==2.13.0+cpu` -> `torch==2.13.0`): `==2.13.0`
  admits the CPU build where one is on the index, and the same release elsewhere;
- a package tracekit requires only on some platforms or Pythons keeps that marker from
  setup.cfg (isal), so the lock says where the pin applies.
Run by .ci/refresh-lock after the quick suite passed on the newest releases.
"""

from __future__ import annotations

import configparser
import datetime
import pathlib
import platform
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
_PIN = re.compile(r"^([A-Za-z0-9._-]+)==([^\s;+]+)(\+\S+)?\s*$")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def setup_markers() -> dict[str, str]:
    """The marker of each requirement in setup.cfg that has one, by canonical name."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    lines = config.get("options", "install_requires").splitlines()
    for extra in config.options("options.extras_require"):
        lines += config.get("options.extras_require", extra).splitlines()
    markers = {}
    for line in lines:
        line = line.strip()
        if ";" in line and not line.startswith("#"):
            requirement, marker = (part.strip() for part in line.split(";", 1))
            markers[_canonical(re.split(r"[<>=!~\[ ]", requirement, maxsplit=1)[0])] = marker
    return markers


def lock(freeze: str) -> str:
    markers = setup_markers()
    pins = []
    for line in freeze.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "-e ", "--")) or " @ " in line:
            continue
        match = _PIN.match(line)
        if match is None:
            raise SystemExit(f"lock.py: not a pinned release: {line!r}")
        name, version = match.group(1), match.group(2)
        if _canonical(name) == "tracekit":
            continue
        marker = markers.get(_canonical(name))
        pins.append(f"{name}=={version}" + (f"; {marker}" if marker else ""))
    pins.sort(key=lambda pin: _canonical(pin.split("==")[0]))
    head = [
        "# The versions tracekit's quick test suite passed with: `pip install -c constraints.txt -e '.[test]'`.",
        f"# Made by .ci/refresh-lock on {datetime.date.today().isoformat()} with CPython {platform.python_version()} "
        f"on {platform.system()} {platform.machine()}",
        "# (packages that only other platforms or Pythons install are not pinned here).",
    ]
    return "\n".join(head + pins) + "\n"


if __name__ == "__main__":
    sys.stdout.write(lock(sys.stdin.read()))
