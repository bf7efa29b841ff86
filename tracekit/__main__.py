"""`python -m tracekit` and the `tracekit` console script (entry())."""


def entry() -> None:
    """Interrupts are handled before anything is imported: a SIGINT or SIGTERM during the
    imports (the first ~0.2 s) ends the run with one line, not a Python traceback; once the
    command runs, cli.main.run() handles them so that what it writes is cleaned up."""
    import os
    import signal

    def early(signum, frame):
        os.write(2, b"tracekit: aborted\n")
        os._exit(128 + signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, early)
    from tracekit.cli import run

    run()


if __name__ == "__main__":
    entry()
