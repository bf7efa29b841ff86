"""tracekit: where the GPU time of a profiled run went, and how far each part is from the roofline."""

__version__ = "0.1.0"


def _interrupts_before_imports() -> None:
    """`python -m tracekit` / the `tracekit` script: from the first line of the package on,
    SIGINT or SIGTERM ends the run with one line, not a traceback from the imports
    (tracekit/__main__.py and cli.main.run() take over from here). Installed before anything
    is imported: `_signal` is built in, and `os` and `sys` are loaded by the interpreter's
    own start-up (importing `signal` or `threading` first took ~6 ms, with a KeyboardInterrupt
    traceback from inside them)."""
    import _signal
    import os
    import sys

    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 != "-m" and os.path.basename(argv0) != "tracekit":
        return

    def early(signum, frame):
        try:
            os.write(2, b"tracekit: aborted\n")
        except OSError:  # stderr closed or full: the exit code says it (an error here would be exit 1)
            pass
        os._exit(128 + signum)

    try:
        if _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:  # nobody else's handler is replaced
            _signal.signal(_signal.SIGINT, early)
            _signal.signal(_signal.SIGTERM, early)
    except ValueError:  # not the main thread: the importer's handlers stay
        pass


_interrupts_before_imports()

from tracekit.errors import TraceError  # noqa: E402

__all__ = ["analyze", "load", "summary_json", "TraceError", "__version__"]


def __getattr__(name: str):
    """`tracekit.profiler`, `tracekit.mlflow`, `tracekit.compare` on first use: a plain
    `import tracekit` stays as light as the analysis needs."""
    if name in ("analyze", "load", "summary_json"):  # imported on first use: `tracekit` the command handles Ctrl-C before this
        from tracekit import api

        return getattr(api, name)
    if name in ("profiler", "mlflow", "compare"):
        import importlib

        return importlib.import_module(f"tracekit.{name}")
    raise AttributeError(f"module 'tracekit' has no attribute {name!r}")
