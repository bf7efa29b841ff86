"""`python -m tracekit` and the `tracekit` console script (entry())."""


def entry() -> None:
    """Interrupts are handled before anything is imported (tracekit/__init__.py installs the
    first handler): a SIGINT or SIGTERM during the imports (the first ~0.2 s) ends the run
    with one line, not a Python traceback; once the command runs, cli.main.run() handles
    them so that what it writes is cleaned up."""
    import os
    import signal

    def early(signum, frame):
        try:
            os.write(2, b"tracekit: aborted\n")
        except OSError:  # stderr closed or full: the exit code says it (an error here would be exit 1)
            pass
        os._exit(128 + signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, early)
    _reserve_standard_descriptors()
    from tracekit.errors import address_space_limit, start_interrupt_watchdog

    limit = address_space_limit()
    if limit is not None or _process_count_limited():
        _bound_the_pools()
    start_interrupt_watchdog()  # (after the pools are bounded: its thread then takes no malloc arena of its own)
    if limit is not None:
        _fit_a_memory_limit(limit)
    from tracekit.cli import run

    run()


def _reserve_standard_descriptors() -> None:
    """A standard descriptor closed at start (`>&-`) is reopened on /dev/null before anything
    opens a file: else the next file opened (the interrupt watchdog's pipe, a trace) takes its
    number, and output meant for stdout goes into it. Python has already left sys.stdout /
    sys.stderr None for it: cli/streams.py reads that as "closed"."""
    import os

    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)


# Below this no command can run: the interpreter maps ~13 MB, numpy ~85 MB more, its BLAS
# buffer 32 MB (VmSize after each, one malloc arena); `info` needs ~155 MB in all, `analyze`
# ~300 MB (pandas, pyarrow): benchmarks/memory_need.py. Between this and a command's need,
# the run ends with the out-of-memory line when an allocation fails.
MIN_ADDRESS_SPACE = 144 << 20
# OpenBLAS's buffer for one thread (BUFFER_SIZE on x86-64: 32 MiB), with room for its guard pages.
BLAS_BUFFER = 40 << 20


def _process_count_limited() -> bool:
    """A limit on this user's processes and threads (`ulimit -u`, RLIMIT_NPROC; root is exempt):
    OpenBLAS starts one thread per core at import and, refused one, prints five lines and
    raises SIGINT in its own process (issue 39: `ulimit -u 5` -> "tracekit: aborted", exit
    130); pyarrow's jemalloc prints a line of its own. The pools are bounded as under
    `ulimit -v`."""
    import os

    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    except (ImportError, AttributeError, OSError, ValueError):
        return False
    return soft != resource.RLIM_INFINITY and os.geteuid() != 0


def _bound_the_pools() -> None:
    """Under an address-space limit (`ulimit -v`), before numpy is imported, every thread pool
    and native allocator is made to fail in a way this process can catch (issue 33):

    - OpenBLAS: one thread (tracekit's arithmetic is elementwise), and its buffer taken now.
      OpenBLAS maps a 32 MiB buffer at its first matrix product and, when the map fails,
      prints "Memory allocation still failed" and ends the process (exit 1): it is taken
      here, after checking that it fits, not in the middle of a report;
    - pyarrow: the system allocator (mimalloc reserves ~64 MiB of address space per arena and
      aborts when it cannot), one CPU and one I/O thread (a thread that cannot start ends the
      process with std::terminate, or leaves a reader waiting on it forever);
    - glibc malloc: one arena (each thread's own reserves 64 MiB, kept after it ends; a thread
      that cannot get it aborts: "cannot allocate memory for thread-local data").

    A variable the user set is kept. Without a limit nothing changes."""
    import os

    for name, value in (("OPENBLAS_NUM_THREADS", "1"), ("OMP_NUM_THREADS", "1"), ("ARROW_DEFAULT_MEMORY_POOL", "system"),
                        ("ARROW_IO_THREADS", "1"), ("MALLOC_ARENA_MAX", "1"),
                        # pyarrow's bundled jemalloc starts a background thread at load, and says so on stderr when refused
                        ("JE_ARROW_MALLOC_CONF", "background_thread:false")):
        if name == "OMP_NUM_THREADS" and "OPENBLAS_NUM_THREADS" in os.environ and os.environ["OPENBLAS_NUM_THREADS"] != "1":
            continue  # the user chose BLAS threads: OMP_NUM_THREADS would override them
        os.environ.setdefault(name, value)  # (MALLOC_ARENA_MAX for the parse workers' children; this process: mallopt)
    _one_malloc_arena()


def _fit_a_memory_limit(limit: int) -> None:
    """Below MIN_ADDRESS_SPACE nothing can run: one line, exit 2. Above it, numpy is imported
    and OpenBLAS's buffer taken now, where running out is one line too (_bound_the_pools)."""
    if limit < MIN_ADDRESS_SPACE:
        _refuse(f"the address-space limit (ulimit -v) of {limit / 2**20:,.0f} MB is below the {MIN_ADDRESS_SPACE >> 20} MB "
                "tracekit needs to start")
    try:
        import mmap

        import numpy

        mmap.mmap(-1, BLAS_BUFFER).close()  # the buffer fits (else OpenBLAS would end the process)
        square = numpy.ones((256, 256))
        square @ square  # OpenBLAS maps its buffer now, and keeps it
    except (MemoryError, OSError, ImportError) as exc:
        from tracekit.errors import memory_ran_out

        if not isinstance(exc, (MemoryError, OSError)) and not memory_ran_out(exc):
            raise
        _refuse(f"the address-space limit (ulimit -v) of {limit / 2**20:,.0f} MB does not hold tracekit's libraries")


def _one_malloc_arena() -> None:
    import contextlib

    with contextlib.suppress(OSError, AttributeError, ValueError):
        import ctypes

        ctypes.CDLL(None).mallopt(-8, 1)  # M_ARENA_MAX (glibc); elsewhere no such symbol: nothing to do


def _refuse(why: str) -> None:
    """Out of memory before the command started: one line naming the trace (the reason says
    what this command needs on it), exit 2."""
    import os

    from tracekit.errors import out_of_memory

    path, reason = out_of_memory(None, f"out of memory: {why}")
    if path is not None:
        try:
            from tracekit.reports.text import plain_terminal

            path = plain_terminal(path)
        except (MemoryError, ImportError, OSError):  # no room even for that: escaped by hand
            from tracekit.errors import printable

            path = printable(path)
    line = f"tracekit: error: {path + ': ' if path is not None else ''}{reason}\n"
    try:
        os.write(2, line.encode("utf-8", "backslashreplace"))
    except OSError:  # stderr closed or full: the exit code still says it
        pass
    os._exit(2)


if __name__ == "__main__":
    entry()
