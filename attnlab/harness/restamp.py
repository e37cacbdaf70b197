"""Once, on a fresh clone: the committed outputs made newer than the code, in dependency order.

``make`` decides what is stale by comparing modification times, and git gives every file
it checks out the time of the checkout, in its own order (alphabetical, so 14's CSVs can be
newer than 13's, which read them). Before make compares any time in a new clone, the
Makefile runs ``python -m attnlab.harness.restamp LAYER ...`` (standard library only: the
venv may not exist yet), which sets every tracked file that git reports unmodified to

    t(file) = base + (index of the last LAYER whose glob matches it) + 1,

and files matching no layer (the code) to ``base``, where ``base`` is the commit time of
HEAD, moved back where needed so that no time it sets is in the future (a HEAD committed
ahead of this machine's clock) or as new as a file git reports modified: the committed
results are taken to be what the committed code makes, as every commit states, and a fresh
clone's ``make all`` runs nothing. A file git reports modified keeps its time, so what
depends on it is stale as usual.

It does so only on a fresh checkout, and decides that once: it then writes ``MARKER_NAME``
in git's own folder for this work tree (``.git/``, or ``.git/worktrees/NAME/``), which
neither ``make clean`` nor removing ``.cache`` touches and which every new clone or work
tree starts without, and does nothing while that file exists. A tree is not fresh (its
times are left as they are) when

- ``.cache/restamped`` exists: this restamp's marker before it moved into git's folder;
- HEAD's reflog shows it moved other than by checking a commit out (a commit, merge,
  reset, rebase, pull): the tree has been worked in, and its committed results need not be
  what its committed code makes (code committed without rerunning it must rebuild them).

Outside a git checkout, or below the top of one, it does nothing.
"""

from __future__ import annotations

import fnmatch
import os
import subprocess
import sys
import time
from pathlib import Path

MARKER_NAME = "attnlab-restamped"
LEGACY_MARKER = Path(".cache") / "restamped"
NO_COMMIT = "0" * 40


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout


def layer_of(path: str, layers: list[str]) -> int:
    """1 + the index of the last glob of ``layers`` matching ``path`` (a glob matches a
    path, or a folder above it), 0 when none does."""
    found = 0
    for i, glob in enumerate(layers):
        parents = [str(p) for p in Path(path).parents][:-1]
        if any(fnmatch.fnmatch(p, glob) for p in (path, *parents)):
            found = i + 1
    return found


def marker() -> Path | None:
    """Where the marker goes: git's folder for this work tree; None outside a git checkout
    or below its top (a folder inside someone else's repository is not this project's)."""
    try:
        prefix, path = _git("rev-parse", "--show-prefix", "--git-path", MARKER_NAME).split("\n")[:2]
    except (OSError, subprocess.CalledProcessError, ValueError):
        return None
    return Path(path) if path and not prefix else None


def worked_in(reflog: str) -> str | None:
    """The first entry of HEAD's reflog ``reflog`` (the text of ``logs/HEAD``) that moved HEAD
    other than by a clone, a new branch or a checkout, or None."""
    for line in reflog.splitlines():
        fields, _, message = line.partition("\t")
        old, new = (fields.split() + ["", ""])[:2]
        if old != NO_COMMIT and old != new and not message.startswith("checkout:"):
            return message or "an unnamed move of HEAD"
    return None


def not_fresh() -> str | None:
    """Why this checkout is not a fresh one (module docstring), or None."""
    if LEGACY_MARKER.exists():
        return f"{LEGACY_MARKER} says it was restamped before"
    reflog = Path(_git("rev-parse", "--git-path", "logs/HEAD").strip())
    try:
        work = worked_in(reflog.read_text(encoding="utf-8", errors="replace"))
    except FileNotFoundError:
        work = None
    return f"HEAD has moved since the checkout ({work})" if work else None


def _modified() -> set[str]:
    """The tracked paths git reports changed (either side of a rename)."""
    fields = _git("status", "--porcelain", "-z", "--untracked-files=no").split("\0")
    paths: set[str] = set()
    i = 0
    while i < len(fields):
        entry = fields[i]
        if entry:
            paths.add(entry[3:])
            if entry[0] in "RC":  # a rename or copy: its source follows
                i += 1
                paths.add(fields[i])
        i += 1
    return paths


def restamp(layers: list[str], now: float | None = None) -> int:
    """Set the times (module docstring); the number of files set."""
    head_time = int(_git("log", "-1", "--format=%ct").strip())
    modified = _modified()
    top = len(layers)
    base = min(head_time, int(time.time() if now is None else now) - top)
    for path in modified:
        if os.path.lexists(path):
            base = min(base, int(os.lstat(path).st_mtime) - top - 1)
    count = 0
    for path in _git("ls-files", "-z").split("\0"):
        if not path or path in modified or not os.path.lexists(path):
            continue
        t = base + layer_of(path, layers)
        os.utime(path, (t, t), follow_symlinks=False)
        count += 1
    return count


def main(argv: list[str]) -> int:
    where = marker()
    if where is None or where.exists():
        return 0
    try:
        reason = not_fresh()
        if reason:
            note = f"not a fresh clone, file times left as they are: {reason}"
        else:
            note = f"set the times of {restamp(argv)} tracked files into dependency order"
    except (OSError, subprocess.CalledProcessError, ValueError) as error:
        note = f"file times left as they are: {error}"
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_text(note + "\n", encoding="utf-8")
    print(f"restamp (once per clone): {note}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
