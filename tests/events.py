"""Waiting on events, not clocks, for the tests that signal a process or race a thread
(issue 72: a test that sleeps a fixed time and then acts fails when the machine is busy).

A wait ends when its event happens; ``EVENT_DEADLINE_S`` only turns a hang into a failure
and never decides a pass: it is far beyond what any event here takes on a loaded machine.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

#: How long a wait may last before the test fails as hung (a bound on a hang, not a timing).
EVENT_DEADLINE_S = 300.0
#: How often a wait looks again: short, so a test is not slowed by it.
POLL_S = 0.01


def wait_for(event: Callable[[], bool], deadline_s: float = EVENT_DEADLINE_S) -> None:
    """Return once ``event()`` is true; AssertionError if it is still false after
    ``deadline_s`` seconds."""
    deadline = time.monotonic() + deadline_s
    while not event():
        assert time.monotonic() < deadline, f"the event did not happen within {deadline_s:g} s"
        time.sleep(POLL_S)


def catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler installed for ``signum`` (Linux's
    ``/proc/<pid>/status``, ``SigCgt``: a bit mask, bit ``signum - 1``). False once the
    process is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
    except (FileNotFoundError, ProcessLookupError):
        return False
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(mask, 16) >> (signum - 1) & 1)


#: Tests that wait for a handler to be installed run where ``/proc`` shows it.
HAS_PROC_SIGNALS = Path("/proc/self/status").is_file()


@contextlib.contextmanager
def fifo_with_a_writer(path: Path) -> Iterator[Path]:
    """A FIFO at ``path`` and a thread that writes ``x`` into it once a reader opens it: code
    that opens it to read gets ``x`` rather than waiting for ever (so a test of code that
    should refuse it fails rather than hangs); the writer is released and joined at the
    end whoever read."""
    os.mkfifo(path)

    def write() -> None:
        try:
            with open(path, "wb") as handle:
                handle.write(b"x")
        except OSError:  # the reader closed before the write
            pass

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        yield path
    finally:
        release = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # the writer's open returns
        writer.join()
        os.close(release)
