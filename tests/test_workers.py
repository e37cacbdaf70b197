"""attnlab.harness.workers: pieces run here or in worker processes give the same results,
in the order given, with every unit of progress reported."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlab.harness.workers import Piece, run_pieces


def noisy_sum(seed: int, n: int, on_progress=None) -> np.ndarray:
    """A small JAX computation whose bits a worker must reproduce."""
    x = jax.random.normal(jax.random.key(seed), (n, 16))
    if on_progress is not None:
        on_progress(n)
    return np.asarray(jnp.sum(jnp.tanh(x) @ x.T, axis=0))


def fails(on_progress=None):
    raise ValueError("piece failed: the message travels back")


PIECES = [Piece(noisy_sum, (seed, n), units=n, cost=n) for seed, n in [(0, 8), (1, 64), (2, 16)]]


def test_pieces_run_here_in_order_with_progress():
    seen = []
    out = run_pieces(PIECES, jobs=1, on_progress=seen.append)
    assert [len(x) for x in out] == [8, 64, 16]
    assert seen == [8, 64, 16]


def test_workers_give_the_same_bits_in_the_given_order():
    """Two spawned workers, costliest first: each result bit-identical to running here
    (the same program on the same inputs), returned in the order of the pieces."""
    here = run_pieces(PIECES, jobs=1)
    seen = []
    there = run_pieces(PIECES, jobs=2, on_progress=seen.append)
    for a, b in zip(here, there, strict=True):
        assert a.tobytes() == b.tobytes()
    assert sorted(seen) == [8, 16, 64]


def test_a_workers_error_is_raised_here():
    with pytest.raises(ValueError, match="the message travels back"):
        run_pieces([PIECES[0], Piece(fails, ())], jobs=2)


def test_jobs_must_be_positive():
    with pytest.raises(ValueError, match="jobs must be >= 1"):
        run_pieces(PIECES, jobs=0)
