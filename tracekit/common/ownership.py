"""What in an output directory is tracekit's: the manifest, and the links tracekit may follow.

A bundle (`analyze --out DIR`, `diff --out DIR`) writes, last, MANIFEST: the names of the
entries it put in DIR. The next run into DIR replaces only entries a manifest lists; a file or
folder of the same name that no manifest lists (the user's own `report.md`, a `rank0/` with
the user's logs) is refused with one line before any work, or replaced only with `--force`,
and nothing else in DIR is ever removed. A directory with no manifest holds nothing of
tracekit's (a bundle written before manifests existed is the user's until `--force`).

Links: an output path that is a symlink is followed only where the kernel's
protected_symlinks rule would follow it: the link is the user's own, or the directory's
owner's. Another user's link planted in a shared directory (`timeline.json ->
/root/important.conf` in a sticky /tmp) is refused, whoever runs tracekit.
"""

from __future__ import annotations

import json
import os
import re

from tracekit.errors import TraceError

MANIFEST = "tracekit-manifest.json"
RANK_DIR = re.compile(r"rank\d+")


def owned_entries(directory: str) -> set[str]:
    """The entry names a manifest in `directory` lists (empty where it has none, or a broken one)."""
    try:
        with open(os.path.join(directory, MANIFEST), encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return set()
    entries = doc.get("entries") if isinstance(doc, dict) and doc.get("written_by") == "tracekit" else None
    return {e for e in entries if isinstance(e, str) and e and os.sep not in e and e not in (os.curdir, os.pardir)} if isinstance(entries, list) else set()


def manifest_text(directory: str, names) -> str:
    """The manifest for `directory` once `names` are written there: those, and the entries an
    earlier manifest lists that are still there."""
    kept = {e for e in owned_entries(directory) if os.path.lexists(os.path.join(directory, e))} if os.path.isdir(directory) else set()
    entries = sorted((kept | {str(n) for n in names}) - {MANIFEST})
    return json.dumps({"written_by": "tracekit", "entries": entries}, indent=1) + "\n"


def foreign_entries(directory: str, names) -> list[str]:
    """The entries of `directory` a bundle of `names` (and rankN/) would replace that no
    manifest lists."""
    if not os.path.isdir(directory):
        return []
    owned = owned_entries(directory) | {MANIFEST}
    wanted = set(names)
    return sorted(e for e in os.listdir(directory) if (e in wanted or RANK_DIR.fullmatch(e)) and e not in owned)


def refuse_foreign(directory: str, names, option: str = "--out") -> None:
    """One line for the first entry of the user's own a bundle would replace (see module doc)."""
    foreign = foreign_entries(directory, names)
    if foreign:
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        raise TraceError(os.path.join(directory, foreign[0]),
                         f"was not written by tracekit (no {MANIFEST} beside it lists it){more}: refusing to replace it; "
                         f"choose another {option} directory, or pass --force to replace it")


def refuse_foreign_link(path: str) -> None:
    """A symlink is followed only where protected_symlinks would follow it (see module doc)."""
    try:
        link = os.lstat(path)
    except OSError:
        return
    import stat

    if not stat.S_ISLNK(link.st_mode):
        return
    parent = os.path.dirname(os.path.abspath(path)) or os.curdir
    try:
        owner = os.stat(parent).st_uid
    except OSError:
        return
    if link.st_uid not in (os.geteuid(), owner):
        raise TraceError(path, f"is a symlink owned by another user (uid {link.st_uid}, neither you nor the directory's owner): "
                               "refusing to follow it; remove it or choose another path")
