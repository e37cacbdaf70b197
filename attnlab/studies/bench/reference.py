"""The recall step before the speed-ups, the baseline of ``train_step_vs_reference``: each
step's batch drawn inside the step (``stream_batch``), each gather's table gradient by
autodiff of a one-hot product (``one_hot_rows``) and JAX's rolled threefry loop
(``rolled_threefry``)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from unittest import mock

import jax

from attnlab.core.prng import rolled_threefry
from attnlab.core.temperature import MECHANISMS
from attnlab.recall import model as recall_model
from attnlab.recall.config import RecallConfig, make_model
from attnlab.recall.step import recall_optimizer, train_step
from attnlab.recall.task import stream_batch


def one_hot_rows(table: jax.Array, tokens: jax.Array) -> jax.Array:
    """``table[tokens]`` as ``one_hot(tokens, n) @ table`` under plain autodiff (the gather
    before commit 57be4c8): the same forward, the same gradient sum as a dense product."""
    return jax.nn.one_hot(tokens, table.shape[0], dtype=table.dtype) @ table


def autodiff_gathers() -> AbstractContextManager:
    """``attnlab.recall.model._rows`` is ``one_hot_rows`` inside the block (looked up when
    traced: compile inside, call after). Process-wide: not thread-safe."""
    return mock.patch.object(recall_model, "_rows", one_hot_rows)


def reference_chunk(config: RecallConfig, state, data_key: jax.Array, steps: jax.Array):
    """The compiled program ``(state, data_key, steps)`` of one seed's chunk before the
    speed-ups: each step's batch drawn inside it (``stream_batch``), ``autodiff_gathers``
    and JAX's rolled threefry loop (``rolled_threefry``)."""
    model = make_model(config, MECHANISMS["scaled"])
    optimizer = recall_optimizer(config.lr)

    def chunk(s, key, steps):
        def step(s, t):
            batch = stream_batch(key, t, config.batch_size, config.task)
            return train_step(model, optimizer, s, batch)

        return jax.lax.scan(step, s, steps)

    with rolled_threefry(), autodiff_gathers():
        return jax.jit(chunk).lower(state, data_key, steps).compile()
