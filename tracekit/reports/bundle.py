"""The report bundle `tracekit analyze --out DIR` writes, to attach to an experiment.

    summary.json     versioned, documented in docs/summary-schema.md
    report.md        the summary and tables in Markdown (links the PNGs)
    report.html      one self-contained page: inline CSS, plots embedded
    kernels.parquet  one row per GPU activity: trace columns, costs, roofline, phase, block
    ops.parquet      one row per (op, input shapes)
    blocks.csv       phase x block
    roofline.png     log-log roofline with the device's ceilings
    breakdown.png    GPU time by phase and block

A bundle is written whole or not at all: every file goes into a temporary directory beside
DIR, which is renamed into place at the end (`atomic_dir`), so an interrupted or failed run
never leaves files that look like a complete report. The temporary directory is locked
while its run lives; the next run into DIR removes those of runs that were killed.

pyarrow writes and reads back the tables on this thread alone (no pool): under a memory
limit a pool thread that cannot start ended the process (std::terminate) or left the read
waiting for it forever (issue 33).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import replace
import shutil
import tempfile
from typing import TYPE_CHECKING, Iterator

from tracekit.errors import TraceError, interrupts_deferred, memory_ran_out, raise_if_interrupted

if TYPE_CHECKING:  # (diff of stored summaries checks its --out here without importing the analysis)
    from tracekit.analysis import Analysis

# The file whose presence says "this bundle is complete" (summary.json of one trace,
# ranks.json of several): where DIR already holds other files, it is removed first and
# put back last.
MARKERS = ("summary.json", "ranks.json")


# Every name a bundle may put in DIR (one trace; several add ranks.json and rankN/).
BUNDLE_FILES = ("summary.json", "report.md", "report.html", "kernels.parquet", "ops.parquet", "blocks.csv", "roofline.png",
                "breakdown.png", "ranks.json", "ranks.csv", "ranks.md")


def check_out_dir(path: str, option: str = "--out", inputs=(), names=BUNDLE_FILES, force: bool = False) -> str:
    """Refuse, before any work is done, an output path that cannot become a directory, that
    is another user's link, whose files (`names`, and rankN/) would replace one of the
    command's inputs, or (without `force`) an entry no tracekit manifest lists
    (tracekit.common.ownership)."""
    from tracekit.common.atomic import check_out_path, writable_parent
    from tracekit.common.ownership import RANK_DIR, refuse_foreign, refuse_foreign_link

    check_out_path(path, option)
    refuse_foreign_link(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise TraceError(path, f"exists and is not a directory; {option} names a directory for the output files")
    if os.path.isdir(path):
        if not os.access(path, os.W_OK | os.X_OK):
            raise TraceError(path, "permission denied: cannot write files in it")
        target = os.path.realpath(path)
        for given in inputs:
            if given is None or not os.path.exists(given):
                continue
            rel = os.path.relpath(os.path.realpath(given), target)
            first = rel.split(os.sep)[0]
            if not rel.startswith(os.pardir) and rel != os.curdir and (first in names or RANK_DIR.fullmatch(first)):
                raise TraceError(path, f"writing here would replace the input {given}: choose another output directory")
        for name in names:  # an entry the bundle writes that is another user's link: refused before the work
            refuse_foreign_link(os.path.join(path, name))
        if not force:
            refuse_foreign(path, names, option)
        return path
    writable_parent(path)
    return path


@contextlib.contextmanager
def atomic_dir(out_dir: str) -> Iterator[str]:
    """Yields a temporary directory to write the bundle into; on success its content
    takes the place of `out_dir`, on any error or interrupt it is removed."""
    from tracekit.common.atomic import STAGING_MARK, hold, release, remove_stale, staging_prefix
    from tracekit.common.ownership import MANIFEST, manifest_text

    target = os.path.realpath(out_dir)  # through a symlink: the directory it names is written, the link kept
    tmp = held = None
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        remove_stale(os.path.dirname(target), staging_prefix(target))  # left by killed runs into the same place
        if os.path.isdir(target):
            remove_stale(target, STAGING_MARK)
        with interrupts_deferred():  # so that `tmp` is known (and removed) whenever Ctrl-C comes
            tmp = held = _make_temporary(target)
            hold(held)
        yield tmp
        with open(os.path.join(tmp, MANIFEST), "w", encoding="utf-8") as f:  # what is tracekit's in DIR
            f.write(manifest_text(target, os.listdir(tmp)))
        verify(tmp, out_dir)  # a bundle that says it is whole is whole: every file read back first
        with interrupts_deferred():  # the renames are not torn apart halfway
            raise_if_interrupted()
            _install(tmp, target)
            tmp = None
    except OSError as exc:
        raise TraceError(out_dir, f"cannot write the report bundle: {exc.strerror or exc}") from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if held is not None:
            release(held)


def _make_temporary(target: str) -> str:
    """Beside the target (one rename puts it in place); inside it when only the target
    itself is writable (then its entries are moved in one by one). mkdtemp makes it 0700:
    the bundle gets the mode any directory the user makes would have (umask)."""
    from tracekit.common.atomic import STAGING_MARK, staging_prefix

    try:
        path = tempfile.mkdtemp(prefix=staging_prefix(target), dir=os.path.dirname(target))
    except PermissionError:
        if not os.path.isdir(target):
            raise
        path = tempfile.mkdtemp(prefix=STAGING_MARK, dir=target)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o777 & ~umask)
    return path


def verify(directory: str, out_dir: str) -> None:
    """Every file of a bundle being built, read back: parquet tables whole, JSON valid,
    nothing empty. A file that does not read back fails the run (nothing is installed)."""
    import json

    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, directory)
            try:
                if os.path.getsize(path) == 0:
                    raise ValueError("empty")
                if name.endswith(".parquet"):
                    import pyarrow.parquet as pq

                    # one row group at a time, on this thread: bounded memory, no pool to wait on
                    with pq.ParquetFile(path, pre_buffer=False) as table:
                        for group in range(table.num_row_groups):
                            table.read_row_group(group, use_threads=False)
                elif name.endswith(".json"):
                    with open(path, "rb") as f:
                        json.loads(f.read())
            except Exception as exc:  # noqa: BLE001 - running out of memory is not a torn file
                if memory_ran_out(exc):
                    raise
                if not isinstance(exc, (OSError, ValueError)):
                    raise TraceError(out_dir, f"{rel} did not read back ({type(exc).__name__}: {exc}); nothing was written") from None
                raise TraceError(out_dir, f"{rel} did not read back ({exc}); nothing was written") from None


def _install(tmp: str, target: str) -> None:
    if os.path.dirname(tmp) == target:
        _install_entries(tmp, target)
        return
    if not os.path.exists(target):
        os.rename(tmp, target)
        return
    entries = os.listdir(target)
    if not entries:
        os.rename(tmp, target)  # rename(2) replaces an empty directory
        return
    from tracekit.common.ownership import MANIFEST, owned_entries

    if set(entries) <= owned_entries(target) | {MANIFEST}:
        # Only a previous bundle's entries: swap the directories, then drop the old one.
        from tracekit.common.atomic import hold, release, staging_prefix

        old = tempfile.mkdtemp(prefix=f"{staging_prefix(target)}old-", dir=os.path.dirname(target))
        hold(old)  # (another run's clean-up leaves it alone)
        os.rename(target, os.path.join(old, "bundle"))
        os.rename(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
        release(old)
        return
    _install_entries(tmp, target)


def _install_entries(tmp: str, target: str) -> None:
    """DIR holds entries of its own (the traces of `analyze DIR --out DIR`, the user's files):
    the bundle's entries are put in one by one, the completeness marker removed first and
    renamed in last, the manifest after it; nothing else in DIR is touched. What they
    replace was checked before the work (check_out_dir: a manifest lists it, or --force)."""
    from tracekit.common.ownership import MANIFEST

    ours = os.listdir(tmp)
    for name in set(MARKERS) & set(ours):
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(target, name))
    names = sorted(ours, key=lambda n: (n == MANIFEST, n in MARKERS))
    for name in names:
        src, dst = os.path.join(tmp, name), os.path.join(target, name)
        if os.path.isdir(dst) and not os.path.islink(dst):
            shutil.rmtree(dst)
        os.replace(src, dst)
    os.rmdir(tmp)


def kernels_with_names(k):
    """The kernels table with, beside the raw name, its demangled name and its report label."""
    from tracekit.trace.kernel_names import trace_labels
    from tracekit.trace.readable_names import readable

    k = k.copy()
    names = k["name"].astype(str)
    label = trace_labels(names.unique())
    k["demangled"] = names.map({n: readable(n) for n in label}).astype("category")
    k["label"] = names.map(label).astype("category")
    return k


MEASURED_INT_COLUMNS = ("bytes", "registers", "shared_memory", "coll_in_elems", "coll_out_elems", "coll_group_size",
                        "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")


def _write_parquet(frame, path: str) -> None:
    """A DataFrame as parquet, converted and written on this thread (pandas' to_parquet
    converts columns in a pool of cpu_count threads: "can't start new thread" under a
    memory limit)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False, nthreads=1), path)


def write_bundle(a: Analysis, out_dir: str, top: int = 15, summary_extra: dict | None = None) -> list[str]:
    """`summary_extra`: keys summary.json carries beside the Analysis (`what_if`), written
    with it, never added to an installed bundle afterwards."""
    with atomic_dir(out_dir) as tmp:
        names = write_files(a, tmp, top, summary_extra)
    return [os.path.join(out_dir, name) for name in names]


def write_files(a: Analysis, out_dir: str, top: int = 15, summary_extra: dict | None = None) -> list[str]:
    """Writes the bundle's files into `out_dir` (a directory being built); their names."""
    from tracekit.reports import html, markdown, plots, summary_json
    from tracekit.reports.csv_table import write_csv
    from tracekit.reports.renderer import RenderOptions

    os.makedirs(out_dir, exist_ok=True)
    written = []

    def save(name: str, data: str | bytes) -> None:
        with open(os.path.join(out_dir, name), "wb") as f:
            # Text from a trace or a path may hold undecodable bytes (surrogates): keep them visible
            f.write(data if isinstance(data, bytes) else data.encode("utf-8", errors="backslashreplace"))
        written.append(name)

    images = {"roofline": plots.roofline_png(a), "breakdown": plots.breakdown_png(a)}
    options = RenderOptions(top=top, images=images)
    save("report.md", markdown.render(a, options))
    save("report.html", html.render(a, options))
    save("roofline.png", images["roofline"])
    save("breakdown.png", images["breakdown"])
    kernels = kernels_with_names(a.kernels)
    # Measurements the trace did not record are -1 in the Trace tables; in a file a reader
    # sums, unknown is null (a memcpy without a recorded size has no -1 bytes).
    for col in MEASURED_INT_COLUMNS:
        if col in kernels:
            kernels[col] = kernels[col].astype("Int64").mask(kernels[col] < 0)
    for col in kernels.columns:  # parquet wants one type per column; categories of str
        if kernels[col].dtype == object:
            kernels[col] = kernels[col].astype("string")
    _write_parquet(kernels, os.path.join(out_dir, "kernels.parquet"))
    written.append("kernels.parquet")
    _write_parquet(a.ops.astype({c: "string" for c in a.ops.columns if a.ops[c].dtype == object}), os.path.join(out_dir, "ops.parquet"))
    written.append("ops.parquet")
    write_csv(a.blocks, os.path.join(out_dir, "blocks.csv"))
    written.append("blocks.csv")
    save("summary.json", summary_json.render(a, replace(options, json_extra=summary_extra or {})))  # last: its presence says the bundle is whole
    return written
