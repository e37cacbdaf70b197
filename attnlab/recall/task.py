"""The associative-recall task of article 004, "A Training Demo".

A sequence holds ``pairs`` (16) key-value pairs: distinct keys drawn from ``n_key_tokens``
(32) key tokens, each with a value drawn uniformly from ``n_value_tokens`` (32) value
tokens. It then names one of its keys, and the target is that key's value; chance accuracy
is ``1 / n_value_tokens`` (3.125%).

Data are generated on the fly from explicit keys: batch ``t`` of a stream is drawn from
``fold_in(stream_key, t)``, so any two runs that share the stream key see the same batches
in the same order, and the held-out set comes from a key the training stream never uses.
Training draws a chunk of steps at once (``stream_batches``), in a compiled program of its
own: the input pipeline apart from the training step (``attnlab.recall.step``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax
import numpy as np


@dataclass(frozen=True)
class RecallTask:
    """Sizes of the task; the defaults are the article's."""

    pairs: int = 16
    n_key_tokens: int = 32
    n_value_tokens: int = 32


class Batch(NamedTuple):
    """A batch of recall sequences.

    ``keys`` and ``values`` are ``[B, pairs]`` token ids (keys distinct within a sequence),
    ``query`` is the ``[B]`` key token asked for, ``target`` its ``[B]`` value token.
    """

    keys: jax.Array
    values: jax.Array
    query: jax.Array
    target: jax.Array


def sample_sequence(key: jax.Array, task: RecallTask) -> Batch:
    """One sequence (unbatched fields): distinct keys, uniform values, one key asked for."""
    k_keys, k_values, k_query = jax.random.split(key, 3)
    keys = jax.random.choice(k_keys, task.n_key_tokens, (task.pairs,), replace=False)
    values = jax.random.randint(k_values, (task.pairs,), 0, task.n_value_tokens)
    asked = jax.random.randint(k_query, (), 0, task.pairs)
    return Batch(keys, values, keys[asked], values[asked])


def sample_batch(key: jax.Array, batch_size: int, task: RecallTask) -> Batch:
    """``batch_size`` independent sequences."""
    return jax.vmap(lambda k: sample_sequence(k, task))(jax.random.split(key, batch_size))


def example_batch(task: RecallTask) -> Batch:
    """One all-zero sequence with ``sample_batch``'s shapes and dtypes (numpy, nothing
    compiled): the input ``model.init`` traces the model with, whose parameters depend on
    the input's shapes only."""
    shapes = jax.eval_shape(lambda: sample_batch(jax.random.key(0), 1, task))
    return Batch(*(np.zeros(s.shape, s.dtype) for s in shapes))


def stream_batch(
    stream_key: jax.Array, step: jax.Array, batch_size: int, task: RecallTask
) -> Batch:
    """Batch number ``step`` of the training stream ``stream_key``."""
    return sample_batch(jax.random.fold_in(stream_key, step), batch_size, task)


def stream_batches(
    stream_key: jax.Array, steps: jax.Array, batch_size: int, task: RecallTask
) -> Batch:
    """Batches ``steps`` of the stream drawn together (``stream_batch`` vmapped over the
    steps; fields ``[len(steps), batch_size, ...]``): the same bits as drawing each alone
    (the draws are integers from the same keys), under the named scope ``data``."""
    with jax.named_scope("data"):
        return jax.vmap(lambda t: stream_batch(stream_key, t, batch_size, task))(steps)
