"""Once per clone: the committed outputs made newer than the code, in dependency order.

``make`` decides what is stale by comparing modification times, and git gives every file
it checks out the time of the checkout, in its own order (alphabetical, so 14's CSVs can be
newer than 13's, which read them). Before make compares any time in a new clone, the
Makefile runs ``python -m attnlab.harness.restamp LAYER ...`` (standard library only: the
venv may not exist yet), which sets every tracked file that git reports unmodified to

    t(file) = t_HEAD + (index of the last LAYER whose glob matches it) + 1,

``t_HEAD`` the commit time of HEAD, and files matching no layer (the code) to ``t_HEAD``:
the committed results are taken to be what the committed code makes, as every commit
states, and a fresh clone's ``make all`` runs nothing. A file git reports modified keeps
its time, so what depends on it is stale as usual. It then writes ``MARKER``, and does
nothing while that file exists (``make clean`` removes it). Outside a git checkout it
only writes the marker.
"""

from __future__ import annotations

import fnmatch
import os
import subprocess
import sys
from pathlib import Path

MARKER = Path(".cache") / "restamped"


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


def restamp(layers: list[str]) -> int:
    """Set the times (module docstring); the number of files set."""
    head_time = int(_git("log", "-1", "--format=%ct").strip())
    modified = {
        line[3:]
        for line in _git("status", "--porcelain", "--untracked-files=no").splitlines()
        if line.strip()
    }
    count = 0
    for path in _git("ls-files", "-z").split("\0"):
        if not path or path in modified or not os.path.lexists(path):
            continue
        t = head_time + layer_of(path, layers)
        os.utime(path, (t, t), follow_symlinks=False)
        count += 1
    return count


def main(argv: list[str]) -> int:
    if MARKER.exists():
        return 0
    try:
        count = restamp(argv)
        note = f"set the times of {count} tracked files into dependency order"
    except (OSError, subprocess.CalledProcessError, ValueError):
        note = "not a git checkout: file times left as they are"
    MARKER.parent.mkdir(parents=True, exist_ok=True)
    MARKER.write_text(note + "\n", encoding="utf-8")
    print(f"restamp (once per clone): {note}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
