"""Seeded cases at the edges of a run (issue 39): where output goes, the streams, the
process's limits, inputs that change while read, and option values. Each case is one
`python -m tracekit` process; `check` says what went wrong with it, if anything.

Run many with benchmarks/fuzz_edges.py; tests/test_fuzz_edges.py runs a small fixed subset.

A case passes when the run ends with exit 0 (the output where it was asked for), 2 with one
error line, or 130 / 143 after the interrupt it was sent; with no traceback and no raw library
warning; within TIME_BOUND_S; with no process of its own left; with every special file
(device nodes made in a private directory with mknod, FIFOs, sockets, symlinks) as it was;
and with no staging file or partial output left when it failed.
"""

from __future__ import annotations

import os
import random
import resource
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "fixtures")
TINY = os.path.join(ROOT, "fixtures", "cpu_tiny_llama_decode.json.gz")
BERT = os.path.join(SHARED, "torch", "h100_bert_small_hf_inference.json.gz")
NSYS = os.path.join(SHARED, "nsys", "rtx3080_tiny_nsys2026.1.sqlite")
TIME_BOUND_S = 60.0
IS_ROOT = os.geteuid() == 0

COMMANDS = ("info", "analyze-json", "analyze", "export", "diff", "check")
OUTPUTS = ("new", "existing", "link-to-file", "dangling-link", "link-to-stdout", "char-null", "char-full", "fifo-reader",
           "socket", "directory", "under-a-file", "deleted-cwd", "link-to-char-null")
STREAMS = ("normal", "stdout-closed", "stdout-full", "stderr-closed", "stderr-full", "both-full", "stdout-pipe-closed")
LIMITS = ("none", "nofile", "nproc", "as", "cpu-soft")
INPUTS = ("tiny", "bert", "nsys", "plain-json", "trailing-garbage", "fifo", "char-device", "shrinking", "growing",
          "unreadable-dir", "rank-dir", "negative-dur", "missing-dur")
OPTIONS = ("none", "empty", "nan", "inf", "bad-scheduler", "bad-gunzip-env")


@dataclass
class Case:
    seed: int
    work: str
    argv: list[str]
    env: dict[str, str]
    cwd: str
    streams: str
    limit: tuple[str, int] | None
    signal_after: float | None
    special: dict[str, tuple[int, int]] = field(default_factory=dict)  # path -> (file type, rdev) before the run
    output: str | None = None  # what the run was asked to write
    mutate: str | None = None  # an input changed while the run reads it
    input_path: str | None = None
    labels: list[str] = field(default_factory=list)


def _kind(path: str) -> tuple[int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return stat.S_IFMT(st.st_mode), st.st_rdev


def _gzip_plain(src: str, dst: str) -> None:
    import gzip

    with gzip.open(src, "rb") as f, open(dst, "wb") as out:
        out.write(f.read())


def _make_input(rng: random.Random, kind: str, work: str) -> tuple[str, str | None]:
    """(the input path, how it is changed while read)."""
    import gzip
    import json

    if kind == "tiny":
        return TINY, None
    if kind == "bert":
        return BERT, None
    if kind == "nsys":
        return NSYS, None
    if kind in ("plain-json", "shrinking", "growing"):
        path = os.path.join(work, "plain.json")
        _gzip_plain(BERT, path)
        return path, (None if kind == "plain-json" else kind)
    if kind == "trailing-garbage":
        path = os.path.join(work, "trail.json.gz")
        with open(BERT, "rb") as f, open(path, "wb") as out:
            out.write(f.read() + (bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4000))) if rng.random() < 0.5 else b"\0" * 512))
        return path, None
    if kind == "fifo":
        path = os.path.join(work, "in.fifo")
        os.mkfifo(path)
        return path, None
    if kind == "char-device":
        if IS_ROOT:
            path = os.path.join(work, "zero")
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 5))
            return path, None
        return "/dev/zero", None
    if kind == "unreadable-dir":
        path = os.path.join(work, "noread")
        os.mkdir(path)
        os.symlink(BERT, os.path.join(path, "r0.json.gz"))
        os.chmod(path, 0)
        return path, None
    if kind == "rank-dir":
        path = os.path.join(work, "ranks")
        os.mkdir(path)
        for r in range(2):
            os.symlink(TINY, os.path.join(path, f"rank{r}.json.gz"))
        return path, None
    with gzip.open(BERT, "rb") as f:
        doc = json.load(f)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    for e in rng.sample(kernels, rng.randint(1, len(kernels))):
        if kind == "negative-dur":
            e["dur"] = -rng.choice((1, 5, 1000))
        else:
            e.pop("dur", None)
    path = os.path.join(work, f"{kind}.json")
    with open(path, "w") as out:
        json.dump(doc, out)
    return path, None


def _make_output(rng: random.Random, kind: str, work: str, directory: bool) -> tuple[str, str]:
    """(the output path as given, the working directory to run in)."""
    name = "outdir" if directory else "out.json"
    path = os.path.join(work, name)
    if kind == "existing":
        if directory:
            os.mkdir(path)
        else:
            with open(path, "w") as f:
                f.write("old\n")
    elif kind == "link-to-file":
        target = os.path.join(work, "target.json")
        with open(target, "w") as f:
            f.write("old\n")
        os.symlink(target, path)
    elif kind == "dangling-link":
        os.symlink(os.path.join(work, "nowhere.json"), path)
    elif kind == "link-to-stdout":
        os.symlink("/proc/self/fd/1", path)
    elif kind in ("char-null", "char-full", "link-to-char-null"):
        if IS_ROOT:
            node = os.path.join(work, "dev-" + kind)
            os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 7 if kind == "char-full" else 3))
        else:
            node = "/dev/full" if kind == "char-full" else "/dev/null"
        if kind == "link-to-char-null":
            os.symlink(node, path)
        else:
            path = node
    elif kind == "fifo-reader":
        os.mkfifo(path)
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(path)
        s.close()
    elif kind == "directory":
        os.mkdir(path)
        if directory:
            path = os.path.join(work, "blocker")
            with open(path, "w") as f:
                f.write("x")
    elif kind == "under-a-file":
        blocker = os.path.join(work, "blocker")
        with open(blocker, "w") as f:
            f.write("x")
        path = os.path.join(blocker, name)
    elif kind == "deleted-cwd":
        gone = os.path.join(work, "gone")
        os.mkdir(gone)
        return name, gone
    return path, work


def make_case(seed: int, work: str) -> Case:
    rng = random.Random(seed)
    work = os.path.join(work, f"case{seed}")
    os.makedirs(work)
    labels = []
    command = rng.choice(COMMANDS)
    input_kind = rng.choice(INPUTS) if rng.random() < 0.5 else rng.choice(("tiny", "bert", "nsys"))
    if command in ("diff", "check", "export") and input_kind == "rank-dir":
        input_kind = "tiny"
    path, mutate = _make_input(rng, input_kind, work)
    labels += [command, "input:" + input_kind]
    argv = [sys.executable, "-m", "tracekit"]
    out_kind = rng.choice(OUTPUTS)
    cwd = work
    output = None
    if command == "info":
        argv += ["info", path, "--format", "json"]
    elif command in ("analyze", "analyze-json"):
        argv += ["analyze", path] + (["--format", "json"] if command == "analyze-json" else [])
    elif command == "export":
        output, cwd = _make_output(rng, out_kind, work, directory=False)
        argv += ["export", path, "--perfetto", output]
    elif command == "diff":
        output, cwd = _make_output(rng, out_kind, work, directory=True)
        argv += ["diff", path, TINY, "--out", output, "--format", "json"]
    else:
        expect = os.path.join(work, "expect.toml")
        with open(expect, "w") as f:
            f.write("[[expect]]\nmin_coverage = 0.0\n")
        output, cwd = _make_output(rng, out_kind, work, directory=False)
        argv += ["check", path, "--expect", expect, "--junit", output]
    if output is not None:
        labels.append("out:" + out_kind)
    option = rng.choice(OPTIONS) if rng.random() < 0.3 else "none"
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHONWARNINGS="error::RuntimeWarning", TRACEKIT_FUZZ_CASE=f"{os.getpid()}-{seed}")
    env.pop("TRACEKIT_DEBUG", None)
    if option == "empty":
        flag = {"info": "--device-file", "analyze": "--what-if", "analyze-json": "--device", "export": "--rules",
                "diff": "--device", "check": "--baseline"}[command]
        argv += [flag, rng.choice(("", " "))]
    elif option in ("nan", "inf"):
        if command.startswith("analyze"):
            argv += [rng.choice(("--sustained", "--straggler-threshold")), option]
        elif command in ("diff", "check"):
            argv += ["--min-change", option]
    elif option == "bad-scheduler" and command.startswith("analyze"):
        argv += ["--scheduler", rng.choice(("bogus", "local", "tcp://"))]
    elif option == "bad-gunzip-env":
        env["TRACEKIT_MAX_GUNZIP_BYTES"] = rng.choice(("-1", "0", "abc", ""))
    if option != "none":
        labels.append("option:" + option)
    streams = rng.choice(STREAMS) if rng.random() < 0.4 else "normal"
    labels.append("streams:" + streams)
    limit = None
    kind = rng.choice(LIMITS) if rng.random() < 0.35 else "none"
    if kind == "nofile":
        limit = ("nofile", rng.randint(6, 40))
    elif kind == "nproc" and not IS_ROOT:
        limit = ("nproc", rng.randint(1, 12))
    elif kind == "as":
        limit = ("as", rng.choice((100, 200, 300, 400, 600)) << 20)
    elif kind == "cpu-soft":
        limit = ("cpu", rng.choice((1, 2)))
    if limit:
        labels.append(f"limit:{limit[0]}={limit[1]}")
    signal_after = rng.uniform(0.0, 2.0) if rng.random() < 0.1 else None  # after tracekit's first line (_signal_once_started)
    if signal_after is not None:
        labels.append("signal")
    case = Case(seed, work, argv, env, cwd, streams, limit,
                signal_after, output=output, mutate=mutate, input_path=path, labels=labels)
    for candidate in {output, path} - {None}:
        full = candidate if os.path.isabs(candidate) else os.path.join(cwd, candidate)
        kind_before = _kind(full)
        if kind_before is not None and kind_before[0] != stat.S_IFREG:
            case.special[full] = kind_before
            if kind_before[0] == stat.S_IFLNK:
                target = os.path.realpath(full)
                if _kind(target) is not None and not target.startswith("/proc/"):
                    case.special[target] = _kind(target)
    if out_kind == "deleted-cwd" and output is not None:
        os.rmdir(cwd)
    return case


def _preexec(case: Case):
    def run() -> None:
        os.setsid()
        if case.limit is None:
            return
        name, value = case.limit
        which = {"nofile": resource.RLIMIT_NOFILE, "nproc": resource.RLIMIT_NPROC, "as": resource.RLIMIT_AS,
                 "cpu": resource.RLIMIT_CPU}[name]
        hard = value + 3 if name == "cpu" else value
        resource.setrlimit(which, (value, hard))

    return run


def _fifo_reader(path: str, stop: threading.Event) -> None:
    """Reads the FIFO output, as a user's `cat` would."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return
    try:
        while not stop.is_set():
            try:
                if not os.read(fd, 1 << 16):
                    time.sleep(0.02)
            except BlockingIOError:
                time.sleep(0.02)
    finally:
        os.close(fd)


def _mutator(path: str, how: str, stop: threading.Event, rng: random.Random) -> None:
    """The input changed while it is read: cut to 0 bytes, or appended to, at a random moment."""
    time.sleep(rng.uniform(0.0, 1.5))
    try:
        if how == "shrinking":
            os.truncate(path, rng.choice((0, os.path.getsize(path) // 2)))
        else:
            with open(path, "ab") as f:
                f.write(b" " * 4096 + b"{")
    except OSError:
        pass


def tracekit_started(pid: int) -> bool:
    """Whether tracekit's first line has run in `pid`: it catches SIGTERM from there on (the
    interpreter alone catches only SIGINT). Before that, in the interpreter's start-up (which
    runs site-packages' .pth files, ~0.2 s or more on a loaded machine), no handler of
    tracekit's can exist: a signal then is the interpreter's to report."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    except OSError:
        pass
    return False


def _signal_once_started(proc: subprocess.Popen, sig: int, after: float, stop: threading.Event) -> None:
    deadline = time.monotonic() + 30
    while not tracekit_started(proc.pid) and proc.poll() is None and time.monotonic() < deadline and not stop.is_set():
        time.sleep(0.005)
    if not stop.wait(after) and proc.poll() is None:
        proc.send_signal(sig)


def _own_processes(tag: str) -> list[int]:
    """Processes still alive that this case started (they carry its TRACEKIT_FUZZ_CASE)."""
    found = []
    needle = f"TRACEKIT_FUZZ_CASE={tag}".encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(pid))
        except OSError:
            continue
    return found


def run_case(case: Case) -> dict:
    stdout_target: int | None = subprocess.PIPE
    stderr_target: int | None = subprocess.PIPE
    opened = []
    full = "/dev/full"
    if case.streams in ("stdout-full", "both-full"):
        fd = os.open(full, os.O_WRONLY)
        opened.append(fd)
        stdout_target = fd
    if case.streams in ("stderr-full", "both-full"):
        fd = os.open(full, os.O_WRONLY)
        opened.append(fd)
        stderr_target = fd
    pass_fds = ()
    closing = case.streams in ("stdout-closed", "stderr-closed")
    stop = threading.Event()
    helpers = []
    if case.output and _kind(case.output if os.path.isabs(case.output) else os.path.join(case.cwd, case.output)) and \
            stat.S_ISFIFO(_kind(case.output)[0]):
        helpers.append(threading.Thread(target=_fifo_reader, args=(case.output, stop), daemon=True))
    if case.mutate:
        helpers.append(threading.Thread(target=_mutator, args=(case.input_path, case.mutate, stop, random.Random(case.seed)), daemon=True))
    preexec = _preexec(case)
    if closing:
        which = 1 if case.streams == "stdout-closed" else 2

        def preexec_closing(p=preexec, which=which):
            p()
            os.close(which)

        preexec = preexec_closing
        if which == 1:
            stdout_target = None
        else:
            stderr_target = None
    started = time.monotonic()
    try:
        proc = subprocess.Popen(case.argv, cwd=case.cwd if os.path.isdir(case.cwd) else case.work, env=case.env,
                                stdin=subprocess.DEVNULL, stdout=stdout_target, stderr=stderr_target, preexec_fn=preexec,
                                pass_fds=pass_fds)
    except OSError as exc:
        for fd in opened:
            os.close(fd)
        return {"seed": case.seed, "labels": case.labels, "code": None, "problems": [f"could not start: {exc}"], "seconds": 0.0}
    if case.cwd != case.work and not os.path.isdir(case.cwd):
        pass
    for helper in helpers:
        helper.start()
    timer = None
    if case.signal_after is not None:
        sig = random.Random(case.seed).choice((signal.SIGINT, signal.SIGTERM))
        timer = threading.Thread(target=_signal_once_started, args=(proc, sig, case.signal_after, stop), daemon=True)
        timer.start()
    if case.streams == "stdout-pipe-closed":
        proc.stdout.close()  # the reader went away before reading anything
    hung = False
    try:
        out, err = proc.communicate(timeout=TIME_BOUND_S)
    except subprocess.TimeoutExpired:
        hung = True
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    seconds = time.monotonic() - started
    stop.set()
    for fd in opened:
        os.close(fd)
    return check(case, proc.returncode, out or b"", err or b"", hung, seconds)


def check(case: Case, code: int, out: bytes, err: bytes, hung: bool, seconds: float) -> dict:
    problems = []
    text = err.decode("utf-8", "replace")
    lines = [line for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if not line.startswith("tracekit: warning:") and not line.startswith("tracekit: wrote")]
    interrupted = case.signal_after is not None and code in (130, 143)
    if hung:
        problems.append("hang")
    elif before_tracekit(text) or (case.signal_after is not None and code in (-signal.SIGINT, -signal.SIGTERM) and not text):
        # interrupted while the interpreter starts (site-packages' .pth files run before any
        # tracekit code can install a handler): counted apart, it is not tracekit's to handle
        problems.append("signal during interpreter start-up")
    else:
        if code not in (0, 2) and not interrupted and not (code == 3 and "check" in case.argv):
            problems.append(f"exit {code}")
        if "Traceback" in text or "internal error" in text:
            problems.append("traceback")
    if any("Warning:" in line for line in lines):
        problems.append("python warning")
    can_read_stderr = case.streams not in ("stderr-full", "both-full", "stderr-closed")
    if can_read_stderr and not hung and code == 2 and len(errors) != 1:
        problems.append("exit 2 without one error line")
    time.sleep(0.05)
    left = _own_processes(case.env["TRACEKIT_FUZZ_CASE"])
    if left:
        problems.append(f"orphans {left}")
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    for path, before in case.special.items():
        if _kind(path) != before:
            problems.append(f"special file changed: {path}")
    for directory in {case.work, case.cwd, os.path.dirname(case.output or case.work)} | ({os.path.realpath(case.output)} if case.output and os.path.isdir(case.output) else set()):
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        if any(".tracekit-" in n for n in names):  # whatever the exit code
            problems.append(f"staging left in {directory}")
    if case.output and code not in (0, 3) and "out:new" in case.labels and not case.streams.startswith(("stdout", "both")):
        full = case.output if os.path.isabs(case.output) else os.path.join(case.cwd, case.output)
        if os.path.exists(full):
            problems.append("partial output left")
    return {"seed": case.seed, "labels": case.labels, "code": code, "problems": problems, "seconds": round(seconds, 2),
            "stderr": text[-400:] if "Traceback" not in text else text[:300] + " ... " + text[-300:]}


def before_tracekit(stderr: str) -> bool:
    """A KeyboardInterrupt traceback with no frame of tracekit's: the signal came during the
    interpreter's own start-up, before tracekit/__init__.py ran."""
    return "KeyboardInterrupt" in stderr and "Traceback" in stderr and f"{os.sep}tracekit{os.sep}" not in stderr


def cleanup(case: Case) -> None:
    import shutil

    for root, dirs, _ in os.walk(case.work):
        for d in dirs:
            try:
                os.chmod(os.path.join(root, d), 0o700)
            except OSError:
                pass
    try:
        os.chmod(case.work, 0o700)
    except OSError:
        pass
    for d in os.listdir(case.work) if os.path.isdir(case.work) else ():
        p = os.path.join(case.work, d)
        if os.path.isdir(p) and not os.path.islink(p):
            os.chmod(p, 0o700)
    shutil.rmtree(case.work, ignore_errors=True)
