"""Monte-Carlo drivers of experiments 01-03 (attnlab.core.sampling).

Compilation dominates the cost of these tests, so they share programs: the same
``(sampler, d_k, n_keys, chunk)`` wherever the assertion allows.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpy_reference import EPS32, ULPS, row_statistic_bounds

from attnlab.core import sampling
from attnlab.core.estimates import mean_and_sem
from attnlab.core.sampling import (
    LOGIT_SAMPLERS,
    direct_logits,
    dot_product_samples,
    exact_logits,
    softmax_row_statistics,
    trial_keys,
)

STATISTICS = ("max_weight", "entropy", "jacobian_fro")
#: One float32 rounding, 2^-23: twice the unit roundoff (n EPS bounds n roundings).
EPS = EPS32


def statistic_ranges(n: int) -> dict[str, tuple[float, float]]:
    """Ranges of the float32 row statistics of n keys: max weight in [1/n, 1] (the largest
    weight exp(0) / sum rounds in exp and the division and, from below, the n-term sum),
    entropy in [0, ln n] (the weights' normaliser is off by <= 2n EPS, moving -sum p ln p by
    that times ln n - 1; log, products and the n-term sum round relative to H; a weight
    rounded above 1 adds a term >= -(ULPS + 3) EPS) and the Jacobian norm in [0, 1] (its
    largest value is 1/2, at p = (1/2, 1/2))."""
    ln_n = float(np.log(n))
    top = ln_n * (1 + (n + ULPS + 1) * EPS) + 2 * n * EPS * (ln_n - 1)
    return {
        "max_weight": ((1 - (n + ULPS + 2) * EPS) / n, 1 + (ULPS + 2) * EPS),
        "entropy": (-(ULPS + 3) * EPS, top),
        "jacobian_fro": (0.0, 1.0),
    }


def direct_draws(key, d_k: int, n_keys: int, trials: int) -> tuple[np.ndarray, np.ndarray]:
    """float64 logits ``K q`` of every trial of the direct sampler, from its own float32
    draws, and ``|K| |q|``, the magnitudes that the float32 products sum."""

    def draw(k):
        kq, kk = jax.random.split(k)
        return jax.random.normal(kq, (d_k,)), jax.random.normal(kk, (n_keys, d_k))

    with jax.threefry_partitionable(False):
        q, keys = jax.jit(jax.vmap(draw))(trial_keys(key, d_k, trials))
    q, keys = np.asarray(q, np.float64), np.asarray(keys, np.float64)
    return np.einsum("tnd,td->tn", keys, q), np.einsum("tnd,td->tn", np.abs(keys), np.abs(q))


#: Chunk budget for these tests. The default (2**23 elements) pads a few dozen trials to a
#: chunk of tens of thousands; results do not depend on it beyond float rounding.
TEST_CHUNK_ELEMENTS = 2**16


@pytest.fixture(autouse=True)
def _small_chunks(monkeypatch):
    monkeypatch.setattr(sampling, "CHUNK_ELEMENTS", TEST_CHUNK_ELEMENTS)


def _stacked(stats: sampling.RowStatistics) -> np.ndarray:
    """``[statistic, variant, trial]``."""
    return np.stack([getattr(stats, name) for name in STATISTICS])


# --- logit samplers ---------------------------------------------------------------------


@pytest.mark.parametrize("sampler", ["direct", "exact"])
@pytest.mark.parametrize(("d_k", "n_keys"), [(1, 1), (64, 7)])
def test_logits_shape_and_dtype(sampler, d_k, n_keys):
    z = LOGIT_SAMPLERS[sampler](jax.random.key(0), d_k, n_keys)
    assert z.shape == (n_keys,)
    assert z.dtype == jnp.float32
    assert bool(jnp.all(jnp.isfinite(z)))


def test_direct_logits_of_a_row_share_one_query():
    """An independent property of ``z_i = k_i . q`` (no re-statement of the sampler): the
    logits of one row share q, so their squares are correlated, Cov(z_1^2, z_2^2) =
    Var(|q|^2) = 2 d_k, while independent draws would give 0. Checked within 5 SE of the
    sample covariance (its SE from the sample itself) at d_k = 4."""
    d_k, rows = 4, 40_000
    draw = jax.jit(jax.vmap(direct_logits, in_axes=(0, None, None)), static_argnums=(1, 2))
    z = np.asarray(draw(jax.random.split(jax.random.key(3), rows), d_k, 2), np.float64)
    sq = z**2 - (z**2).mean(0)
    products = sq[:, 0] * sq[:, 1]
    cov, se = products.mean(), products.std(ddof=1) / np.sqrt(rows)
    assert abs(cov - 2 * d_k) < 5 * se  # 5 SE
    assert cov > 5 * se  # and clearly not independent


@pytest.mark.parametrize("sampler", ["direct", "exact"])
def test_logit_variance_is_d_k(sampler):
    # Var(q . k) = d_k and E(q . k) = 0. The logits of one row share q: uncorrelated, but
    # their squares are not (Cov(z_1^2, z_2^2) = 2 d_k, Var(z^2) = 2 d_k^2 + 6 d_k), so the
    # mean of z^2 over N rows of 4 has relative SE sqrt((1 + 6 / d_k) / (2 N)) (< 2 %).
    keys = jax.random.split(jax.random.key(1), 20_000)
    if sampler == "exact":  # d_k traced: one program for every head width
        draw = jax.jit(jax.vmap(lambda k, d_k: exact_logits(k, d_k, 4), in_axes=(0, None)))
    else:
        draw = jax.jit(jax.vmap(direct_logits, in_axes=(0, None, None)), static_argnums=(1, 2))
    for d_k in (1, 64) if sampler == "exact" else (64,):  # direct compiles once per d_k
        args = (keys, jnp.float32(d_k)) if sampler == "exact" else (keys, d_k, 4)
        z = np.asarray(draw(*args), np.float64)
        assert z.shape == (20_000, 4)
        assert abs(z.mean()) < 5 * np.sqrt(d_k / z.size), d_k  # 5 SE
        rel_se = np.sqrt((1 + 6 / d_k) / (2 * z.shape[0]))
        assert z.var() == pytest.approx(d_k, rel=5 * rel_se), d_k  # 5 SE


#: CHUNK_ELEMENTS that gives dot_product_samples at d_k 8 chunks of 100 samples.
DOT_CHUNK_ELEMENTS = 100 * 2 * 8


def test_dot_product_samples_prefix_and_seed(monkeypatch):
    key = jax.random.key(0)
    monkeypatch.setattr(sampling, "CHUNK_ELEMENTS", DOT_CHUNK_ELEMENTS)
    long = dot_product_samples(key, 8, 300)  # three chunks of 100
    short = dot_product_samples(key, 8, 100)
    assert long.shape == (300,) and long.dtype == np.float32
    # Sample t depends on (seed, d_k, t) only, so fewer samples give a prefix (exact: the
    # same compiled chunk computes both).
    np.testing.assert_array_equal(long[:100], short)
    assert not np.array_equal(dot_product_samples(jax.random.key(1), 8, 100), short)


def test_dot_product_samples_independent_of_chunk_size(monkeypatch):
    key = jax.random.key(0)
    monkeypatch.setattr(sampling, "CHUNK_ELEMENTS", DOT_CHUNK_ELEMENTS)
    reference = dot_product_samples(key, 8, 100)  # one chunk: the program of the test above
    monkeypatch.setattr(sampling, "CHUNK_ELEMENTS", 7 * 2 * 8)  # chunks of 7 samples
    # The same draws in another program shape: two 8-term float32 products, plus the
    # normal transform of each draw (ULPS each for q and k).
    _, z_abs = direct_draws(key, 8, 1, 100)
    err = np.abs(dot_product_samples(key, 8, 100).astype(np.float64) - reference)
    assert (err <= 2 * (8 + 2 * ULPS) * EPS * z_abs[:, 0]).all()


# --- softmax_row_statistics -------------------------------------------------------------


#: Trials of one chunk of the direct sampler at d_k 4 and 64 keys under TEST_CHUNK_ELEMENTS
#: (as ``sampler_pairs`` cuts its 1500 trials): the row statistics tests below run in
#: ``sampler_pairs``'s compiled program.
CHUNK_4_64 = 167


def test_row_statistics_layout_prefix_and_seed():
    key = jax.random.key(0)
    long = softmax_row_statistics(key, 4, 64, 2 * CHUNK_4_64)  # two chunks
    assert long.variants == ("scaled", "unscaled")
    for name, (lo, hi) in statistic_ranges(64).items():
        values = getattr(long, name)
        assert values.shape == (2, 2 * CHUNK_4_64) and values.dtype == np.float32
        assert np.all(np.isfinite(values))
        assert np.all((values >= lo) & (values <= hi)), name
    # A trial depends on (seed, d_k, t) only: fewer trials give a prefix (same chunk shape,
    # so equal bits), another seed other values.
    short = _stacked(softmax_row_statistics(key, 4, 64, CHUNK_4_64))
    np.testing.assert_array_equal(_stacked(long)[..., :CHUNK_4_64], short)
    other_seed = softmax_row_statistics(jax.random.key(1), 4, 64, CHUNK_4_64)
    assert not np.array_equal(_stacked(other_seed), short)


def _chunk_elements_for(chunk: int, d_k: int, n_keys: int, variants: int = 2) -> int:
    """CHUNK_ELEMENTS that gives ``chunk`` trials per call for the direct sampler."""
    return chunk * (n_keys * d_k + variants * n_keys)


def test_row_statistics_independent_of_chunk_size(monkeypatch):
    key = jax.random.key(0)
    reference = _stacked(softmax_row_statistics(key, 4, 64, CHUNK_4_64))  # one chunk
    monkeypatch.setattr(sampling, "CHUNK_ELEMENTS", _chunk_elements_for(3, 4, 64))
    assert sampling.chunk_for(4 * 64 + 2 * 64) == 3  # 56 calls, the last one padded
    chunked = _stacked(softmax_row_statistics(key, 4, 64, CHUNK_4_64))
    # Same draws; XLA:CPU may round the row reductions differently for another batch size:
    # two float32 evaluations, each within row_statistic_bounds.
    z, z_abs = direct_draws(key, 4, 64, CHUNK_4_64)
    bounds = np.stack([row_statistic_bounds(z, z_abs, c, 4) for c in (0.5, 1.0)], axis=1)
    err = np.abs(chunked.astype(np.float64) - reference)
    assert (err <= 2 * bounds).all(), np.max(err / bounds)


@pytest.mark.parametrize("sampler", ["direct", "exact"])
def test_scaled_equals_unscaled_at_d_k_1(sampler):
    # 64 keys, 1500 trials: the exact sampler's program (d_k traced) is sampler_pairs'.
    stats = softmax_row_statistics(jax.random.key(0), 1, 64, 1500, sampler)
    # Exact: the scales 1/sqrt(1) and 1 are both 1, the same ops on the same logits.
    for name in STATISTICS:
        values = getattr(stats, name)
        np.testing.assert_array_equal(values[0], values[1], err_msg=name)


@pytest.fixture(scope="module")
def sampler_pairs():
    """``{d_k: (direct, exact)}`` row statistics, 64 keys, 1500 trials, seeds 0 and 1."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sampling, "CHUNK_ELEMENTS", TEST_CHUNK_ELEMENTS)
        return {
            d_k: (
                softmax_row_statistics(jax.random.key(0), d_k, 64, 1500, "direct"),
                softmax_row_statistics(jax.random.key(1), d_k, 64, 1500, "exact"),
            )
            for d_k in (4, 64)
        }


@pytest.mark.parametrize("d_k", [4, 64])
def test_direct_and_exact_samplers_agree(sampler_pairs, d_k):
    direct, exact = sampler_pairs[d_k]
    assert direct.variants == exact.variants
    for name in STATISTICS:
        mean_d, sem_d = mean_and_sem(getattr(direct, name))
        mean_e, sem_e = mean_and_sem(getattr(exact, name))
        for v, variant in enumerate(direct.variants):
            bound = 4 * np.hypot(sem_d[v], sem_e[v])  # 4 SE of independent runs' difference
            assert abs(mean_d[v] - mean_e[v]) <= bound, (name, variant, mean_d[v], mean_e[v])


@pytest.mark.parametrize("sampler", [0, 1], ids=["direct", "exact"])
def test_unscaled_saturates_at_large_d_k(sampler_pairs, sampler):
    stats = sampler_pairs[64][sampler]
    assert stats.variants == ("scaled", "unscaled")
    # Paired differences (the same rows) beyond 0.3 in max weight and 1 nat in entropy, by
    # 5 standard errors.
    gap, gap_sem = mean_and_sem(stats.max_weight[1] - stats.max_weight[0])
    assert gap - 5 * gap_sem > 0.3
    drop, drop_sem = mean_and_sem(stats.entropy[0] - stats.entropy[1])
    assert drop - 5 * drop_sem > 1.0  # nats
