"""The venv's stamp records the content of the lock it was installed from.

``pip install --require-hashes -r requirements.lock`` checks the hash of every file it
downloads, but skips a package already installed at the locked version without checking
anything: a lock edited under a standing venv (a hash changed, or corrupted) would be
stamped as installed. So the Makefile's venv rule (standard library only: the venv may not
exist yet) asks ``python -m attnlab.harness.lockstamp matches STAMP LOCK`` whether the stamp
records the lock's present content, rebuilds the venv from scratch (every package
downloaded or read from pip's cache and its hash checked) when it does not, and ends with
``python -m attnlab.harness.lockstamp write STAMP LOCK``. A lock whose time changed but not
its content (a checkout) reinstalls into the venv as before.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

USAGE = "usage: python -m attnlab.harness.lockstamp {matches,write} STAMP LOCK"


def record(lock: Path) -> str:
    """The stamp's text for ``lock`` as it is now: its SHA-256 and its name."""
    digest = hashlib.sha256(Path(lock).read_bytes()).hexdigest()
    return f"sha256:{digest} {Path(lock).name}\n"


def matches(stamp: Path, lock: Path) -> bool:
    """Whether ``stamp`` records the present content of ``lock`` (False without a stamp,
    or with one from before stamps recorded it: an empty file)."""
    try:
        return Path(stamp).read_text(encoding="utf-8") == record(lock)
    except (OSError, UnicodeDecodeError):
        return False


def write(stamp: Path, lock: Path) -> None:
    """Write ``stamp`` for ``lock`` whole (a temporary file renamed over it)."""
    stamp = Path(stamp)
    temporary = stamp.with_name(f"{stamp.name}.tmp-{os.getpid()}")
    temporary.write_text(record(lock), encoding="utf-8")
    os.replace(temporary, stamp)


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in ("matches", "write"):
        print(USAGE, file=sys.stderr)
        return 2
    command, stamp, lock = argv[0], Path(argv[1]), Path(argv[2])
    if command == "write":
        write(stamp, lock)
        return 0
    if matches(stamp, lock):
        return 0
    if stamp.exists():
        print(f"{lock} is not the lock {stamp} was installed from: the venv is rebuilt from "
              "scratch, every package's hash checked", file=sys.stderr)  # fmt: skip
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
