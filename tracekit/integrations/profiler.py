"""torch.profiler integration: write each captured trace and its report bundle.

    import tracekit.profiler
    handler = tracekit.profiler.on_trace_ready("prof/")
    with torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=2),
                                on_trace_ready=handler) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()
    handler.wait()   # optional: the bundles are also finished before the interpreter exits

The handler exports the trace (`<worker>.step<N>.pt.trace.json.gz`) in the training process
(torch must do that there) and analyses it in a separate `python -m tracekit analyze`
process, one at a time on a background thread, so the training loop never waits for the
analysis. A subprocess rather than multiprocessing: forking a process that holds a CUDA
context is unsafe, and spawn would re-run the user's unguarded training script.
The bundle (summary.json, report.html, ...) appears at `<worker>.step<N>/` only when
complete; a failed analysis leaves its reason in `<worker>.step<N>.log`."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field


@dataclass
class Capture:
    """One exported trace and what became of its analysis."""

    trace: str
    bundle: str
    done: threading.Event = field(default_factory=threading.Event, repr=False)
    returncode: int | None = None  # of `tracekit analyze`; 0 when the bundle was written
    log: str | None = None  # stderr of a failed analysis


class TraceHandler:
    """The callable torch.profiler calls with the profiler when a capture is ready."""

    def __init__(self, out_dir: str | os.PathLike, worker_name: str | None = None, device: str | None = None,
                 rules: str | None = None, top: int = 15, analyze: bool = True):
        self.out_dir = os.fspath(out_dir)
        self.worker_name = worker_name or f"{socket.gethostname()}_{os.getpid()}"
        self.options = (["--device", device] if device else []) + (["--rules", os.fspath(rules)] if rules else []) + ["--top", str(top)]
        self.analyze = analyze
        self.captures: list[Capture] = []
        self._pending: list[Capture] = []
        self._lock = threading.Lock()  # guards _pending and _thread together
        self._thread: threading.Thread | None = None

    def __call__(self, prof) -> Capture:
        os.makedirs(self.out_dir, exist_ok=True)
        stem = os.path.join(self.out_dir, f"{self.worker_name}.step{prof.step_num}")
        capture = Capture(trace=stem + ".pt.trace.json.gz", bundle=stem)
        partial = stem + ".partial.json.gz"  # renamed into place once whole
        prof.export_chrome_trace(partial)
        os.replace(partial, capture.trace)
        self.captures.append(capture)
        if not self.analyze:
            capture.done.set()
            return capture
        with self._lock:
            self._pending.append(capture)
            if self._thread is None:
                # Not a daemon: a bundle queued before the script ends is still finished.
                self._thread = threading.Thread(target=self._work, name="tracekit-analysis", daemon=False)
                self._thread.start()
        return capture

    def _work(self) -> None:
        while True:
            with self._lock:
                if not self._pending:
                    self._thread = None
                    return
                capture = self._pending.pop(0)
            try:
                self._analyze(capture)
            finally:
                capture.done.set()

    def _analyze(self, capture: Capture) -> None:
        staging = capture.bundle + ".partial"
        shutil.rmtree(staging, ignore_errors=True)
        command = [sys.executable, "-m", "tracekit", "analyze", capture.trace, "--out", staging, "--format", "json", *self.options]
        run = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_child_env(), check=False)
        capture.returncode = run.returncode
        if run.returncode == 0:
            shutil.rmtree(capture.bundle, ignore_errors=True)
            os.replace(staging, capture.bundle)
        else:
            capture.log = run.stderr.decode("utf-8", "replace")
            shutil.rmtree(staging, ignore_errors=True)
            with open(capture.bundle + ".log", "w", encoding="utf-8") as f:
                f.write(capture.log)

    def wait(self, timeout: float | None = None) -> list[Capture]:
        """Block until every capture so far is analysed; returns them (see `returncode`)."""
        for capture in list(self.captures):
            if not capture.done.wait(timeout):
                raise TimeoutError(f"tracekit: analysis of {capture.trace} still running after {timeout} s")
        return list(self.captures)


def on_trace_ready(out_dir: str | os.PathLike, worker_name: str | None = None, device: str | None = None,
                   rules: str | None = None, top: int = 15, analyze: bool = True) -> TraceHandler:
    """A handler for `torch.profiler.profile(on_trace_ready=...)` writing each trace and its
    report bundle under out_dir. `device` / `rules` / `top` are those of `tracekit analyze`."""
    return TraceHandler(out_dir, worker_name, device, rules, top, analyze)


def _child_env() -> dict[str, str]:
    """The environment for the analysis process: it must import this same tracekit, even
    when it was put on sys.path by hand rather than installed."""
    import tracekit

    root = os.path.dirname(os.path.dirname(os.path.abspath(tracekit.__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env
