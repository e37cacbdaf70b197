"""Tests of attnlab.core.softmax_stats: Jacobian, its Frobenius norm, entropy, max weight,
and the attention sink (first-key weight, null weight, sink share) on hand-made matrices."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlab import entropy, jacobian_frobenius_norm, max_weight, softmax_jacobian
from attnlab.core.softmax_stats import SINK_THRESHOLD, first_key_weight, null_weight, sink_share

FUNCS = [entropy, max_weight, softmax_jacobian, jacobian_frobenius_norm]
N = 7  # one row length and few batch shapes throughout: eager XLA compiles stay few
#: One float32 rounding, 2^-23: twice the unit roundoff (n EPS bounds n roundings).
EPS = float(np.finfo(np.float32).eps)
TINY = float(np.finfo(np.float32).tiny)
#: XLA's float32 exp and log are accurate to a few ulp; we allow 4 eps each.
ULPS = 4
#: Relative error of jacobian_frobenius_norm on given float32 weights: the n-term sums of
#: non-negative terms (t, and the one under the root, which the root halves), one bit lost
#: in s2 - p^2 and a few products: <= 4 n EPS (n >= 4).
FROB_RTOL = 4 * N * EPS
#: Relative error of entropy on given weights: log (ULPS), the product and the n-term sum
#: of non-negative terms.
ENTROPY_RTOL = (N + ULPS + 1) * EPS


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


def explicit_frobenius64(p, normalised=False):
    """||diag(p) - p p^T||_F per row, from the explicit matrix in float64 (chunked).

    ``normalised``: the rows sum to 1 (to float64 precision), and the argmax's diagonal
    entry p_m (1 - p_m) takes 1 - p_m as the sum of the other weights: in a saturated row
    p_m rounds to 1 in float64 and p_m - p_m^2 would lose the whole entry."""
    p = np.asarray(p, np.float64).reshape(-1, np.shape(p)[-1])
    n = p.shape[-1]
    out = np.empty(p.shape[0])
    for s in range(0, p.shape[0], 128):
        c = p[s : s + 128]
        J = -c[:, :, None] * c[:, None, :]
        J[:, np.arange(n), np.arange(n)] += c
        if normalised:
            rows, m = np.arange(len(c)), np.argmax(c, -1)
            off = c.sum(-1, where=np.arange(n) != m[:, None])
            J[rows, m, m] = c[rows, m] * off
        out[s : s + 128] = np.sqrt(np.einsum("rij,rij->r", J, J))
    return out


def softmax_error(z):
    """Exact float64 softmax of float32 logits z and a bound on the error of a float32
    softmax of them: relative rounding of z - max (EPS |z - max|), exp, the n-term sum and
    the division (2), plus the flush of weights below TINY."""
    z = np.asarray(z, np.float64)
    zm = z - z.max(-1, keepdims=True)
    p = np.exp(zm) / np.exp(zm).sum(-1, keepdims=True)
    return p, p * (np.abs(zm) + ULPS + z.shape[-1] + 2) * EPS + TINY


def jacobian_bound(z):
    """Bound on |J(p32) - J(p)| entrywise for J = diag(p) - p p^T and one float32 softmax
    p32 of z: dJ_ij = dp_i (delta_ij - p_j) - p_i dp_j, plus J's own roundings (a product,
    and on the diagonal p - p^2: EPS (p_i delta_ij + p_i p_j))."""
    p, e = softmax_error(z)
    eye = np.eye(p.shape[-1])
    outer = p[..., :, None] * p[..., None, :]
    return (
        e[..., :, None] * (eye + p[..., None, :])
        + p[..., :, None] * e[..., None, :]
        + EPS * (eye * p[..., :, None] + outer)
    )


def naive_closed_form32(p):
    """sqrt(s2 - 2 s3 + s2^2) in float32: the cancelling closed form."""
    p = np.asarray(p, np.float32)
    s2 = np.sum(p**2, -1)
    s3 = np.sum(p**3, -1)
    with np.errstate(invalid="ignore"):
        return np.sqrt(s2 - np.float32(2.0) * s3 + s2**2)


def frobenius_rtol(z, n):
    """Per-row bound on the relative error of the norm of a float32 softmax of logits z
    against the float64 norm of the float64 softmax of the same logits: the norm's
    condition number for componentwise relative perturbations of p is <= 2 (every squared
    term is a product of <= 4 weights, then a square root), times the weights' relative
    error (``softmax_error``, whose TINY term is absolute: n TINY of the norm), plus the
    norm's own float32 evaluation, 4 n EPS."""
    z = np.asarray(z, np.float64)
    gap = np.max(np.abs(z - z.max(-1, keepdims=True)), -1)
    return 2 * (gap + ULPS + n + 2) * EPS + 4 * n * EPS


@pytest.fixture(scope="module")
def saturated_rows():
    """Softmax rows of unscaled attention, logits K q with standard normal q and K.

    d_k in {128, 256, 512, 1024}, 256 keys, 512 queries per d_k: 2048 float32 rows whose
    logits have standard deviation sqrt(d_k) = 11 .. 32, so many rows are near one-hot.
    Returns the rows, the Frobenius norms of the explicit Jacobians of the float64 softmax
    of the same float32 logits (the float32 rows do not sum to 1 exactly, so the float64
    Jacobian of the float32 rows is not the reference), and the error bound of each row
    (``frobenius_rtol``; relative, and absolute 2 n TINY for weights flushed to zero).
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
    ref = explicit_frobenius64(e / e.sum(-1, keepdims=True), normalised=True)
    return p, ref, frobenius_rtol(z, 256) * ref + 2 * 256 * TINY


# --------------------------------------------------------------------------- Jacobian


def test_softmax_jacobian_matches_jacrev():
    jac = jax.jit(jax.jacrev(jax.nn.softmax))
    for seed, std in [(0, 1.0), (1, 3.0), (2, 10.0)]:
        z, p = softmax_rows(seed, (N,), std)
        J = softmax_jacobian(p)
        assert J.shape == (N, N)
        # Two float32 softmaxes of z (eager, and inside jacrev), each J from its own.
        err = np.abs(np.asarray(J, np.float64) - np.asarray(jac(z), np.float64))
        assert (err <= 2 * jacobian_bound(z)).all()
    # A single key: p = [1], the Jacobian is [[0]].
    np.testing.assert_array_equal(softmax_jacobian(np.ones(1, np.float32)), [[0.0]])


def test_softmax_jacobian_batched_matches_vmapped_jacrev():
    z, p = softmax_rows(3, (4, 3, N), 2.0)
    J = np.asarray(softmax_jacobian(p))
    ref = jax.jit(jax.vmap(jax.vmap(jax.jacrev(jax.nn.softmax))))(z)
    assert J.shape == (4, 3, N, N)
    err = np.abs(J.astype(np.float64) - np.asarray(ref, np.float64))
    assert (err <= 2 * jacobian_bound(z)).all()  # two float32 softmaxes, as above
    # Symmetric (exact: p_i p_j = p_j p_i in IEEE arithmetic), rows sum to zero, zero at
    # one-hot (exact: 1 - 1 and 0 - 0).
    np.testing.assert_array_equal(J, np.swapaxes(J, -1, -2))
    # Row sums p_i (1 - sum p): the float32 weights sum to 1 within (n + 1) EPS (their
    # normaliser), plus the entries' roundings and numpy's n-term float32 sum (p_i n EPS).
    p64 = p.astype(np.float64)
    assert (np.abs(np.sum(J, -1, dtype=np.float64)) <= (2 * N + 3) * EPS * p64).all()
    assert np.all(np.asarray(softmax_jacobian(one_hot(1))) == 0.0)


# --------------------------------------------------------------------------- Frobenius norm


def test_frobenius_norm_random_rows():
    _, p = softmax_rows(4, (4, 3, N), 2.0)
    got = np.asarray(jacobian_frobenius_norm(p), np.float64)
    assert got.shape == (4, 3)
    np.testing.assert_allclose(got.ravel(), explicit_frobenius64(p), rtol=FROB_RTOL)
    # Same as the norm of the materialised float32 Jacobian, whose entries round by
    # EPS (p_i delta_ij + p_i p_j) (Frobenius norm <= EPS (|p| + |p|^2)) and whose norm
    # numpy sums in float32 (n^2 squares, halved by the root).
    J = np.asarray(softmax_jacobian(p))
    p64 = p.astype(np.float64)
    norm_p = np.linalg.norm(p64, axis=-1)
    bound = (FROB_RTOL + N * N / 2 * EPS) * got + EPS * (norm_p + norm_p**2)
    assert (np.abs(got - np.linalg.norm(J, axis=(-2, -1))) <= bound).all()


def test_frobenius_norm_special_rows():
    n = N
    # float32(1/n) is off by EPS / 2 relative, which the norm passes on at most twice.
    np.testing.assert_allclose(
        jacobian_frobenius_norm(uniform(n)), math.sqrt(1 / n - 1 / n**2), rtol=FROB_RTOL + EPS
    )
    # Exact: the mass off the argmax is 0, and the norm is 0 times a finite number.
    assert jacobian_frobenius_norm(one_hot(1)) == 0.0
    assert jacobian_frobenius_norm(np.zeros(N, np.float32)) == 0.0  # a fully masked row
    # Ties at the argmax (two equal maxima) and exact zeros.
    p = np.array([0.4, 0.1, 0.4, 0.05, 0.05, 0.0, 0.0], np.float32)
    np.testing.assert_allclose(
        jacobian_frobenius_norm(p), explicit_frobenius64(p)[0], rtol=FROB_RTOL
    )


def test_frobenius_norm_saturated_rows_accurate(saturated_rows):
    p, ref, bound = saturated_rows
    got = np.asarray(jacobian_frobenius_norm(p), np.float64)
    assert got.shape == (2048,)
    assert not np.any(np.isnan(got)) and np.all(np.isfinite(got)) and np.all(got >= 0.0)
    checked = ref > 1e-5
    # The data is saturated (many rows put > 99% on one key), and most rows are checked.
    assert np.mean(np.max(p, -1) > 0.99) > 0.4
    assert checked.sum() >= 1000
    # Every row, however saturated, within its bound (relative, up to ~1e-4 here).
    err = np.abs(got - ref)
    assert (err <= bound).all(), np.max(err / bound)


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
    ref = explicit_frobenius64(p64, normalised=True)
    got = np.asarray(jacobian_frobenius_norm(p32.astype(np.float32)), np.float64)
    # Bound: the norm's relative condition number with respect to componentwise relative
    # perturbations of p is <= 2 (every squared term is a product of <= 4 weights, then a
    # square root), plus the rounding of O(n) float32 sums.
    weights_rel = np.max(np.abs(p32 - p64) / p64)
    bound = 2 * weights_rel + 4 * 16 * EPS
    assert np.max(np.abs(got - ref) / ref) <= bound


def test_naive_closed_form_fails_on_saturated_rows(saturated_rows):
    """The saturated data is hard: the float32 closed form breaks on it."""
    p, ref, bound = saturated_rows
    naive = naive_closed_form32(p).astype(np.float64)
    checked = ref > 1e-5
    with np.errstate(invalid="ignore"):
        fails = checked & ~(np.abs(naive - ref) <= bound)  # NaN, or outside the bound
    assert fails.sum() > 0
    # ... while our function is within the bound on every row (the test above).


# --------------------------------------------------------------------------- entropy


@pytest.mark.parametrize("n", [1, N, 256])
def test_entropy_uniform_and_one_hot(n):
    # float32(1/n) is off by EPS / 2 relative (moving -n p ln p by as much), then log,
    # the product and the n-term sum of equal positive terms (exact 0 for n = 1).
    rtol = (n + ULPS + 2) * EPS
    np.testing.assert_allclose(entropy(uniform(n)), math.log(n), rtol=rtol, atol=0)
    h = entropy(one_hot(n - 1, n))
    assert h == 0.0 and np.isfinite(h)  # exact: 1 ln 1 = 0, zeros are skipped


def test_entropy_with_exact_zeros():
    q = np.array([0.2, 0.3, 0.5], np.float32)
    p = np.array([0.0, 0.2, 0.0, 0.3, 0.5, 0.0, 0.0], np.float32)
    h = entropy(p)
    assert np.isfinite(h)
    # Two float32 evaluations on the same positive weights (rows of 7 and 3 terms; numpy's
    # log is accurate to a few ulp too): ENTROPY_RTOL each.
    np.testing.assert_allclose(h, entropy(q), rtol=2 * ENTROPY_RTOL)
    np.testing.assert_allclose(h, -np.sum(np.log(q) * q), rtol=2 * ENTROPY_RTOL)
    assert entropy(np.zeros(N, np.float32)) == 0.0  # fully masked row: exact

    g = np.asarray(jax.grad(entropy)(p))
    assert np.all(np.isfinite(g))
    pos = p > 0
    # -(ln p + 1) cancels near p = 1/e: absolute bound, for either side, log (ULPS), the
    # sum with 1 and, in autodiff, p * (1 / p) (2): (ULPS + 3) EPS (|ln p| + 1).
    lp = np.log(p[pos].astype(np.float64))
    err = np.abs(g[pos] + (np.log(p[pos]) + 1.0))
    assert (err <= 2 * (ULPS + 3) * EPS * (np.abs(lp) + 1)).all()
    assert np.all(g[~pos] == 0.0)
    # The naive formula is NaN at exact zeros, so the test above is not vacuous.
    naive = jax.jit(lambda p: -jnp.sum(p * jnp.log(p)))
    assert np.isnan(naive(p)) and np.any(np.isnan(jax.jit(jax.grad(naive))(p)))


def test_entropy_matches_reference_on_softmax_rows():
    _, p = softmax_rows(5, (4, 3, N), 3.0)
    p64 = p.astype(np.float64)
    # The same float32 weights; only the float32 evaluation rounds.
    ref = -np.sum(p64 * np.log(p64), -1)
    np.testing.assert_allclose(entropy(p), ref, rtol=ENTROPY_RTOL, atol=0)


def test_max_weight_basics():
    np.testing.assert_allclose(max_weight(uniform()), 1.0 / N, rtol=EPS / 2)  # float32(1/7)
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
    # Each row is reduced independently: batched results equal the per-row results, up
    # to the rounding of two evaluations (another program shape).
    flat = p.reshape(12, N)
    for f in FUNCS:
        batched = np.asarray(f(p))
        rows = np.stack([np.asarray(f(r)) for r in flat])
        rtol, atol = TOLERANCES[f.__name__]
        np.testing.assert_allclose(batched.reshape(rows.shape), rows, rtol=rtol, atol=atol)


# --------------------------------------------------------------------------- jit / vmap


#: Two float32 evaluations of each function on the same weights, as (rtol, atol): the
#: entropy and the norm twice their relative bounds, the max exact (a selection), the
#: Jacobian's entries EPS (p_i delta_ij + p_i p_j) <= 2 EPS each.
TOLERANCES = {
    "entropy": (2 * ENTROPY_RTOL, 0.0),
    "max_weight": (0.0, 0.0),
    "softmax_jacobian": (0.0, 4 * EPS),
    "jacobian_frobenius_norm": (2 * FROB_RTOL, 0.0),
}


@pytest.mark.parametrize("f", FUNCS, ids=lambda f: f.__name__)
def test_jit_and_vmap_match_eager(f):
    _, p = softmax_rows(8, (4, 3, N), 4.0)
    eager = np.asarray(f(p))
    rtol, atol = TOLERANCES[f.__name__]
    np.testing.assert_allclose(jax.jit(f)(p), eager, rtol=rtol, atol=atol)
    np.testing.assert_allclose(jax.vmap(f)(p), eager, rtol=rtol, atol=atol)
    np.testing.assert_allclose(
        jax.jit(jax.vmap(f, in_axes=1, out_axes=1))(p), eager, rtol=rtol, atol=atol
    )


# ------------------------------------------------------------------ the attention sink

#: A causal 4 x 4 attention matrix written by hand; its first column sums to 1 + 0.5 + 0.4
#: + 0.1 = 2.0, so its mean over the four rows, Gu et al.'s alpha_1, is 2.0 / 4 = 0.5.
HAND = np.array(
    [
        [1.0, 0.0, 0.0, 0.0],
        [0.5, 0.5, 0.0, 0.0],
        [0.4, 0.3, 0.3, 0.0],
        [0.1, 0.2, 0.3, 0.4],
    ],
    np.float32,
)
#: Another head: first column 1 + 0.2 + 0.1 + 0.1 = 1.4, alpha_1 = 1.4 / 4 = 0.35.
HAND_2 = np.array(
    [
        [1.0, 0.0, 0.0, 0.0],
        [0.2, 0.8, 0.0, 0.0],
        [0.1, 0.1, 0.8, 0.0],
        [0.1, 0.3, 0.3, 0.3],
    ],
    np.float32,
)
#: The weights above are float32 roundings of decimals (one half-eps each); the mean adds
#: a 4-term sum and a division: 4 EPS of 1 bounds the difference from the decimal answer.
HAND_ATOL = 4 * EPS


def test_first_key_weight_of_a_hand_made_matrix():
    """alpha_1 = (1/T) sum_i p_{i,1}: 2.0 / 4 = 0.5 for ``HAND``, 1.4 / 4 = 0.35 for
    ``HAND_2``, by hand; one value per head for ``[H, T, T]``; the last column (0.4 / 4 for
    ``HAND``) is not what it reads."""
    assert float(first_key_weight(HAND)) == pytest.approx(2.0 / 4, abs=HAND_ATOL, rel=0)
    heads = np.stack([HAND, HAND_2])
    alpha = np.asarray(first_key_weight(heads))
    assert alpha.shape == (2,)
    np.testing.assert_allclose(alpha, [2.0 / 4, 1.4 / 4], rtol=0, atol=HAND_ATOL)
    assert abs(float(first_key_weight(HAND[:, ::-1])) - 0.4 / 4) <= HAND_ATOL


def test_null_weight_is_zero_for_softmax_rows_and_the_missing_mass_otherwise():
    """``1 - sum_j p_j`` averaged over the rows: 0 for softmax rows (within the N-term sum's
    N EPS and the softmax's own N + 2: (2 N + 2) EPS), 0 for ``HAND`` (its rows sum to 1
    by hand: HAND_ATOL), 0.2 for rows summing to 0.8, the mean 0.1 of a row of 0.8 and one
    of 1, and -0.8 for sigmoid-like rows summing to 1.8. Shapes ``[..., T, n] -> [...]``."""
    _, p = softmax_rows(9, (3, 5, N))
    null = np.asarray(null_weight(p))
    assert null.shape == (3,)
    np.testing.assert_allclose(null, 0.0, rtol=0, atol=(2 * N + 2) * EPS)
    assert abs(float(null_weight(HAND))) <= HAND_ATOL
    short = np.array([[0.5, 0.2, 0.1], [0.3, 0.3, 0.2]], np.float32)  # each row sums to 0.8
    assert float(null_weight(short)) == pytest.approx(0.2, abs=HAND_ATOL, rel=0)
    mixed = np.array([[0.5, 0.2, 0.1], [0.5, 0.25, 0.25]], np.float32)  # 0.8 and 1
    assert float(null_weight(mixed)) == pytest.approx(0.1, abs=HAND_ATOL, rel=0)
    over = np.array([[0.9, 0.9, 0.0]], np.float32)  # not normalised: 1.8
    assert float(null_weight(over)) == pytest.approx(-0.8, abs=HAND_ATOL, rel=0)


def test_sink_share_counts_heads_strictly_above_the_threshold():
    """Gu et al.'s 0.3: a head whose alpha is the next float32 above 0.3 counts, the next
    below does not, nor one at 0.3 itself (``exceeds``; in float32, the threshold's own
    rounding); the share is over every axis of alpha (``[L, H]``), and the threshold may be
    chosen."""
    assert SINK_THRESHOLD == 0.3
    at = np.float32(0.3)
    above, below = np.nextafter(at, np.float32(1)), np.nextafter(at, np.float32(0))
    assert float(sink_share(np.array([above], np.float32))) == 1.0
    assert float(sink_share(np.array([below], np.float32))) == 0.0
    assert float(sink_share(np.array([at], np.float32))) == 0.0
    alpha = np.array([[above, below, 0.9, 0.0], [1.0, 0.31, 0.29, 0.05]], np.float32)
    assert float(sink_share(alpha)) == 4 / 8  # above, 0.9, 1.0 and 0.31
    assert float(sink_share(alpha, threshold=0.5)) == 2 / 8  # 0.9 and 1.0


def test_sink_share_of_hand_made_heads():
    """``HAND`` (alpha 0.5) is a sink head, ``HAND_2`` (0.35) too, a uniform causal head
    (column 0: 1, 1/2, 1/3, 1/4; alpha = 25/48 = 0.52) too, and one whose rows put nothing
    on the first key after row 0 (alpha 1/4) is not: 3 of 4."""
    uniform_causal = np.tril(np.ones((4, 4), np.float32))
    uniform_causal /= uniform_causal.sum(-1, keepdims=True)
    late = np.eye(4, dtype=np.float32)  # alpha = 1/4: row 0 only
    alpha = first_key_weight(np.stack([HAND, HAND_2, uniform_causal, late]))
    np.testing.assert_allclose(alpha[2:], [25 / 48, 1 / 4], rtol=0, atol=HAND_ATOL)
    assert float(sink_share(alpha)) == 3 / 4
