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
    _fit_a_memory_limit()
    from tracekit.cli import run

    run()


MIN_ADDRESS_SPACE = 128 << 20  # below this not even the imports fit (numpy alone maps ~130 MB)


def _fit_a_memory_limit() -> None:
    """Under an address-space limit (`ulimit -v`), before numpy is imported: OpenBLAS starts a
    thread per core, each with a stack and buffers, and when that allocation fails it prints
    its own line and ends the process with exit 1 (at 80-120 MB on 2 cores; far more on a
    many-core machine). tracekit's arithmetic is elementwise, so one BLAS thread costs
    nothing (unless the user chose a count). Below MIN_ADDRESS_SPACE nothing can run: one
    line, exit 2."""
    import os

    from tracekit.errors import address_space_limit

    limit = address_space_limit()
    if limit is None:
        return
    if not any(name in os.environ for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")):
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    if limit < MIN_ADDRESS_SPACE:
        os.write(2, (f"tracekit: error: out of memory: the address-space limit (ulimit -v) of {limit / 2**20:,.0f} MB is below the "
                     f"{MIN_ADDRESS_SPACE >> 20} MB tracekit needs to start: raise the memory limit\n").encode())
        os._exit(2)


if __name__ == "__main__":
    entry()
