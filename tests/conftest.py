from __future__ import annotations

import os
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "fixtures"
PROJECT_FIXTURES = REPO / "fixtures"

# A terminal's size from the environment changes how the CLI wraps its tables: pytest-xdist's
# workers run with COLUMNS=80, a plain run has none (piped: 120). Tests that depend on a width
# set it themselves; every other test sees the same output in a worker or a plain run.
for _size in ("COLUMNS", "LINES"):
    os.environ.pop(_size, None)


# The shared fixtures (real traces; see docs/install.md "Shared fixtures") live beside the
# repository. Without them the tests that need them skip with this one reason; CI
# (.ci/run) sets TRACEKIT_REQUIRE_SHARED=1, which turns the skip into a failure.
MISSING_SHARED = (f"needs the shared fixtures at {SHARED} (a checkout of the shared traces beside the repository; "
                  "see docs/install.md, 'Shared fixtures')")


def shared_required() -> bool:
    return os.environ.get("TRACEKIT_REQUIRE_SHARED") == "1"


def _skip_without(directory: pathlib.Path, missing: str, module_level: bool) -> None:
    """Skip (one reason) when `directory` is absent; fail instead under TRACEKIT_REQUIRE_SHARED=1."""
    if directory.is_dir():
        return
    if shared_required():
        pytest.fail(missing + "; TRACEKIT_REQUIRE_SHARED=1 requires them", pytrace=False)
    pytest.skip(missing, allow_module_level=module_level)


def skip_without_shared(module_level: bool = False) -> None:
    _skip_without(SHARED, MISSING_SHARED, module_level)


def shared(*parts: str) -> pathlib.Path:
    skip_without_shared(module_level=True)
    path = SHARED.joinpath(*parts)
    # With the shared fixtures present, a missing one is a broken checkout, never a reason to skip.
    assert path.exists(), f"shared fixture missing: {path}"
    return path


# The real model configs (HF config.json) live beside the fixtures, in ../shared/models; the
# same rule: skip with one reason when absent, fail under TRACEKIT_REQUIRE_SHARED=1.
SHARED_MODELS = REPO.parent / "shared" / "models"
MISSING_SHARED_MODELS = (f"needs the shared model configs at {SHARED_MODELS} (a checkout of the shared fixtures and models "
                         "beside the repository; see docs/install.md, 'Shared fixtures')")


def skip_without_shared_models(module_level: bool = False) -> None:
    _skip_without(SHARED_MODELS, MISSING_SHARED_MODELS, module_level)


def shared_model(name: str) -> pathlib.Path:
    """../shared/models/NAME: skipped (one reason) when the shared models are absent, failed under
    TRACEKIT_REQUIRE_SHARED=1; with them present, a missing config is a broken checkout."""
    skip_without_shared_models(module_level=True)
    path = SHARED_MODELS / name
    assert path.exists(), f"shared model config missing: {path}"
    return path


def torch_traces() -> list[pathlib.Path]:
    skip_without_shared(module_level=True)
    found = sorted(SHARED.glob("torch/**/*.json.gz")) + sorted(PROJECT_FIXTURES.glob("*.json.gz"))
    assert len(found) >= 16, f"expected the shared torch fixtures beside the repo, found {found}"
    return found


# A sweep over every trace reads the largest ones (over 40 MB of JSON: the Llama-3 generate and
# the streaming-video DiT captures, Flux on the MI300X) in the slow run only: each costs such a
# sweep 3-12 s, as much as a dozen of the others together, and the goldens, the widths walk and
# the verdicts still read all of them in the quick run (from the cached analyses).
HEAVY_BYTES = 40 << 20
HEAVY = ("a sweep over every trace, here one of the largest (over 40 MB of JSON, 3-12 s a test); "
         "the quick run has the others, and the goldens read this one")


def trace_bytes(path) -> int:
    """What a trace holds uncompressed: a gzip member's recorded size (ISIZE), or the file's size."""
    path = pathlib.Path(path)
    if path.suffix == ".gz" and path.is_file():
        with open(path, "rb") as f:
            f.seek(-4, os.SEEK_END)
            return int.from_bytes(f.read(4), "little")
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def sweep(paths, heavy_reason: str = HEAVY) -> list:
    """`paths` as parameters of a per-trace sweep: those over HEAVY_BYTES marked slow."""
    return [pytest.param(p, marks=pytest.mark.slow(reason=heavy_reason)) if trace_bytes(p) > HEAVY_BYTES else p for p in paths]


@pytest.fixture(scope="session")
def load_cached():
    import tracekit

    cache: dict[str, object] = {}

    def load(path):
        key = str(path)
        if key not in cache:
            cache[key] = tracekit.load(path)
        return cache[key]

    return load


def _plugin_installed() -> bool:
    """Whether tracekit's pytest plugin is already active through its entry point (an
    install that predates the entry point, or PYTHONPATH onto a checkout, has none)."""
    from importlib.metadata import entry_points

    return any(ep.value == "tracekit.integrations.pytest_plugin" for ep in entry_points(group="pytest11"))


# tracekit's own golden tests run through its pytest plugin; registering it twice is an error.
pytest_plugins = [] if _plugin_installed() else ["tracekit.integrations.pytest_plugin"]

# The command line is run through one helper, tests/helpers.py's run_cli (in this process, or
# in a fresh one where the test is about the process).


def range_stack(trace, row: int, column: str = "range") -> list[str]:
    """Names of the ranges enclosing kernel `row` (by its `column` link), outermost first."""
    names = trace.ranges["name"].to_numpy()
    parents = trace.ranges["parent"].to_numpy()
    node = int(trace.kernels[column].iat[row])
    stack = []
    while node != -1:
        stack.append(str(names[node]))
        node = int(parents[node])
    return stack[::-1]


# Names by which a test module says it reads the shared fixtures.
_SHARED_NAMES = ("SHARED", "shared", "torch_traces", "fixtures", "SHARED_TRACES")


def pytest_runtest_setup(item):
    """A test in a module that reads the shared fixtures: skipped (one reason) when they are
    absent, failed under TRACEKIT_REQUIRE_SHARED=1. A module that checks per test sets
    CHECKS_SHARED = True."""
    module = getattr(item, "module", None)
    if module is None or SHARED.is_dir() or getattr(module, "CHECKS_SHARED", False):
        return
    if any(name in vars(module) for name in _SHARED_NAMES):
        skip_without_shared()


def raw_step_ns(path, name):
    """A step's time on the GPU in ns, straight from the trace (Kineto writes µs): its
    gpu_user_annotation widened to the GPU activities launched inside its CPU range (same
    process), or without one the first start to the last end of those activities."""
    import gzip
    import json

    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    (host,) = [e for e in events if e.get("name") == name and e.get("cat") == "user_annotation"]
    launched = {e["args"]["correlation"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver") and e.get("pid") == host["pid"]
                and host["ts"] <= e["ts"] <= host["ts"] + host["dur"] and "correlation" in e.get("args", {})}
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
             and e.get("args", {}).get("correlation") in launched]
    spans += [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == name and e.get("cat") == "gpu_user_annotation"]
    return round((max(e for _, e in spans) - min(s for s, _ in spans)) * 1000)


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the main process (xdist's controller, or the one process)
        import tempfile

        config._tracekit_session_dir = tempfile.mkdtemp(prefix="tracekit-tests-")
    config.addinivalue_line("markers", "slow(reason): a sweep that runs for minutes (memory limits, fuzzing, edge cases, "
                                       "a browser, a Dask cluster); the README's slow command runs them, its quick command "
                                       "(-m 'not slow') leaves them out")


# The slow set is for sweeps only: each says why it is slow, and together they stay under a
# fifth of the suite, so the quick command still runs (nearly) everything.
SLOW_SHARE = 0.2


@pytest.hookimpl(tryfirst=True)  # before -m deselects: the whole suite is counted
def pytest_collection_modifyitems(session, config, items):
    slow = [item for item in items if item.get_closest_marker("slow")]
    unexplained = [item.nodeid for item in slow if not (item.get_closest_marker("slow").kwargs.get("reason") or "").strip()]
    if unexplained:
        raise pytest.UsageError(f"a slow test must say why it is slow (pytest.mark.slow(reason=...)): {unexplained[:5]}")
    whole_suite = not config.getoption("keyword") and len({item.path for item in items}) > 20
    if whole_suite and len(slow) >= SLOW_SHARE * len(items):
        raise pytest.UsageError(f"{len(slow)} of {len(items)} tests are marked slow: the slow set must stay under "
                                f"{SLOW_SHARE:.0%} of the suite")


class SealedAnalyses:
    """Each shared trace analysed once per test session and handed to every test that reads it
    (the goldens, the widths walk, the verdicts, the warnings sweep). Under xdist the workers
    share it through `directory` (one pickle per analysis, made by the first worker that needs
    it while the others wait for it, each read back and checked against the digest it was made
    with); without a directory, once per process. Sealed: the digest of what it holds (its
    summary.json with every row, and each table's shape and columns) is taken when it is made
    and checked when the module that used it ends; a test that changed it fails there, with
    the trace named. The Python warnings the analysis raised (every one: "always") are kept
    beside it (`warnings_of`)."""

    def __init__(self, directory: pathlib.Path | None = None) -> None:
        self._made: dict[tuple[str, str | None], object] = {}
        self._digests: dict[tuple[str, str | None], str] = {}
        self._full: dict[tuple[str, str | None], str] = {}
        self._warnings: dict[tuple[str, str | None], list[str]] = {}
        self._directory = directory
        self.handed_out: set[tuple[str, str | None]] = set()

    def __call__(self, path, device: str | None = None):
        key = (str(path), device)
        if key not in self._made:
            self._keep(key, self._shared(key, wait=True))
        self.handed_out.add(key)
        return self._made[key]

    def many(self, traces) -> list:
        """The Analyses of (path, device) pairs, in their order. Those another worker is making
        are taken last, so that the workers make different ones meanwhile instead of each
        waiting for the other's."""
        pending = [(str(p), d) for p, d in traces if (str(p), d) not in self._made]
        while pending:
            busy = [key for key in pending if key not in self._made and not self._keep(key, self._shared(key, wait=False))]
            if len(busy) == len(pending):
                self._keep(busy[0], self._shared(busy[0], wait=True))
            pending = [key for key in busy if key not in self._made]
        return [self(p, d) for p, d in traces]

    def _keep(self, key, made) -> bool:
        if made is None:
            return False
        self._made[key], self._full[key], self._digests[key], self._warnings[key] = made
        return True

    def full_summary_of(self, path, device: str | None = None) -> str:
        """The cached Analysis's summary.json with every row of every table (not the top 15)."""
        self(path, device)
        return self._full[(str(path), device)]

    def warnings_of(self, path, device: str | None = None) -> list[str]:
        """The Python warnings (`Category: message`) raised while the cached Analysis was made."""
        self(path, device)
        return self._warnings[(str(path), device)]

    def _make(self, key):
        import warnings

        import tracekit

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            analysis = tracekit.analyze(key[0], device=key[1], workers=1)
        full = self.full_summary(analysis)
        return analysis, full, self.digest(analysis, full), [f"{w.category.__name__}: {w.message}" for w in caught]

    def _shared(self, key, wait: bool):
        """Made here, or read back from the pickle another worker made (made here and written
        there if none has yet: one worker makes each while the others wait on its lock, or,
        `wait=False`, return None at once)."""
        if self._directory is None:
            return self._make(key)
        import fcntl
        import hashlib
        import pickle

        name = hashlib.sha256(repr(key).encode()).hexdigest()[:24]
        done = self._directory / f"{name}.pickle"
        with open(self._directory / f"{name}.lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                return None
            if done.exists():
                with open(done, "rb") as f:
                    made_key, analysis, full, digest, caught = pickle.load(f)
                assert made_key == key and self.digest(analysis) == digest, f"the shared cache's pickle of {key} reads back changed"
                return analysis, full, digest, caught
            made = self._make(key)
            staging = done.with_suffix(f".{os.getpid()}")
            with open(staging, "wb") as f:
                pickle.dump((key, *made), f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(staging, done)
            return made

    @staticmethod
    def full_summary(analysis) -> str:
        import tracekit

        return tracekit.summary_json(analysis, top=max(len(analysis.ops), len(analysis.kernel_summary), len(analysis.copy_summary), 1))

    @classmethod
    def digest(cls, analysis, full_summary: str | None = None) -> str:
        import hashlib

        import pandas as pd

        parts = [full_summary if full_summary is not None else cls.full_summary(analysis)]
        for name, value in sorted(vars(analysis).items()):
            if isinstance(value, pd.DataFrame):
                parts.append(f"{name}:{value.shape}:{list(value.columns)}")
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()

    def check(self) -> list[str]:
        changed = [key[0] for key in sorted(self.handed_out) if self.digest(self._made[key]) != self._digests[key]]
        self.handed_out.clear()
        return changed


# One directory per test session that its processes (the xdist workers) share: the cached
# analyses, the MLflow server. Made by the main process, handed to each worker (workerinput),
# removed when the session ends, after the process groups started for it (pgid-* files) are
# killed.
_SESSION_DIR = "tracekit_session_dir"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):  # xdist's controller, once per worker it starts
    node.workerinput[_SESSION_DIR] = node.config._tracekit_session_dir


def pytest_unconfigure(config):
    import shutil
    import signal

    directory = getattr(config, "_tracekit_session_dir", None)
    if directory is None:
        return
    for pgid in pathlib.Path(directory).glob("pgid-*"):
        try:
            os.killpg(int(pgid.name.removeprefix("pgid-")), signal.SIGKILL)
        except (OSError, ValueError):
            pass
    shutil.rmtree(directory, ignore_errors=True)


def _session_dir(config) -> pathlib.Path:
    workerinput = getattr(config, "workerinput", None)
    return pathlib.Path(workerinput[_SESSION_DIR] if workerinput is not None else config._tracekit_session_dir)


@pytest.fixture(scope="session")
def session_dir(request) -> pathlib.Path:
    """The directory this test session's processes share (every xdist worker sees the same one).
    A process group started for the session is killed when it ends: `session_dir / f"pgid-{pgid}"`."""
    return _session_dir(request.config)


@pytest.fixture(scope="session")
def sealed_analyses(request) -> SealedAnalyses:
    if not hasattr(request.config, "workerinput"):
        return SealedAnalyses()  # one process: in memory
    directory = _session_dir(request.config) / "analyses"
    directory.mkdir(exist_ok=True)
    return SealedAnalyses(directory)


@pytest.fixture(scope="module")
def shared_analysis(sealed_analyses):
    """`shared_analysis(path, device=None)`: the sealed, cached Analysis of a trace."""
    yield sealed_analyses
    changed = sealed_analyses.check()
    if changed:
        pytest.fail(f"a test changed the cached Analysis of {changed} (copy it before changing it)", pytrace=False)
