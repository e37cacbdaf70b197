"""Tests of attnlab.core.softmax_stats: Jacobian, its Frobenius norm, entropy, max weight."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlab import entropy, jacobian_frobenius_norm, max_weight, softmax_jacobian

FUNCS = [entropy, max_weight, softmax_jacobian, jacobian_frobenius_norm]
N = 7  # one row length and few batch shapes throughout: eager XLA compiles stay few


# Test data comes from explicitly seeded numpy Generators (deterministic, no global state):
# eager jax.random would spend seconds compiling threefry for every new shape.
def softmax_rows(seed, shape, std=1.0):
    """float32 softmax rows of normal logits with standard deviation ``std``."""
    z = std * np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return z, np.asarray(jax.nn.softmax(z, axis=-1))


def one_hot(i, n=N):
    return np.eye(n, dtype=np.float32)[i]


def uniform(n=N):
    return np.full(n, 1.0 / n, np.float32)


def explicit_frobenius64(p):
    """||diag(p) - p p^T||_F per row, from the explicit matrix in float64 (chunked)."""
    p = np.asarray(p, np.float64).reshape(-1, np.shape(p)[-1])
    n = p.shape[-1]
    out = np.empty(p.shape[0])
    for s in range(0, p.shape[0], 128):
        c = p[s : s + 128]
        J = -c[:, :, None] * c[:, None, :]
        J[:, np.arange(n), np.arange(n)] += c
        out[s : s + 128] = np.sqrt(np.einsum("rij,rij->r", J, J))
    return out


def naive_closed_form32(p):
    """sqrt(s2 - 2 s3 + s2^2) in float32: the cancelling closed form."""
    p = np.asarray(p, np.float32)
    s2 = np.sum(p**2, -1)
    s3 = np.sum(p**3, -1)
    with np.errstate(invalid="ignore"):
        return np.sqrt(s2 - np.float32(2.0) * s3 + s2**2)


@pytest.fixture(scope="module")
def saturated_rows():
    """Softmax rows of unscaled attention, logits K q with standard normal q and K.

    d_k in {128, 256, 512, 1024}, 256 keys, 512 queries per d_k: 2048 float32 rows whose
    logits have standard deviation sqrt(d_k) = 11 .. 32, so many rows are near one-hot.
    Returns the rows and the Frobenius norms of the explicit Jacobians of the float64
    softmax of the same float32 logits (the float32 rows do not sum to 1 exactly, so the
    float64 Jacobian of the float32 rows is not the reference).
    """
    logits = []
    for d in (128, 256, 512, 1024):
        rng = np.random.default_rng(d)
        K = rng.standard_normal((256, d), np.float32)
        Q = rng.standard_normal((512, d), np.float32)
        logits.append(Q @ K.T)
    z = np.concatenate(logits)
    p = np.asarray(jax.nn.softmax(z, axis=-1))
    assert p.shape == (2048, 256) and p.dtype == np.float32
    z64 = z.astype(np.float64)
    e = np.exp(z64 - z64.max(-1, keepdims=True))
    return p, explicit_frobenius64(e / e.sum(-1, keepdims=True))


# --------------------------------------------------------------------------- Jacobian


def test_softmax_jacobian_matches_jacrev():
    jac = jax.jit(jax.jacrev(jax.nn.softmax))
    for seed, std in [(0, 1.0), (1, 3.0), (2, 10.0)]:
        z, p = softmax_rows(seed, (N,), std)
        J = softmax_jacobian(p)
        assert J.shape == (N, N)
        np.testing.assert_allclose(J, jac(z), rtol=1e-5, atol=1e-7)
    # A single key: p = [1], the Jacobian is [[0]].
    np.testing.assert_array_equal(softmax_jacobian(np.ones(1, np.float32)), [[0.0]])


def test_softmax_jacobian_batched_matches_vmapped_jacrev():
    z, p = softmax_rows(3, (4, 3, N), 2.0)
    J = np.asarray(softmax_jacobian(p))
    ref = jax.jit(jax.vmap(jax.vmap(jax.jacrev(jax.nn.softmax))))(z)
    assert J.shape == (4, 3, N, N)
    np.testing.assert_allclose(J, ref, rtol=1e-5, atol=1e-7)
    # Symmetric, rows sum to zero, zero at one-hot.
    np.testing.assert_array_equal(J, np.swapaxes(J, -1, -2))
    np.testing.assert_allclose(np.sum(J, -1), 0.0, atol=1e-6)
    assert np.all(np.asarray(softmax_jacobian(one_hot(1))) == 0.0)


# --------------------------------------------------------------------------- Frobenius norm


def test_frobenius_norm_random_rows():
    _, p = softmax_rows(4, (4, 3, N), 2.0)
    got = np.asarray(jacobian_frobenius_norm(p), np.float64)
    assert got.shape == (4, 3)
    np.testing.assert_allclose(got.ravel(), explicit_frobenius64(p), rtol=1e-5)
    # Same as the norm of the materialised float32 Jacobian.
    J = np.asarray(softmax_jacobian(p))
    np.testing.assert_allclose(got, np.linalg.norm(J, axis=(-2, -1)), rtol=1e-5, atol=1e-7)


def test_frobenius_norm_special_rows():
    n = N
    np.testing.assert_allclose(
        jacobian_frobenius_norm(uniform(n)), math.sqrt(1 / n - 1 / n**2), rtol=1e-6
    )
    assert jacobian_frobenius_norm(one_hot(1)) == 0.0
    assert jacobian_frobenius_norm(np.zeros(N, np.float32)) == 0.0  # a fully masked row
    # Ties at the argmax (two equal maxima) and exact zeros.
    p = np.array([0.4, 0.1, 0.4, 0.05, 0.05, 0.0, 0.0], np.float32)
    np.testing.assert_allclose(jacobian_frobenius_norm(p), explicit_frobenius64(p)[0], rtol=1e-6)


def test_frobenius_norm_saturated_rows_accurate(saturated_rows):
    p, ref = saturated_rows
    got = np.asarray(jacobian_frobenius_norm(p), np.float64)
    assert got.shape == (2048,)
    assert not np.any(np.isnan(got)) and np.all(np.isfinite(got)) and np.all(got >= 0.0)
    checked = ref > 1e-5
    # The data is saturated (many rows put > 99% on one key), and most rows are checked.
    assert np.mean(np.max(p, -1) > 0.99) > 0.4
    assert checked.sum() >= 1000
    rel = np.abs(got[checked] - ref[checked]) / ref[checked]
    assert rel.max() <= 2e-3, rel.max()
    # Rows below the threshold are tiny too.
    np.testing.assert_allclose(got[~checked], ref[~checked], rtol=0, atol=1e-6)


@pytest.mark.parametrize("spread", [5.0, 10.0, 20.0, 30.0, 40.0])
def test_frobenius_norm_relative_precision_up_to_spread_40(spread):
    """Rows whose logits span ``spread`` (max - min): the norm of the float32 softmax has
    full relative precision against float64 arithmetic on the same float32 logits, down
    to norms ~1e-10 (spread 40), where ``1 - p_max`` would have lost every digit."""
    z = np.random.default_rng(int(spread)).uniform(size=(512, 16))
    z = (z - z.min(-1, keepdims=True)) / np.ptp(z, -1, keepdims=True) * spread
    z32 = z.astype(np.float32)
    p32 = np.asarray(jax.nn.softmax(z32, axis=-1), np.float64)
    z64 = z32.astype(np.float64)
    e = np.exp(z64 - z64.max(-1, keepdims=True))
    p64 = e / e.sum(-1, keepdims=True)
    ref = explicit_frobenius64(p64)
    got = np.asarray(jacobian_frobenius_norm(p32.astype(np.float32)), np.float64)
    # Bound: the norm's relative condition number with respect to componentwise relative
    # perturbations of p is <= 2 (every squared term is a product of <= 4 weights, then a
    # square root), plus the rounding of O(n) float32 sums.
    weights_rel = np.max(np.abs(p32 - p64) / p64)
    bound = 2 * weights_rel + 4 * 16 * np.finfo(np.float32).eps
    assert np.max(np.abs(got - ref) / ref) <= bound


def test_naive_closed_form_fails_on_saturated_rows(saturated_rows):
    """The saturated data is hard: the float32 closed form breaks on it."""
    p, ref = saturated_rows
    naive = naive_closed_form32(p).astype(np.float64)
    checked = ref > 1e-5
    with np.errstate(invalid="ignore"):
        rel = np.abs(naive - ref) / ref
    fails = checked & ~(rel <= 2e-3)  # NaN or relative error above 2e-3
    assert fails.sum() > 0
    # ... while our function is accurate on every row where the naive one fails.
    got = np.asarray(jacobian_frobenius_norm(p), np.float64)
    np.testing.assert_allclose(got[fails], ref[fails], rtol=2e-3)


# --------------------------------------------------------------------------- entropy


@pytest.mark.parametrize("n", [1, N, 256])
def test_entropy_uniform_and_one_hot(n):
    np.testing.assert_allclose(entropy(uniform(n)), math.log(n), rtol=1e-6, atol=1e-6)
    h = entropy(one_hot(n - 1, n))
    assert h == 0.0 and np.isfinite(h)


def test_entropy_with_exact_zeros():
    q = np.array([0.2, 0.3, 0.5], np.float32)
    p = np.array([0.0, 0.2, 0.0, 0.3, 0.5, 0.0, 0.0], np.float32)
    h = entropy(p)
    assert np.isfinite(h)
    np.testing.assert_allclose(h, entropy(q), rtol=1e-6)
    np.testing.assert_allclose(h, -np.sum(np.log(q) * q), rtol=1e-6)
    assert entropy(np.zeros(N, np.float32)) == 0.0  # fully masked row

    g = np.asarray(jax.grad(entropy)(p))
    assert np.all(np.isfinite(g))
    pos = p > 0
    np.testing.assert_allclose(g[pos], -(np.log(p[pos]) + 1.0), rtol=1e-6)
    assert np.all(g[~pos] == 0.0)
    # The naive formula is NaN at exact zeros, so the test above is not vacuous.
    naive = jax.jit(lambda p: -jnp.sum(p * jnp.log(p)))
    assert np.isnan(naive(p)) and np.any(np.isnan(jax.jit(jax.grad(naive))(p)))


def test_entropy_matches_reference_on_softmax_rows():
    _, p = softmax_rows(5, (4, 3, N), 3.0)
    p64 = p.astype(np.float64)
    np.testing.assert_allclose(entropy(p), -np.sum(p64 * np.log(p64), -1), rtol=1e-5, atol=1e-6)


def test_max_weight_basics():
    np.testing.assert_allclose(max_weight(uniform()), 1.0 / N)
    assert max_weight(one_hot(2)) == 1.0
    p = np.array(
        [[0.1, 0.5, 0.2, 0.1, 0.1, 0.0, 0.0], [0.3, 0.3, 0.2, 0.0, 0.0, 0.1, 0.1]], np.float32
    )
    np.testing.assert_array_equal(max_weight(p), np.array([0.5, 0.3], np.float32))


def test_leading_batch_dims_shapes():
    _, p = softmax_rows(7, (4, 3, N))
    for lead in [(4, 3), (3,), ()]:
        x = p[(0,) * (2 - len(lead))]
        assert x.shape == (*lead, N)
        assert entropy(x).shape == lead
        assert max_weight(x).shape == lead
        assert jacobian_frobenius_norm(x).shape == lead
        assert softmax_jacobian(x).shape == (*lead, N, N)
    # Each row is reduced independently: batched results equal the per-row results.
    flat = p.reshape(12, N)
    for f in FUNCS:
        batched = np.asarray(f(p))
        rows = np.stack([np.asarray(f(r)) for r in flat])
        np.testing.assert_allclose(batched.reshape(rows.shape), rows, rtol=1e-6, atol=1e-7)


# --------------------------------------------------------------------------- jit / vmap


@pytest.mark.parametrize("f", FUNCS, ids=lambda f: f.__name__)
def test_jit_and_vmap_match_eager(f):
    _, p = softmax_rows(8, (4, 3, N), 4.0)
    eager = np.asarray(f(p))
    np.testing.assert_allclose(jax.jit(f)(p), eager, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(jax.vmap(f)(p), eager, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(
        jax.jit(jax.vmap(f, in_axes=1, out_axes=1))(p), eager, rtol=1e-6, atol=1e-7
    )
