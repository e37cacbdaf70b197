"""Chunked, sharded vmap (attnlab.core.parallel)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlab.core.parallel import chunked_map, device_count, pad_to_multiple

N = 10
#: One float32 rounding, 2^-23: twice the unit roundoff (n EPS bounds n roundings).
EPS = float(np.finfo(np.float32).eps)
#: XLA's float32 sin is accurate to a few ulp; we allow 4 eps.
ULPS = 4


def _row_stats(x: jax.Array) -> jax.Array:
    return jnp.stack([jnp.sum(jnp.sin(x)), jnp.max(x), x[0] * 2.0 + 1.0])


def _row_stats_bound(items) -> np.ndarray:
    """``[N, 3]`` bound on the difference of two float32 evaluations of ``_row_stats``
    (other batch shapes): the 5-term sum of sines (4 roundings and sin's ULPS, of the sum
    of |sin|), the max exactly, and 2 x + 1 (one rounding)."""
    x = np.asarray(items, np.float64)
    sines = (4 + ULPS) * EPS * np.sum(np.abs(np.sin(x)), -1)
    return 2 * np.stack([sines, np.zeros(len(x)), EPS * np.abs(2 * x[:, 0] + 1)], -1)


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
    assert (np.abs(out.astype(np.float64) - expected) <= _row_stats_bound(items)).all()
    # on_chunk sees the real (unpadded) number of items of each chunk.
    chunk = max(device_count(), -(-chunk_size // device_count()) * device_count())
    assert sum(finished) == N
    assert finished == [min(chunk, N - s) for s in range(0, N, chunk)]


def test_chunked_map_with_prng_keys_is_chunk_invariant():
    keys = jax.random.split(jax.random.key(1), N)

    def draw(key):
        return jax.random.bits(key, (4,))

    # Exact: random bits are integer arithmetic, whatever the chunking.
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
    # Exact: one correctly rounded product or sum of the same operands per element.
    np.testing.assert_array_equal(out["scaled"], expected["scaled"])
    np.testing.assert_array_equal(out["pair"][0], expected["pair"][0])
    # Two float32 5-term sums: 4 EPS of sum |x| each.
    bound = 2 * 4 * EPS * np.sum(np.abs(np.asarray(items, np.float64)), -1)
    err = np.abs(np.asarray(out["pair"][1], np.float64) - np.asarray(expected["pair"][1]))
    assert (err <= bound).all()
    assert out["scaled"].shape == (N, 5) and out["pair"][0].shape == (N,)


def test_chunked_map_single_item(items):
    out = chunked_map(_row_stats, items[:1], 4)
    err = np.abs(out.astype(np.float64) - np.asarray(jax.vmap(_row_stats)(items[:1])))
    assert (err <= _row_stats_bound(items[:1])).all()


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
