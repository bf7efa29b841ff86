"""tracekit: where the GPU time of a profiled run went, and how far each part is from the roofline."""

__version__ = "0.1.0"


def _interrupts_before_imports() -> None:
    """`python -m tracekit` / the `tracekit` script: from the first line of the package on,
    SIGINT or SIGTERM ends the run with one line, not a traceback from the imports
    (tracekit/__main__.py and cli.main.run() take over from here)."""
    import os
    import signal
    import sys
    import threading

    argv0 = sys.argv[0] if sys.argv else ""
    if threading.current_thread() is not threading.main_thread() or (argv0 != "-m" and os.path.basename(argv0) != "tracekit"):
        return

    def early(signum, frame):
        os.write(2, b"tracekit: aborted\n")
        os._exit(128 + signum)

    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # nobody else's handler is replaced
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, early)


_interrupts_before_imports()

from tracekit.errors import TraceError  # noqa: E402

__all__ = ["analyze", "load", "TraceError", "__version__"]


def __getattr__(name: str):
    """`tracekit.profiler`, `tracekit.mlflow`, `tracekit.compare` on first use: a plain
    `import tracekit` stays as light as the analysis needs."""
    if name in ("analyze", "load"):  # imported on first use: `tracekit` the command handles Ctrl-C before this
        from tracekit import api

        return getattr(api, name)
    if name in ("profiler", "mlflow", "compare"):
        import importlib

        return importlib.import_module(f"tracekit.{name}")
    raise AttributeError(f"module 'tracekit' has no attribute {name!r}")
