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
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from attnlab.core.progress import Progress
from attnlab.harness.cli import configure_jax


@dataclass(frozen=True)
class Piece:
    """``fn(*args, on_progress)``; ``units``: the progress it reports in all; ``cost``: its
    expected running time in any unit shared by the pieces of one call (orders the work)."""

    fn: Callable[..., Any]
    args: tuple
    units: int = 0
    cost: float = 0.0


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
    with ProcessPoolExecutor(workers, mp_context=context, initializer=configure_jax) as pool:
        running = {pool.submit(pieces[i].fn, *pieces[i].args, None): i for i in order}
        try:
            while running:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    i = running.pop(future)
                    results[i] = future.result()
                    if on_progress is not None:
                        on_progress(pieces[i].units)
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    return results
