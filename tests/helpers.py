"""The one way the tests run tracekit's command line: `run_cli(*args)`.

In this process by default (tracekit.cli.main.main, the entry point `python -m tracekit` runs),
which spares each run a fresh interpreter and tracekit's imports (~1.5 s); in a fresh process
(`process=True`) where the test is about the process itself: signals, resource limits, a
non-UTF-8 path or locale, a closed stream, import-time behaviour, a child left behind.

A run in this process is made to look like one in a process: its stdout and stderr are its
own (a pipe: no colours, 120 columns unless COLUMNS says otherwise), `env` and `cwd` apply to
it alone, the Python warnings it raises are written to its stderr as the interpreter writes
them (a fresh interpreter's filters: DeprecationWarnings of libraries are not shown), so are
its log records of level WARNING and above (Python's last-resort handler), an exception that
escapes main() is a traceback on stderr and exit 1, and the objects it gc.freeze()s are given
back to the collector. Plain Python, no pytest: the fuzzers in benchmarks/ import it too.
"""

from __future__ import annotations

import contextlib
import io
import os
import pathlib
import subprocess
import sys
import time
import traceback
import warnings

REPO = pathlib.Path(__file__).resolve().parents[1]

# The warnings a fresh interpreter does not show (Python's default filters, outside -X dev).
_HIDDEN_BY_DEFAULT = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)


class CliRun(subprocess.CompletedProcess):
    """subprocess.CompletedProcess (args, returncode, stdout, stderr), with `seconds` (the
    run's wall time) and unpacking as `code, out, err = run_cli(...)`."""

    def __init__(self, args, returncode: int, stdout, stderr, seconds: float) -> None:
        super().__init__(args, returncode, stdout, stderr)
        self.seconds = seconds

    def __iter__(self):
        return iter((self.returncode, self.stdout, self.stderr))


def run_cli(*args, process: bool = False, env: dict[str, str] | None = None, cwd=None, timeout: float = 600,
            python_warnings: str = "shown", **popen) -> CliRun:
    """`tracekit ARGS` (arguments may be paths): in this process, or with `process=True` in a
    fresh `python -m tracekit` (the checkout first on its path, from the repository root unless
    `cwd`; `env` is its whole environment when given, else this one's; `popen` goes to
    subprocess.run: preexec_fn, input, text=False ...; `timeout` bounds it).

    In this process, `env` is added to (a value None removes the variable) and restored after,
    `cwd` is entered and left, and `python_warnings` says where a warning goes: "shown" (to
    the run's stderr, as a fresh interpreter shows it: once per place, library deprecations
    hidden), "always" (to its stderr, every one, every time), or "caller" (to the caller's own
    filters: a pytest filterwarnings mark turns one into an error inside the run)."""
    argv = [a if isinstance(a, (str, bytes)) else str(a) for a in args]
    start = time.perf_counter()
    if process:
        run_env = dict(os.environ if env is None else env)
        run_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), run_env.get("PYTHONPATH")) if p)
        if not {"stdout", "stderr", "capture_output", "text"} & set(popen):  # else the caller's streams, as given
            popen = {"capture_output": True, "text": True, **popen}
        done = subprocess.run([sys.executable, "-m", "tracekit", *argv], env=run_env, cwd=REPO if cwd is None else cwd,
                              timeout=timeout, **popen)
        return CliRun(done.args, done.returncode, done.stdout, done.stderr, time.perf_counter() - start)
    if popen:
        raise TypeError(f"{sorted(popen)} need a process: run_cli(..., process=True)")
    code, out, err = _in_this_process([os.fsdecode(a) for a in argv], env or {}, cwd, python_warnings)
    return CliRun(["tracekit", *argv], code, out, err, time.perf_counter() - start)


def _in_this_process(argv: list[str], env: dict[str, str | None], cwd, python_warnings: str) -> tuple[int, str, str]:
    import gc
    import logging

    from tracekit.cli.main import main
    from tracekit.cli.streams import quiet_libraries

    if python_warnings not in ("shown", "always", "caller"):
        raise ValueError(f"python_warnings: 'shown', 'always' or 'caller', not {python_warnings!r}")
    out, err = io.StringIO(), io.StringIO()
    saved_env = {k: os.environ.get(k) for k in env}
    saved_cwd = os.getcwd()
    last_resort = logging.StreamHandler(err)  # what Python's last-resort handler prints: the message
    last_resort.setLevel(logging.WARNING)
    root = logging.getLogger()
    quiet_libraries()  # as cli.main.run() does for the `tracekit` process
    with contextlib.ExitStack() as stack:
        for key, value in env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        stack.callback(_restore_env, saved_env)
        if cwd is not None:
            os.chdir(cwd)
            stack.callback(os.chdir, saved_cwd)
        caught = None
        if python_warnings != "caller":
            caught = stack.enter_context(warnings.catch_warnings(record=True))
            warnings.resetwarnings()
            warnings.simplefilter("always" if python_warnings == "always" else "default")
            if python_warnings == "shown":
                for category in _HIDDEN_BY_DEFAULT:
                    warnings.filterwarnings("ignore", category=category)
        root.addHandler(last_resort)
        stack.callback(root.removeHandler, last_resort)
        stack.callback(gc.unfreeze)  # the CLI freezes its heap for the rest of its process: this process goes on
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(argv)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                if code == 1 and not isinstance(exc.code, int):  # sys.exit("why"): the interpreter prints why
                    print(exc.code, file=err)
            except Exception:  # noqa: BLE001 - escaping main(): the interpreter's traceback, exit 1
                traceback.print_exc(file=err)
                code = 1
            finally:
                for w in caught or ():
                    err.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line))
    return code, out.getvalue(), err.getvalue()


def _restore_env(saved: dict[str, str | None]) -> None:
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
