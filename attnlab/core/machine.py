"""The memory this process may use: the machine's physical memory or, where tighter, the
room its limits leave (``ulimit -v``, ``ulimit -d``), and the share of it one run may plan
to use (``memory_budget_bytes``). ``ATTNLAB_MEMORY_BYTES`` (an integer) stands in for the
physical memory, for tests.

The sizes checked before work (the harness's ``memory.py``) and the checkpoint files read
(``models/files.py``, ``models/config_keys.py``) measure against it; it imports nothing of
the package.
"""

from __future__ import annotations

import os
import resource

#: The share of the machine's memory one run may plan to use: the rest is left to the
#: operating system, the Python heap and JAX's own buffers, which the estimates leave out.
MEMORY_FRACTION = 0.5
#: The machine's memory where the platform cannot say (no ``os.sysconf``: Windows).
FALLBACK_MEMORY_BYTES = 8 * 2**30
#: The environment variable that overrides the machine's memory (bytes), for tests.
MEMORY_ENV = "ATTNLAB_MEMORY_BYTES"


def machine_memory_bytes() -> int:
    """The memory this process may use, in bytes: the machine's (``ATTNLAB_MEMORY_BYTES``
    if set to a positive integer, else ``os.sysconf('SC_PAGE_SIZE') *
    os.sysconf('SC_PHYS_PAGES')``, else, a platform without them,
    ``FALLBACK_MEMORY_BYTES``), or the room ``limit_room_bytes`` leaves where smaller."""
    given = os.environ.get(MEMORY_ENV, "").strip()
    if given.isdigit() and int(given) > 0:
        total = int(given)
    else:
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (AttributeError, ValueError, OSError):
            total = FALLBACK_MEMORY_BYTES
        total = total if total > 0 else FALLBACK_MEMORY_BYTES
    room = limit_room_bytes()
    return total if room is None else max(min(total, room), 1)


#: The process limits on memory read (``resource`` names), with the field of
#: ``/proc/self/statm`` (pages) that counts what the process already holds against each:
#: its whole address space (``ulimit -v``) and its data and stack (``ulimit -d``; since
#: Linux 4.7 private mappings too).
LIMITS = (("RLIMIT_AS", 0), ("RLIMIT_DATA", 5))


def limit_room_bytes() -> int | None:
    """The room the process's tightest memory limit (``LIMITS``' soft limits, where set)
    leaves: the limit less what the process holds of its kind already
    (``/proc/self/statm``; nothing where that cannot be read); None where no limit is set
    or the platform has none."""
    try:
        held = [int(n) * os.sysconf("SC_PAGE_SIZE") for n in _read_statm().split()]
    except (OSError, ValueError, AttributeError):
        held = []
    rooms = []
    for name, field in LIMITS:
        try:
            soft, _ = resource.getrlimit(getattr(resource, name))
        except (AttributeError, ValueError, OSError):
            continue
        if soft != resource.RLIM_INFINITY and soft >= 0:
            rooms.append(soft - (held[field] if field < len(held) else 0))
    return min(rooms, default=None)


def _read_statm() -> str:
    """``/proc/self/statm``: the process's sizes in pages (Linux)."""
    with open("/proc/self/statm", encoding="ascii") as handle:
        return handle.read()


def memory_budget_bytes(total: int | None = None) -> int:
    """``MEMORY_FRACTION`` of ``total`` (default: ``machine_memory_bytes()``), in bytes."""
    return int(MEMORY_FRACTION * (machine_memory_bytes() if total is None else total))
