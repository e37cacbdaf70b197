"""The signals that end a run: SIGINT (Ctrl-C), SIGTERM (a job scheduler, ``timeout``,
``kill``) and SIGHUP (a closed terminal), handled alike.

A script's run (``cli.entry_point``) installs ``raising_handlers``: the first such signal
raises ``Interrupted`` (a ``KeyboardInterrupt``, so every ``except KeyboardInterrupt`` and
``finally`` cleans up as for Ctrl-C) and the process exits ``128 + signum`` (130, 143, 129)
with one line; a second signal while it cleans up exits at once, after the callbacks of
``on_exit_now`` (a run's worker processes killed, ``attnlab.harness.workers``).
``deferred`` holds signals back during a few file moves that must not be cut in two
(``staging.staged_outputs``): they are recorded, the caller puts things back as they were,
then ``redeliver`` sends the first one again to whatever handler is in place.

Handlers can only be installed from the main thread; elsewhere these do nothing (a run
started in a worker thread keeps the process's handlers).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

#: The signals a run handles, by exit status ``128 + signum``.
HANDLED = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


class Interrupted(KeyboardInterrupt):
    """A run ended by the signal ``signum``; its exit status is ``128 + signum``."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def exit_status(err: KeyboardInterrupt) -> int:
    """``128 + signum`` of the signal behind ``err`` (a plain ``KeyboardInterrupt``: SIGINT)."""
    return 128 + getattr(err, "signum", signal.SIGINT)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


#: What a second signal does before the process exits at once (``on_exit_now``).
_AT_EXIT_NOW: list[Callable[[], None]] = []


@contextlib.contextmanager
def on_exit_now(callback: Callable[[], None]) -> Iterator[None]:
    """Within the block, a second signal (``_exit_now``) calls ``callback`` before the
    process exits: what must not outlive the process (its worker processes) goes first."""
    _AT_EXIT_NOW.append(callback)
    try:
        yield
    finally:
        _AT_EXIT_NOW.remove(callback)


def _exit_now(signum: int, frame: object) -> None:
    """A second signal while a run cleans up after the first: the ``on_exit_now``
    callbacks, one line, exit at once."""
    for callback in reversed(_AT_EXIT_NOW):
        with contextlib.suppress(Exception):
            callback()
    name = os.path.basename(sys.argv[0]) or "attnlab"
    os.write(2, f"{name}: interrupted again; exiting at once\n".encode())
    os._exit(128 + signum)


def _raise(signum: int, frame: object) -> None:
    """The first signal: later ones exit at once, this one raises ``Interrupted``."""
    for handled in HANDLED:
        signal.signal(handled, _exit_now)
    raise Interrupted(signum)


@contextlib.contextmanager
def raising_handlers() -> Iterator[None]:
    """Within the block, a handled signal raises ``Interrupted`` (a second one exits at
    once); the process's previous handlers are restored after it."""
    if not _in_main_thread():
        yield
        return
    previous = {s: signal.signal(s, _raise) for s in HANDLED}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def deferred() -> Iterator[list[int]]:
    """Within the block no handled signal interrupts: each one is appended to the yielded
    list instead, and the previous handlers are back after the block (``redeliver``)."""
    pending: list[int] = []
    if not _in_main_thread():
        yield pending
        return
    record: Callable[[int, object], None] = lambda signum, frame: pending.append(signum)  # noqa: E731
    previous = {s: signal.signal(s, record) for s in HANDLED}
    try:
        yield pending
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def redeliver(pending: list[int]) -> None:
    """Send the first signal ``deferred`` recorded, if any, to the handler now in place."""
    if pending:
        signal.raise_signal(pending[0])
