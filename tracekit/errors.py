"""The one error type for bad input.

Every problem with a user's file becomes a TraceError carrying the path and a plain
reason; the CLI prints it as one line and exits 2. Anything else is a bug (exit 1).
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator


class TraceError(Exception):
    def __init__(self, path: str | os.PathLike, reason: str):
        self.path = os.fspath(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")

    def __reduce__(self):
        # Worker processes send their errors back pickled; the default would call
        # TraceError(message) with one argument and break the pool (BrokenProcessPool).
        return (type(self), (self.path, self.reason))


# The signals (SIGINT, SIGTERM) that interrupted this run, recorded by the command's handler
# (cli/main.py). The handler raises KeyboardInterrupt, but Python drops an exception raised
# where it cannot propagate (an at-fork hook, a __del__): writers check this list before
# they rename anything into place, so an interrupted run never installs its output.
INTERRUPTS: list[int] = []


# The staging files and directories this run holds (common/atomic.py), path -> the locked
# descriptor: removed by the interrupt watchdog when it has to end the run itself.
STAGING: dict[str, int] = {}

# After SIGINT / SIGTERM the run has this long to clean up and end through its handlers;
# then the watchdog ends it (a main thread blocked in native code never runs a handler).
INTERRUPT_GRACE_S = 2.5


def raise_if_interrupted() -> None:
    if INTERRUPTS:
        raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """SIGINT / SIGTERM held back (blocked, not lost) for a few system calls and delivered
    right after: around a fork (an interrupt inside os.fork runs its handler in an at-fork
    hook, where Python can only print it as "Exception ignored"), or a temporary directory
    made and recorded, or renames that must not be torn apart halfway. Main thread only."""
    import signal
    import threading

    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def start_interrupt_watchdog(aborted_line: bytes = b"tracekit: aborted\n") -> None:
    """Bounded interrupts: Python runs a signal handler only between bytecodes of the main
    thread, so a main thread waiting in native code (a pyarrow read whose pool thread could
    not start, under `ulimit -v`) never sees SIGINT or SIGTERM. The C-level handler still
    writes the signal's number to the wakeup descriptor; a thread waits on it and, when the
    run has not ended INTERRUPT_GRACE_S after the first signal, removes this run's staging
    and ends the process with the abort line and 128 + signal. Main thread only; the
    watchdog's own thread blocks the signals, so they still reach the main thread."""
    import shutil  # noqa: F401 -- loaded now, so remove_staging never imports from the watchdog thread
    import signal
    import threading
    import time

    if threading.current_thread() is not threading.main_thread():
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)

    def watch() -> None:
        with contextlib.suppress(AttributeError, OSError, ValueError):
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        while True:
            try:
                got = os.read(read_end, 1)
            except InterruptedError:
                continue
            except OSError:
                return
            if not got:
                return
            if got[0] == getattr(signal, "SIGXCPU", None):
                cpu_time_ran_out()
            if got[0] in (signal.SIGINT, signal.SIGTERM):
                break
        signum = got[0]
        if signum not in INTERRUPTS:
            INTERRUPTS.append(signum)  # nothing is installed from here on (raise_if_interrupted), handler or not
        time.sleep(INTERRUPT_GRACE_S)
        remove_staging()
        with contextlib.suppress(OSError):
            os.write(2, aborted_line)
        os._exit(128 + INTERRUPTS[0])

    before = None
    try:
        with contextlib.suppress(ValueError, RuntimeError):
            before = threading.stack_size(256 << 10)  # it only waits: 256 KiB of stack, not 8 MiB of address space
        threading.Thread(target=watch, name="tracekit-interrupt-watchdog", daemon=True).start()
        signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        if hasattr(signal, "SIGXCPU"):  # its number reaches the watchdog through the wakeup descriptor
            signal.signal(signal.SIGXCPU, lambda signum, frame: None)
        os.register_at_fork(after_in_child=lambda: _forget_wakeup(read_end, write_end))
    except (RuntimeError, ValueError, OSError):  # no thread to be had: the handlers alone
        for fd in (read_end, write_end):
            with contextlib.suppress(OSError):
                os.close(fd)
    finally:
        if before is not None:
            with contextlib.suppress(ValueError, RuntimeError):
                threading.stack_size(before)


def remove_staging() -> None:
    """Remove this run's staged outputs (a directory tree, or a file or link), whatever is left."""
    import shutil

    for path in list(STAGING):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)


def cpu_time_ran_out() -> None:
    """SIGXCPU: the soft CPU-time limit (`ulimit -St`, prlimit --cpu) is spent; the kernel kills
    the process at the hard one. One line and exit 2 now, this run's staging removed, rather
    than "CPU time limit exceeded" from the shell. (`ulimit -t N` sets both limits: the
    kernel's SIGKILL then comes first, and nothing can be said.)"""
    remove_staging()
    with contextlib.suppress(OSError):
        os.write(2, b"tracekit: error: the CPU time limit (ulimit -t) ran out before the run ended: raise it\n")
    os._exit(2)


def _forget_wakeup(read_end: int, write_end: int) -> None:
    """In a forked child (a parse or rank worker): a signal to it is not this run's interrupt,
    so it must not reach the parent's watchdog through the shared pipe. (The write end is
    closed only once no handler writes to it: its number could name another file later.)"""
    import signal

    ends = [read_end]
    with contextlib.suppress(ValueError, OSError):
        signal.set_wakeup_fd(-1)
        ends.append(write_end)
    for fd in ends:
        with contextlib.suppress(OSError):
            os.close(fd)


def address_space_limit() -> int | None:
    """The process's address-space limit (`ulimit -v`) in bytes, or None when there is none
    (or the platform cannot say)."""
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):
        return None
    return None if limit == resource.RLIM_INFINITY else limit


def memory_ran_out(exc: BaseException) -> bool:
    """Whether `exc` says the process could not get memory (under `ulimit -v` or a cgroup):
    MemoryError, a shared library that cannot be mapped, numpy's allocation failures."""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "_ArrayMemoryError":
        return True
    # Python wraps what a class body's __set_name__ raised (a MemoryError while matplotlib's
    # axes are defined, under a limit) in a RuntimeError whose cause it is
    if isinstance(exc, RuntimeError) and exc.__cause__ is not None and exc.__cause__ is not exc:
        return memory_ran_out(exc.__cause__)
    text = str(exc)
    if isinstance(exc, RuntimeError) and "can't start new thread" in text:  # its stack could not be mapped
        return True
    # a C library's own words for a failed allocation, wrapped by its binding (FreeType's
    # "FT_Open_Face ... failed with error 0x40: out of memory" as matplotlib's RuntimeError)
    if isinstance(exc, RuntimeError) and "out of memory" in text.lower():
        return True
    # A C extension whose allocation failed without saying so: one that returned NULL without
    # setting MemoryError (matplotlib's Agg print_png: CPython's SystemError), or one whose
    # callback's MemoryError was swallowed (FreeType's "invalid stream operation" after its
    # read callback failed). Read as memory only where the process has used its address-space
    # limit up (its peak within NEAR_LIMIT of it): elsewhere they are bugs.
    if isinstance(exc, (SystemError, RuntimeError)) and near_address_space_limit():
        return True
    return isinstance(exc, (ImportError, SystemError, OSError)) and any(
        words in text for words in ("failed to map segment", "Cannot allocate memory", "Unable to allocate", "MemoryError"))


NEAR_LIMIT = 0.9  # a process whose peak address space reached this share of its limit has run into it


def near_address_space_limit() -> bool:
    """Whether this process's peak address space (VmPeak) reached NEAR_LIMIT of its limit."""
    limit = address_space_limit()
    if limit is None:
        return False
    try:
        with open("/proc/self/status") as status:
            peak_kb = next((int(line.split()[1]) for line in status if line.startswith("VmPeak:")), None)
    except (OSError, ValueError, IndexError):
        return False
    return peak_kb is not None and peak_kb * 1024 >= NEAR_LIMIT * limit


# --- out of memory: one line naming the file and what a run on it needs ---------------------

# What a run needs, in address space (what `ulimit -v` limits; its resident peak is about half),
# per trace format and command: a fixed cost (the interpreter and the libraries the command
# imports) and a cost per MB of trace (the JSON, uncompressed; an Nsight export's SQLite file).
# Measured by benchmarks/memory_need.py: VmPeak of `python -m tracekit ...` under a limit, on
# the bert trace and tiles of it (1 to 51 MB), the llama3-8b eager trace (98 MB of JSON),
# timesformer (18 MB), and the FSDP export replicated 1x, 5x, 20x (2 to 39 MB); each line
# is the least-squares fit, raised to cover every point (within 10% of each). The smallest
# limit under which `analyze --out` of the 51 MB tile ends with exit 0 is 375 MB (bisected),
# the line says 396. The parse workers (separate processes, each under the same limit) are
# not counted: one that runs out hands its piece back to this process.
MEMORY_NEED_MB = {
    # (format, command): (fixed MB, MB per MB of trace)
    # issue 39, the 98 MB h200 generate trace as plain JSON under `ulimit -v` (after the plain
    # file became a copy): info failed at 300 MB, ran at 330 (was said to need 272); analyze
    # failed at 380, ran at 400 (was said to need 442; now 418: a need said is never below a limit that failed)
    ("kineto", "info"): (155, 1.7),
    ("kineto", "analyze"): (300, 1.2),
    ("kineto", "analyze --out"): (355, 0.8),
    ("nsys", "info"): (300, 5.0),
    ("nsys", "analyze"): (300, 5.2),
    ("nsys", "analyze --out"): (350, 4.9),
}
COMMANDS = ("analyze", "info", "export", "diff", "check", "calibrate", "project")


def trace_kind_and_mb(path: str) -> tuple[str, float]:
    """The trace's kind (kineto, nsys) and its size in MB as the parser sees it: a gzip's
    uncompressed size (its trailer, modulo 4 GiB, corrected by the file's size), a plain
    file's own."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(16)
        if head.startswith(b"SQLite format 3"):
            return "nsys", size / 1e6
        if head.startswith(b"\x1f\x8b") and size >= 18:
            f.seek(-4, os.SEEK_END)
            inflated = int.from_bytes(f.read(4), "little")
            while inflated < size:  # ISIZE holds the size modulo 2**32; JSON compresses, never grows
                inflated += 1 << 32
            return "kineto", inflated / 1e6
    return "kineto", size / 1e6


def _command_and_inputs(argv: list[str]) -> tuple[str, list[str]]:
    """The command (`analyze --out` apart: it writes the bundle) and the files it reads."""
    command = next((a for a in argv if a in COMMANDS), "analyze")
    if command == "analyze" and any(a == "--out" or a.startswith("--out=") for a in argv):
        command = "analyze --out"
    outputs = {argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("--out", "--junit", "--perfetto")}
    inputs = []
    for a in argv:
        with contextlib.suppress(ValueError, TypeError):
            if not a.startswith("-") and a not in outputs and os.path.isfile(a):
                inputs.append(a)
    return command, inputs


def memory_need_mb(kind: str, command: str, trace_mb: float) -> float:
    """MB of address space `command` needs on a trace of `trace_mb` (a command not measured
    is taken as `analyze --out`, the most costly)."""
    fixed, per_mb = MEMORY_NEED_MB.get((kind, command), MEMORY_NEED_MB[(kind, "analyze --out")])
    return fixed + per_mb * trace_mb


def printable(text: str) -> str:
    """`text` with every character outside printable ASCII escaped (\\x1b, \\udcff): for a line
    that must be written when there is no memory left to import reports.text's escaping."""
    return "".join(c if " " <= c < "\x7f" and c != "\\" else c.encode("unicode_escape").decode("ascii") for c in text)


def out_of_memory(argv: list[str] | None, why: str = "out of memory") -> tuple[str | None, str]:
    """For a run that ran out of memory (or cannot start in the limit it has): the largest
    input (None when there is none) and the reason, with what this command needs on it,
    measured (MEMORY_NEED_MB), and the limit when one is set. The caller escapes the path."""
    import sys

    argv = sys.argv[1:] if argv is None else [os.fspath(a) for a in argv]
    command, inputs = _command_and_inputs(argv)
    sized = []
    for path in inputs:
        try:
            sized.append((*trace_kind_and_mb(path), path))
        except OSError:
            continue
    limit = address_space_limit()
    limit_text = f" (the address-space limit is {limit / 2**20:,.0f} MB)" if limit is not None and "limit" not in why else ""
    if not sized:
        return None, f"{why}{limit_text}: raise the memory limit"
    kind, trace_mb, path = max(sized, key=lambda s: s[1])
    need = memory_need_mb(kind, command, trace_mb)
    amount = f"{need / 1e3:,.1f} GB" if need >= 1e3 else f"{need:,.0f} MB"
    size = f"{trace_mb:,.1f} MB" if trace_mb < 10 else f"{trace_mb:,.0f} MB"
    what = "Nsight export" if kind == "nsys" else "Kineto trace"
    return path, f"{why}{limit_text}: `{command}` on this {size} {what} needs about {amount} of address space: raise the memory limit"


def limit_reached(exc: BaseException) -> str | None:
    """The one line for a run stopped by a process limit other than memory (issue 39): too
    many open files (`ulimit -n`), no process to be had (`ulimit -u`); None for
    any other error. The limit's value is named where the platform says it."""
    import errno

    # ("can't start new thread" stays memory_ran_out's: a thread's stack is address space, and
    # under `ulimit -u` the pools and BLAS are bounded from the start: tracekit/__main__.py)
    if not isinstance(exc, OSError):
        return None
    if exc.errno in (errno.EMFILE, errno.ENFILE):
        return _with_limit("too many open files", "RLIMIT_NOFILE", "ulimit -n")
    if exc.errno == errno.EAGAIN and exc.filename is None:  # fork / clone refused
        return _with_limit("cannot start a process", "RLIMIT_NPROC", "ulimit -u")
    return None


def _with_limit(what: str, name: str, shell: str) -> str:
    try:
        import resource

        soft = resource.getrlimit(getattr(resource, name))[0]
        value = "unlimited" if soft == resource.RLIM_INFINITY else f"{soft:,}"
    except (ImportError, AttributeError, OSError, ValueError):
        value = "unknown"
    return f"{what} (the limit `{shell}` is {value}): raise it, or pass --workers 1"
