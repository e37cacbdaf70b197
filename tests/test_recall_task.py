"""Tests of attnlab.recall.task: the recall sequences and their keyed data streams."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlab.recall.config import seed_keys
from attnlab.recall.task import (
    Batch,
    RecallTask,
    sample_batch,
    sample_sequence,
    stream_batch,
)

DEFAULT = RecallTask()
TASKS = [
    DEFAULT,
    RecallTask(pairs=8, n_key_tokens=8, n_value_tokens=3),  # keys are a permutation
    RecallTask(pairs=3, n_key_tokens=50, n_value_tokens=7),
]
BATCH = 512


class Draws(NamedTuple):
    """What ``draw(key, step)`` gives: ``sample_batch(key, BATCH, task)`` for each of
    ``TASKS``, ``stream_batch(key, step, BATCH, DEFAULT)``, ``sample_batch(fold_in(key, step),
    BATCH, DEFAULT)`` and ``sample_sequence(key, DEFAULT)``."""

    tasks: tuple[Batch, ...]
    stream: Batch
    folded: Batch
    sequence: Batch


@jax.jit
def draw(key: jax.Array, step: int) -> Draws:
    """Every draw the tests read, from one compiled program: eager jax.random compiles
    threefry op by op, and a program per sampler costs nearly as much as this one."""
    return Draws(
        tuple(sample_batch(key, BATCH, task) for task in TASKS),
        stream_batch(key, step, BATCH, DEFAULT),
        sample_batch(jax.random.fold_in(key, step), BATCH, DEFAULT),
        sample_sequence(key, DEFAULT),
    )


def sample(key: jax.Array) -> Batch:
    """``sample_batch(key, BATCH, DEFAULT)``."""
    return draw(key, 0).tasks[0]


def stream(key: jax.Array, step: int) -> Batch:
    """``stream_batch(key, step, BATCH, DEFAULT)``."""
    return draw(key, step).stream


def as_numpy(batch: Batch) -> Batch:
    return Batch(*(np.asarray(x) for x in batch))


def assert_valid(batch: Batch, task: RecallTask, batch_size: int) -> None:
    keys, values, query, target = as_numpy(batch)
    assert keys.shape == values.shape == (batch_size, task.pairs)
    assert query.shape == target.shape == (batch_size,)
    for x in (keys, values, query, target):
        assert np.issubdtype(x.dtype, np.integer)
    assert keys.min() >= 0 and keys.max() < task.n_key_tokens
    assert values.min() >= 0 and values.max() < task.n_value_tokens
    # Keys are distinct within every sequence.
    sorted_keys = np.sort(keys, axis=1)
    assert (np.diff(sorted_keys, axis=1) > 0).all()
    # The query is one of the sequence's keys (exactly one, as keys are distinct) ...
    hits = keys == query[:, None]
    assert (hits.sum(axis=1) == 1).all()
    # ... and the target is that key's value.
    position = hits.argmax(axis=1)
    np.testing.assert_array_equal(target, values[np.arange(batch_size), position])


@pytest.mark.parametrize(
    "i", range(len(TASKS)), ids=[f"{t.pairs}-{t.n_key_tokens}-{t.n_value_tokens}" for t in TASKS]
)
def test_sample_batch_is_valid(i):
    assert_valid(draw(jax.random.key(0), 0).tasks[i], TASKS[i], BATCH)


def test_stream_batch_is_valid():
    for step in (0, 1, 1000):
        assert_valid(stream(jax.random.key(3), step), DEFAULT, BATCH)


def test_sample_sequence_unbatched():
    seq = as_numpy(draw(jax.random.key(1), 0).sequence)
    assert seq.keys.shape == seq.values.shape == (DEFAULT.pairs,)
    assert seq.query.shape == seq.target.shape == ()
    batched = Batch(*(x[None] for x in seq))
    assert_valid(batched, DEFAULT, 1)


def test_batch_covers_tokens_and_positions():
    """Over many sequences every key token, value token and asked position occurs, so the
    sampler is not stuck on a subset (a wrong range would fail the validity checks)."""
    keys, values, query, _ = as_numpy(sample(jax.random.key(2)))
    assert set(np.unique(keys)) == set(range(DEFAULT.n_key_tokens))
    assert set(np.unique(values)) == set(range(DEFAULT.n_value_tokens))
    position = (keys == query[:, None]).argmax(axis=1)
    assert set(np.unique(position)) == set(range(DEFAULT.pairs))
    # Values are uniform and independent of the key: about 1/32 per token.
    counts = np.bincount(values.ravel(), minlength=DEFAULT.n_value_tokens)
    expected = values.size / DEFAULT.n_value_tokens
    # 6 SE: a count's SE is sqrt(expected (1 - 1/32)) < sqrt(expected); with 32 counts a
    # 6-SE deviation has probability < 32 * 2e-9.
    assert np.abs(counts - expected).max() < 6 * np.sqrt(expected)


def test_sequences_in_a_batch_differ():
    keys = np.asarray(sample(jax.random.key(4)).keys)
    assert len({tuple(row) for row in keys}) == BATCH


def assert_batches_equal(a: Batch, b: Batch) -> None:
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def batches_differ(a: Batch, b: Batch) -> bool:
    return not np.array_equal(np.asarray(a.keys), np.asarray(b.keys)) or not np.array_equal(
        np.asarray(a.values), np.asarray(b.values)
    )


def test_stream_batch_deterministic_per_key_and_step():
    key = jax.random.key(5)
    assert_batches_equal(stream(key, 7), stream(key, 7))
    # A freshly built equal key gives the same batch.
    assert_batches_equal(stream(jax.random.key(5), 7), stream(key, 7))


def test_stream_batch_is_fold_in_of_step():
    key = jax.random.key(6)
    for step in (0, 11):
        drawn = draw(key, step)
        assert_batches_equal(drawn.stream, drawn.folded)


def test_stream_batch_differs_across_steps_and_keys():
    key = jax.random.key(8)
    batches = [stream(key, t) for t in range(4)]
    for i in range(len(batches)):
        for j in range(i + 1, len(batches)):
            assert batches_differ(batches[i], batches[j]), (i, j)
    assert batches_differ(stream(jax.random.key(9), 0), batches[0])


def key_bits(key: jax.Array) -> tuple[int, ...]:
    return tuple(np.asarray(jax.random.key_data(key)).ravel().tolist())


def test_seed_keys_are_distinct_streams():
    keys = [key_bits(k) for s in (0, 1, 2) for k in seed_keys(s)]
    assert len(set(keys)) == len(keys)
    # Deterministic in the seed.
    assert [key_bits(k) for k in seed_keys(1)] == [key_bits(k) for k in seed_keys(1)]


@jax.jit
def stream_key_bits(data_key: jax.Array) -> jax.Array:
    """The raw bits of the batch keys of steps 0 .. 9999 of a stream."""
    fold = jax.vmap(lambda t: jax.random.key_data(jax.random.fold_in(data_key, t)))
    return fold(jnp.arange(10_000))


@pytest.mark.parametrize("seed", [0, 1])
def test_eval_stream_differs_from_data_stream(seed):
    keys = seed_keys(seed)
    held_out = sample(keys.eval)
    for t in range(3):
        assert batches_differ(held_out, stream(keys.data, t))
    # Nor is the held-out key the key of any of the stream's first 10 000 batches.
    eval_bits = np.asarray(key_bits(keys.eval))
    assert not (np.asarray(stream_key_bits(keys.data)) == eval_bits).all(axis=-1).any()
