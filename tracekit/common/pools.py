"""The one owner of worker processes (issue 39): every pool tracekit starts (the parallel JSON
parse, the ranks of a job) is started, stopped and failed here, so that whatever ends a run
(an error, an interrupt, a limit such as `ulimit -n` or `ulimit -u` that stops a worker from
starting) ends it with one line and leaves no worker behind: each worker dies with its
parent (die_with_parent), and a pool that fails is killed and reaped (stop_pool) before the
error goes on. A pool that cannot start at all is PoolUnavailable: its caller does the work
in this process instead."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TYPE_CHECKING, Iterator

from tracekit.errors import interrupts_deferred

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

STOP_WAIT_S = 5.0  # how long a stopped pool's manager thread may take to end
CHECK_S = 0.25  # how often a wait for results checks that the pool can still deliver them


class PoolUnavailable(Exception):
    """Worker processes could not be started, or died (a limit on processes or open files):
    the pool is stopped; the caller reads in this process instead."""


@contextlib.contextmanager
def process_pool(count: int) -> Iterator["ProcessPoolExecutor"]:
    """A pool of `count` forked workers that die with this process. Any failure inside the
    block stops the pool first (no worker, pipe or thread outlives it); a failure to start or
    keep the workers (OSError, BrokenProcessPool, a thread that cannot start) becomes
    PoolUnavailable, anything else (the work's own errors, interrupts) goes on as it was."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    pool = None
    with pool_threads_quiet():  # a pool thread that dies is said by completed(), not by its traceback
        try:
            with interrupts_deferred():  # the workers fork in the first submit
                pool = ProcessPoolExecutor(max_workers=count, mp_context=multiprocessing.get_context("fork"),
                                           initializer=die_with_parent, initargs=(os.getpid(),))
            yield pool
            pool.shutdown(wait=True)
        except (OSError, BrokenProcessPool, RuntimeError) as exc:
            stop_pool(pool)
            from tracekit.errors import TraceError

            if isinstance(exc, TraceError):
                raise
            raise PoolUnavailable(f"worker processes could not run ({type(exc).__name__}: {exc})") from None
        except BaseException:
            stop_pool(pool)
            raise


def results(pool: "ProcessPoolExecutor", fn, *iterables) -> list:
    """pool.map(fn, *iterables) as a list, in order; BrokenProcessPool (a RuntimeError) where
    the pool can no longer deliver them (completed())."""
    futures = [pool.submit(fn, *args) for args in zip(*iterables)]
    for _ in completed(pool, futures):
        pass
    return [f.result() for f in futures]


def completed(pool: "ProcessPoolExecutor", futures) -> Iterator:
    """The futures as they complete (concurrent.futures.as_completed), but never a wait for
    results that cannot come: the pool's manager thread sends the work to the workers, and
    where it cannot start a thread it needs (the call queue's feeder, under `ulimit -v` or
    `ulimit -u`) it dies with the futures still pending, and as_completed would wait forever
    (a hang seen by the edge fuzz on a rank directory at a 200 MB address-space limit).
    Raises BrokenProcessPool then: the caller stops the pool and does the work itself."""
    from concurrent.futures import FIRST_COMPLETED, wait
    from concurrent.futures.process import BrokenProcessPool

    pending = set(futures)
    while pending:
        done, pending = wait(pending, timeout=CHECK_S, return_when=FIRST_COMPLETED)
        yield from done
        manager = getattr(pool, "_executor_manager_thread", None)
        if pending and not done and manager is not None and not manager.is_alive():
            raise BrokenProcessPool("the pool's manager thread ended with work pending (a thread it needed could not start)")


@contextlib.contextmanager
def pool_threads_quiet():
    """A pool thread that dies (its manager, when it cannot start the call queue's feeder
    thread) would print its traceback to stderr through threading.excepthook; completed()
    turns its death into one handled error, so its traceback is dropped. Other threads'
    exceptions go to the hook that was there."""
    import threading

    before = threading.excepthook

    def hook(args) -> None:
        if type(args.thread).__module__ in ("concurrent.futures.process", "multiprocessing.queues") \
                or getattr(args.thread, "name", "").startswith("QueueFeederThread"):
            return
        before(args)

    threading.excepthook = hook
    try:
        yield
    finally:
        if threading.excepthook is hook:
            threading.excepthook = before


def stop_pool(pool: ProcessPoolExecutor | None) -> None:
    """Kill the pool's workers, reap them and end the pool's manager thread (no orphan, and
    no thread that holds up the exit, outlives an interrupted or failed parse)."""
    if pool is None:
        return
    # shutdown() drops these (sets them to None): taken first.
    processes = queue = manager = None
    with contextlib.suppress(Exception):
        processes = list((pool._processes or {}).values())
        queue, manager = pool._result_queue, pool._executor_manager_thread
    for process in processes or ():
        with contextlib.suppress(Exception):
            process.kill()
    with contextlib.suppress(Exception):
        pool.shutdown(wait=False, cancel_futures=True)
    for process in processes or ():
        with contextlib.suppress(Exception):
            process.join(2)
    # A worker killed while writing its result leaves half a message in the result pipe,
    # and the pool's manager thread waits for the rest (the interpreter joins that thread
    # at exit: a hang after the last line). Once this process's copy of the pipe's write
    # end is closed, with the workers dead, that read ends (EOF) and so does the thread.
    with contextlib.suppress(Exception):
        queue._writer.close()
    with contextlib.suppress(Exception):
        manager.join(STOP_WAIT_S)


def die_with_parent(parent: int) -> None:
    """In each worker, first: die when the parent does (SIGTERM or SIGKILL to it alone must
    not leave workers blocked on a pipe with parent 1), and leave interrupts to the parent,
    which stops the workers itself. Linux: PR_SET_PDEATHSIG; elsewhere a watchdog thread."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):  # forked while the parent held interrupts (errors.interrupts_deferred)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    armed = False
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) == 0  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)
    if not armed:
        import threading
        import time

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(0.2)
            os._exit(1)

        threading.Thread(target=watch, daemon=True).start()
