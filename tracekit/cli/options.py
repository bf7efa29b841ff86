"""The one option validator (issue 39): rules every command's options obey, applied to each
command as it is loaded (cli/main.py), so that a new option cannot forget them.

- A text or path option given as '' (or only blanks) is refused: `--to ''` and `--what-if ''`
  once fell through to "no device" and failed later with an AttributeError; `--device ''`
  was ignored; `check --baseline ''` was taken as "no baseline".
- A number option is finite: click's FloatRange compares, and NaN passes every comparison
  (`--sustained nan` was accepted and printed "sustained nan%").

Option-specific rules (a device name's length, --scheduler's form) stay beside their options.
"""

from __future__ import annotations

import math

import click


def _text_like(param: click.Parameter) -> bool:
    return isinstance(param.type, (click.types.StringParamType, click.Path)) or param.type is click.STRING


def _float_like(param: click.Parameter) -> bool:
    return isinstance(param.type, (click.types.FloatParamType, click.FloatRange))


def _blank(value) -> bool:
    return isinstance(value, str) and not value.strip()


def _check(param: click.Parameter, value):
    values = value if param.multiple and isinstance(value, (tuple, list)) else (value,)
    for one in values:
        if _text_like(param) and _blank(one):
            raise click.BadParameter("an empty value: give a path or a name, or leave the option out")
        if _float_like(param) and isinstance(one, float) and not math.isfinite(one):
            raise click.BadParameter(f"{one} is not a finite number")
    return value


def _chained(param: click.Parameter):
    own = param.callback

    def callback(ctx, p, value):
        value = _check(p, value)
        return own(ctx, p, value) if own is not None else value

    return callback


def validated(command: click.Command) -> click.Command:
    """`command` with the rules above on every option (once: a command object is shared)."""
    if getattr(command, "tracekit_validated", False):
        return command
    for param in command.params:
        if isinstance(param, click.Option) and (_text_like(param) or _float_like(param)) and not param.is_flag:
            param.callback = _chained(param)
    command.tracekit_validated = True
    return command


SCHEDULER_SCHEMES = ("tcp://", "tls://", "inproc://", "ucx://", "ws://", "wss://")


def checked_scheduler(ctx, param, value: str | None) -> str | None:
    """--scheduler: `local` or a Dask address (scheme://host:port), refused before any trace
    is read; a bad address once waited 20 s for a connection (or was ignored with one trace)."""
    if value is None:
        return value
    if value.strip() != "local" and not (value.startswith(SCHEDULER_SCHEMES) and len(value.split("://", 1)[1]) > 0):
        raise click.BadParameter(f"{value[:60]!r} is not `local` nor a Dask scheduler address such as tcp://HOST:PORT")
    return value.strip()
