"""Chunked, sharded vmap (attnlab.core.parallel)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlab.core.parallel import chunked_map, device_count, pad_to_multiple

N = 10


def _row_stats(x: jax.Array) -> jax.Array:
    return jnp.stack([jnp.sum(jnp.sin(x)), jnp.max(x), x[0] * 2.0 + 1.0])


@pytest.fixture(scope="module")
def items() -> jax.Array:
    return jax.random.normal(jax.random.key(0), (N, 5))


@pytest.mark.parametrize("chunk_size", [1, 3, 10, 16])  # 3 and 16 do not divide N = 10
def test_chunked_map_equals_vmap(items, chunk_size):
    expected = np.asarray(jax.vmap(_row_stats)(items))
    finished = []
    out = chunked_map(_row_stats, items, chunk_size, on_chunk=finished.append)
    assert isinstance(out, np.ndarray)
    assert out.shape == (N, 3) and out.dtype == np.float32
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)
    # on_chunk sees the real (unpadded) number of items of each chunk.
    chunk = max(device_count(), -(-chunk_size // device_count()) * device_count())
    assert sum(finished) == N
    assert finished == [min(chunk, N - s) for s in range(0, N, chunk)]


def test_chunked_map_with_prng_keys_is_chunk_invariant():
    keys = jax.random.split(jax.random.key(1), N)

    def draw(key):
        return jax.random.normal(key, (4,))

    np.testing.assert_array_equal(chunked_map(draw, keys, 3), np.asarray(jax.vmap(draw)(keys)))


def test_chunked_map_tuple_items_and_outputs(items):
    scales = jnp.arange(N, dtype=jnp.float32)

    def fn(item):
        x, c = item
        return {"scaled": x * c, "pair": (c + 1.0, jnp.sum(x))}

    out = chunked_map(fn, (items, scales), 4)
    expected = jax.vmap(fn)((items, scales))
    assert set(out) == {"scaled", "pair"}
    assert isinstance(out["pair"], tuple)
    np.testing.assert_allclose(out["scaled"], expected["scaled"], rtol=1e-6)
    np.testing.assert_array_equal(out["pair"][0], expected["pair"][0])
    np.testing.assert_allclose(out["pair"][1], expected["pair"][1], rtol=1e-6, atol=1e-6)
    assert out["scaled"].shape == (N, 5) and out["pair"][0].shape == (N,)


def test_chunked_map_single_item(items):
    out = chunked_map(_row_stats, items[:1], 4)
    np.testing.assert_allclose(out, np.asarray(jax.vmap(_row_stats)(items[:1])), rtol=1e-6)


def test_pad_to_multiple_repeats_last_item():
    tree = (jnp.arange(5), jnp.arange(10.0).reshape(5, 2))
    (a, b), n = pad_to_multiple(tree, 4)
    assert n == 5
    np.testing.assert_array_equal(a, [0, 1, 2, 3, 4, 4, 4, 4])
    assert b.shape == (8, 2)
    np.testing.assert_array_equal(b[:5], tree[1])
    np.testing.assert_array_equal(b[5:], np.repeat(np.asarray(tree[1][-1:]), 3, axis=0))


@pytest.mark.parametrize(("length", "multiple"), [(4, 4), (6, 3), (1, 1), (3, 1)])
def test_pad_to_multiple_without_padding_returns_input(length, multiple):
    x = jnp.arange(length)
    padded, n = pad_to_multiple(x, multiple)
    assert n == length
    assert padded is x


@pytest.mark.parametrize(
    ("length", "multiple", "padded_length"), [(1, 4, 4), (5, 2, 6), (9, 8, 16)]
)
def test_pad_to_multiple_lengths(length, multiple, padded_length):
    padded, n = pad_to_multiple({"x": jnp.ones((length, 3))}, multiple)
    assert n == length
    assert padded["x"].shape == (padded_length, 3)
