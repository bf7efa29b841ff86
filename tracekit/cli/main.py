"""The `tracekit` command: the group, its commands (one module each), and the one place
errors become exit codes: bad input 2 with one line, a failed check 3, a bug 1."""

from __future__ import annotations

import contextlib
import os
import sys

import click

from tracekit import __version__
from tracekit.cli.common import reader_gone, safe
from tracekit.errors import TraceError, limit_reached, memory_ran_out, out_of_memory, printable


# command -> (module under tracekit.cli, its click command): a command's module (its options,
# and what it imports) is loaded when that command runs, not for every other one.
COMMANDS = {"info": ("trace", "info"), "analyze": ("analyze", "analyze"), "calibrate": ("calibrate", "calibrate"),
            "export": ("trace", "export"), "diff": ("compare", "diff"), "check": ("compare", "check"),
            "devices": ("trace", "devices"), "project": ("project", "project"), "mcp": ("mcp", "mcp")}


class _Commands(click.Group):
    """The group's commands, each imported on first use (`--help` imports them all)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        import importlib

        from tracekit.cli.options import validated

        module, attribute = COMMANDS[name]
        return validated(getattr(importlib.import_module(f"tracekit.cli.{module}"), attribute))


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tracekit")
def cli() -> None:
    """Where the GPU time of a profiled run went, and how far it is from the roofline."""


def run() -> None:
    """The `tracekit` command itself (console script, `python -m tracekit`): main(), then the
    process ends at once. Exit handlers still run and the streams are flushed; what is
    skipped is the interpreter freeing, one by one, the millions of objects a trace became
    (~50 ms after `analyze` of a 55 MB trace, 6% of the run). main() stays an ordinary
    function for callers that run the CLI inside their own process."""
    import atexit
    import threading

    from tracekit.cli.streams import own_streams

    try:
        _interrupts_raise()
        own_streams()  # a closed or failing stdout / stderr ends in one line, not a traceback
        try:
            main()
            code = 0
        except SystemExit as exc:
            if exc.code is not None and not isinstance(exc.code, int):
                raise
            code = exc.code or 0
        _interrupts_end()
    except KeyboardInterrupt:  # outside main()'s handlers: between the handler's install and main's `try`, or after it
        _say_aborted()  # (later interrupts are ignored: the handler did that before raising)
        code = _aborted_code()
    except MemoryError:  # outside main()'s handlers (in one of them: making its line, printing it)
        with contextlib.suppress(MemoryError, OSError):
            _say_out_of_memory(None)
        code = 2

    if code in (130, 143):  # interrupted: every `finally` has run; do not wait on threads the interrupt cut short
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.current_thread()):
        sys.exit(code)  # a thread still at work (a Dask client, ...): the interpreter joins it first
    atexit._run_exitfuncs()  # what the interpreter would run at exit (logging, multiprocessing, ...)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


from tracekit.errors import INTERRUPTS  # the signal that interrupted this run, if any


def _interrupts_raise() -> None:
    """SIGTERM is handled as SIGINT is (issue 22): the first of them raises
    KeyboardInterrupt in the main thread, so that every `finally` runs (a bundle's
    temporary directory removed, the parse workers stopped) and the run ends with
    "tracekit: aborted" (exit 130, or 143 for SIGTERM). Later ones are ignored while the
    run cleans up."""
    import signal

    def interrupted(signum, frame):
        INTERRUPTS.append(signum)
        for held in (signal.SIGINT, signal.SIGTERM):
            signal.signal(held, signal.SIG_IGN)
        raise KeyboardInterrupt

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, interrupted)
    _reraise_dropped_interrupts()


def _reraise_dropped_interrupts() -> None:
    """The handler's KeyboardInterrupt can be raised where it cannot propagate: in a weakref
    callback or a __del__ (matplotlib's transforms, imported while the workers parse), where
    Python prints it as "Exception ignored in: ..." with a traceback and goes on (signals.py:
    1 SIGINT in 100). Such a KeyboardInterrupt is not printed; it is raised again in the main
    thread once the hook has returned (a SIGINT to it from a timer thread), so the run stops
    now, as aborted."""
    import _thread
    import signal
    import threading

    previous = sys.unraisablehook
    in_hook = threading.Event()

    def again(signum, frame):
        if in_hook.is_set():  # still inside the hook: not here
            rearm()
            return
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    main = threading.main_thread().ident

    def deliver() -> None:  # a real signal to the main thread: a blocking call there returns (EINTR)
        try:
            signal.pthread_kill(main, signal.SIGINT)
        except (AttributeError, OSError, ValueError):
            _thread.interrupt_main(signal.SIGINT)

    def rearm() -> None:
        timer = threading.Timer(0.02, deliver)
        timer.daemon = True
        timer.start()

    def hook(unraisable) -> None:
        if not (INTERRUPTS and isinstance(unraisable.exc_value, KeyboardInterrupt)):
            previous(unraisable)
            return
        in_hook.set()
        try:
            with contextlib.suppress(Exception):
                signal.signal(signal.SIGINT, again)  # (callbacks run in the main thread, where handlers are set)
                rearm()
        finally:
            in_hook.clear()

    sys.unraisablehook = hook


def _say_aborted() -> None:
    with contextlib.suppress(Exception):
        os.write(2, b"tracekit: aborted\n")


def _interrupts_end() -> None:
    """The run is over (its outputs complete, or removed): an interrupt from here on, while
    exit handlers run and streams are flushed, ends the process at once with the abort line
    and 130 / 143, instead of a KeyboardInterrupt inside an exit handler (a traceback)."""
    import signal

    def ended(signum, frame):
        INTERRUPTS.append(signum)
        _say_aborted()
        os._exit(_aborted_code())

    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError, OSError):
            if signal.getsignal(signum) is not signal.SIG_IGN:  # after an interrupt, later ones stay ignored
                signal.signal(signum, ended)


def _aborted_if_interrupted() -> None:
    """After SIGINT / SIGTERM, whatever error the run ended with is the interrupt's doing: its
    KeyboardInterrupt can arrive changed (raised inside a pybind11 module's initialisation it
    becomes `ImportError: initialization failed`; matplotlib imports while the workers parse):
    "tracekit: aborted", 130 / 143, not an internal error."""
    if INTERRUPTS:
        click.echo("tracekit: aborted", err=True)
        sys.exit(_aborted_code())


def _aborted_code() -> int:
    import signal

    return 128 + (INTERRUPTS[0] if INTERRUPTS else signal.SIGINT)


def _say_out_of_memory(argv: list[str] | None) -> None:
    """One line for a run that ran out of memory: the trace, and what this command needs on
    it (measured: errors.MEMORY_NEED_MB). A parallel parse that runs out falls back to one
    process by itself: no option to suggest. Making the line can run out too (the escaping
    imports its library): then the path is escaped by hand and written with one system call."""
    path, reason = out_of_memory(argv)
    try:
        click.echo(f"tracekit: error: {safe(path) + ': ' if path is not None else ''}{safe(reason)}", err=True)
    except (MemoryError, ImportError):
        line = f"tracekit: error: {printable(path) + ': ' if path is not None else ''}{reason}\n"
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os.write(2, line.encode("utf-8", "backslashreplace"))


def _say_error(path, reason: str) -> None:
    """The one line of a TraceError. Escaping imports its module on first use: where that
    cannot happen (no file descriptor or memory left: `ulimit -n`), the line is escaped by
    hand and written with one system call."""
    try:
        click.echo(f"tracekit: error: {safe(path)}: {safe(reason)}", err=True)
    except (OSError, ImportError, MemoryError):
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        with contextlib.suppress(OSError):
            os.write(2, f"tracekit: error: {printable(path)}: {printable(reason)}\n".encode("utf-8", "backslashreplace"))


def main(argv: list[str] | None = None) -> None:
    debug = bool(os.environ.get("TRACEKIT_DEBUG"))
    # A path with bytes that are not UTF-8 reaches Python as surrogates: print them escaped
    # rather than fail on them (stderr already does this).
    with contextlib.suppress(AttributeError, ValueError):
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        cli.main(args=argv, prog_name="tracekit", standalone_mode=False)
        sys.stdout.flush()  # here, where a stdout that fails is one line (cli/streams.py), not after the exit code is set
        if INTERRUPTS:  # the interrupt's KeyboardInterrupt was dropped on the way (an at-fork hook)
            raise KeyboardInterrupt
    except TraceError as exc:
        _aborted_if_interrupted()
        _say_error(exc.path, exc.reason)
        sys.exit(2)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except SystemExit as exc:
        # click turns a closed stdout (`| head`) into exit 1 after wrapping the streams in
        # its PacifyFlushWrapper: the reader went away, which is no error of tracekit's.
        if exc.code == 1 and isinstance(sys.stdout, click.utils.PacifyFlushWrapper):
            reader_gone()
        raise
    except click.ClickException as exc:  # a usage error: one line too, like every error
        hint = f" (see `tracekit {exc.ctx.info_name} --help`)" if isinstance(exc, click.UsageError) and exc.ctx and exc.ctx.parent else ""
        click.echo(f"tracekit: error: {exc.format_message()}{hint}".replace("\n", " "), err=True)
        sys.exit(2)
    except (click.Abort, KeyboardInterrupt):
        click.echo("tracekit: aborted", err=True)
        sys.exit(_aborted_code())
    except BrokenPipeError:
        reader_gone()
    except Exception as exc:  # a bug in tracekit, not in the input
        _aborted_if_interrupted()
        limit = limit_reached(exc)
        if limit is not None:  # a process limit (`ulimit -n`, `ulimit -u`): the run's environment, not a bug
            click.echo(f"tracekit: error: {limit}", err=True)
            sys.exit(2)
        if memory_ran_out(exc):  # MemoryError, or an import or allocation refused under a memory limit
            import traceback

            traceback.clear_frames(exc.__traceback__)  # the trace and its tables, freed before the line is made
            _say_out_of_memory(argv)
            sys.exit(2)
        if debug:
            raise
        click.echo(f"tracekit: internal error: {type(exc).__name__}: {exc} (set TRACEKIT_DEBUG=1 for a traceback)", err=True)
        sys.exit(1)
