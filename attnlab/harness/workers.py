"""Independent pieces of one computation, run one after another or in worker processes.

A ``Piece`` is a call ``fn(*args, on_progress)`` of a module-level function (workers get it
by reference, so a user's mechanism travels as its reference string) that needs nothing
from the other pieces. ``run_pieces`` returns their results in the order given, whatever the
number of workers: a piece computes the same program on the same inputs in either case, so
its numbers do not depend on ``jobs`` (XLA on one CPU is deterministic for a given program).

With ``jobs > 1`` the pieces go to ``jobs`` processes started fresh (``spawn``: a forked JAX
process can deadlock), each configured as the script's (``cli.configure_jax``), the costliest
first so the cheap ones fill the gaps (longest-processing-time order); progress then moves
by a piece's ``units`` when it ends. With ``jobs == 1`` they run here, reporting progress as
they go.

The workers are outside the signal handling (``attnlab.harness.signals``): the parent alone
answers a signal. A worker ignores SIGINT (Ctrl-C reaches the whole process group) from its
first instruction: it starts with SIGINT blocked (``_spawning``: a blocked signal stays
blocked across ``exec``, so it holds through the interpreter's start and the import of the
script, which ``spawn`` repeats), and its initializer (``_start_worker``) ignores it, then
unblocks it. A worker dies with its parent, whatever ends the parent: on Linux the kernel
kills it when the parent ends (``PR_SET_PDEATHSIG``, SIGKILL, and a worker whose parent is
already gone exits); everywhere, a ``run_pieces`` that ends with an exception (Ctrl-C,
SIGTERM, a piece's error) kills its workers before it returns, and a second signal, which
exits at once (``signals.on_exit_now``), kills them before the process ends.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from attnlab.core.progress import Progress
from attnlab.harness import signals
from attnlab.harness.cli import configure_jax

#: ``prctl``'s option that sets the signal a process gets when its parent ends (Linux).
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Piece:
    """``fn(*args, on_progress)``; ``units``: the progress it reports in all; ``cost``: its
    expected running time in any unit shared by the pieces of one call (orders the work)."""

    fn: Callable[..., Any]
    args: tuple
    units: int = 0
    cost: float = 0.0


def _die_with_parent(parent: int) -> None:
    """Have the kernel send SIGKILL to this process when its parent ends (Linux
    ``prctl(PR_SET_PDEATHSIG)``; nothing elsewhere), and exit now where the parent
    ``parent`` has already ended (it cannot be told apart later)."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def _start_worker(parent: int) -> None:
    """A worker's initializer: SIGINT ignored (then unblocked: ``_spawning`` started the
    worker with it blocked, and a signal pending meanwhile is dropped), death with
    ``parent`` (``_die_with_parent``), and JAX configured as the script's."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    _die_with_parent(parent)
    configure_jax()


@contextlib.contextmanager
def _spawning() -> Iterator[None]:
    """Within the block this thread blocks SIGINT, so that a process it starts starts with
    SIGINT blocked (the mask survives ``exec``); the parent still answers a SIGINT, which
    reaches it when the block ends, if it was not answered by another thread before."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _kill_workers(pool: ProcessPoolExecutor) -> None:
    """SIGKILL every worker process of ``pool`` still running (a worker has no state to
    save: its results travel back to the parent, which writes the outputs)."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            process.kill()


def run_pieces(pieces: Sequence[Piece], jobs: int = 1, on_progress: Progress = None) -> list:
    """Each piece's result, in the order of ``pieces`` (module docstring)."""
    if jobs < 1:
        raise ValueError(f"run_pieces: jobs must be >= 1, got {jobs}")
    if jobs == 1 or len(pieces) < 2:
        return [piece.fn(*piece.args, on_progress) for piece in pieces]
    order = sorted(range(len(pieces)), key=lambda i: -pieces[i].cost)
    results: list = [None] * len(pieces)
    context = multiprocessing.get_context("spawn")
    workers = min(jobs, len(pieces))
    pool = ProcessPoolExecutor(
        workers, mp_context=context, initializer=_start_worker, initargs=(os.getpid(),)
    )
    try:
        with signals.on_exit_now(lambda: _kill_workers(pool)):
            with _spawning():  # the workers start as the first pieces are submitted
                running = {pool.submit(pieces[i].fn, *pieces[i].args, None): i for i in order}
            while running:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    i = running.pop(future)
                    results[i] = future.result()
                    if on_progress is not None:
                        on_progress(pieces[i].units)
    except BaseException:
        _kill_workers(pool)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return results
