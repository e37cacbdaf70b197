"""Monte-Carlo drivers of experiments 01-03 (attnlab.core.sampling).

Compilation dominates the cost of these tests, so they share programs: the same
``(sampler, d_k, n_keys, chunk)`` wherever the assertion allows.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlab.core import sampling
from attnlab.core.sampling import (
    LOGIT_SAMPLERS,
    direct_logits,
    dot_product_samples,
    exact_logits,
    mean_and_sem,
    softmax_row_statistics,
    std_and_se,
)

STATISTICS = ("max_weight", "entropy", "jacobian_fro")

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


def test_direct_logits_are_keys_times_query():
    key = jax.random.key(3)
    kq, kk = jax.random.split(key)
    q = jax.random.normal(kq, (8,))
    keys = jax.random.normal(kk, (5, 8))
    np.testing.assert_allclose(direct_logits(key, 8, 5), keys @ q, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("sampler", ["direct", "exact"])
def test_logit_variance_is_d_k(sampler):
    # Var(q . k) = d_k and E(q . k) = 0. The logits of one row share q, so it is the number
    # of rows (20,000 of 4 logits) that makes the estimate precise: relative SE < 2 %.
    keys = jax.random.split(jax.random.key(1), 20_000)
    if sampler == "exact":  # d_k traced: one program for every head width
        draw = jax.jit(jax.vmap(lambda k, d_k: exact_logits(k, d_k, 4), in_axes=(0, None)))
    else:
        draw = jax.jit(jax.vmap(direct_logits, in_axes=(0, None, None)), static_argnums=(1, 2))
    for d_k in (1, 64) if sampler == "exact" else (64,):  # direct compiles once per d_k
        args = (keys, jnp.float32(d_k)) if sampler == "exact" else (keys, d_k, 4)
        z = np.asarray(draw(*args), np.float64)
        assert z.shape == (20_000, 4)
        assert abs(z.mean()) < 0.05 * np.sqrt(d_k), d_k
        assert z.var() == pytest.approx(d_k, rel=0.1), d_k


def test_dot_product_samples_prefix_and_seed():
    key = jax.random.key(0)
    long = dot_product_samples(key, 8, 300)
    short = dot_product_samples(key, 8, 100)
    assert long.shape == (300,) and long.dtype == np.float32
    # Sample t depends on (seed, d_k, t) only, so fewer samples give a prefix.
    np.testing.assert_array_equal(long[:100], short)
    assert not np.array_equal(dot_product_samples(jax.random.key(1), 8, 100), short)


def test_dot_product_samples_independent_of_chunk_size(monkeypatch):
    key = jax.random.key(0)
    reference = dot_product_samples(key, 8, 50)
    monkeypatch.setattr(sampling, "CHUNK_ELEMENTS", 7 * 2 * 8)  # chunks of 7 samples
    np.testing.assert_array_equal(dot_product_samples(key, 8, 50), reference)


# --- softmax_row_statistics -------------------------------------------------------------


def test_row_statistics_layout_prefix_and_seed():
    key = jax.random.key(0)
    long = softmax_row_statistics(key, 4, 8, 40)
    assert long.variants == ("scaled", "unscaled")
    for name in STATISTICS:
        values = getattr(long, name)
        assert values.shape == (2, 40) and values.dtype == np.float32
        assert np.all(np.isfinite(values))
    assert np.all((long.max_weight >= 1 / 8 - 1e-6) & (long.max_weight <= 1 + 1e-6))
    assert np.all((long.entropy >= -1e-6) & (long.entropy <= np.log(8) + 1e-5))
    assert np.all((long.jacobian_fro >= 0) & (long.jacobian_fro <= 1))
    # A trial depends on (seed, d_k, t) only: fewer trials give a prefix (same chunk shape,
    # so equal bits), another seed other values.
    short = _stacked(softmax_row_statistics(key, 4, 8, 25))
    np.testing.assert_array_equal(_stacked(long)[..., :25], short)
    assert not np.array_equal(_stacked(softmax_row_statistics(jax.random.key(1), 4, 8, 25)), short)


def _chunk_elements_for(chunk: int, d_k: int, n_keys: int, variants: int = 2) -> int:
    """CHUNK_ELEMENTS that gives ``chunk`` trials per call for the direct sampler."""
    return chunk * (n_keys * d_k + variants * n_keys)


def test_row_statistics_independent_of_chunk_size(monkeypatch):
    key = jax.random.key(0)
    reference = _stacked(softmax_row_statistics(key, 4, 8, 40))  # one padded chunk
    monkeypatch.setattr(sampling, "CHUNK_ELEMENTS", _chunk_elements_for(3, 4, 8))
    assert sampling.chunk_for(4 * 8 + 2 * 8) == 3  # 14 calls, the last one padded
    chunked = _stacked(softmax_row_statistics(key, 4, 8, 40))
    # Same draws; XLA:CPU may round the row reductions differently for another batch size.
    np.testing.assert_allclose(chunked, reference, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("sampler", ["direct", "exact"])
def test_scaled_equals_unscaled_at_d_k_1(sampler):
    stats = softmax_row_statistics(jax.random.key(0), 1, 64, 40, sampler)
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
            bound = 4 * np.hypot(sem_d[v], sem_e[v])
            assert abs(mean_d[v] - mean_e[v]) <= bound, (name, variant, mean_d[v], mean_e[v])


@pytest.mark.parametrize("sampler", [0, 1], ids=["direct", "exact"])
def test_unscaled_saturates_at_large_d_k(sampler_pairs, sampler):
    stats = sampler_pairs[64][sampler]
    assert stats.variants == ("scaled", "unscaled")
    max_weight, entropy = stats.max_weight.mean(axis=1), stats.entropy.mean(axis=1)
    assert max_weight[1] > max_weight[0] + 0.3
    assert entropy[1] < entropy[0] - 1.0  # nats


# --- mean_and_sem and std_and_se ---------------------------------------------------------


def test_mean_and_sem_matches_numpy():
    x = np.random.default_rng(0).normal(size=(3, 50)).astype(np.float32)
    x64 = x.astype(np.float64)
    mean, sem = mean_and_sem(x)
    assert mean.dtype == sem.dtype == np.float64
    np.testing.assert_allclose(mean, x64.mean(axis=-1), rtol=1e-12)
    np.testing.assert_allclose(sem, x64.std(axis=-1, ddof=1) / np.sqrt(50), rtol=1e-12)
    mean0, sem0 = mean_and_sem(x, axis=0)
    np.testing.assert_allclose(mean0, x64.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(sem0, x64.std(axis=0, ddof=1) / np.sqrt(3), rtol=1e-12)


def test_std_and_se_matches_moment_formula():
    x = np.random.default_rng(1).standard_t(df=6, size=1000)
    std, se = std_and_se(x)
    centred = x - x.mean()
    m2, m4 = np.mean(centred**2), np.mean(centred**4)
    assert isinstance(std, float) and isinstance(se, float)
    assert std == pytest.approx(np.std(x), rel=1e-12)
    assert se == pytest.approx(np.sqrt((m4 - m2**2) / x.size) / (2 * np.sqrt(m2)), rel=1e-12)


def test_std_and_se_gaussian_limit():
    # For normal data m4 = 3 m2^2, so se -> s / sqrt(2 N).
    x = np.random.default_rng(2).normal(scale=3.0, size=200_000)
    std, se = std_and_se(x)
    assert std == pytest.approx(3.0, rel=0.01)
    assert se == pytest.approx(std / np.sqrt(2 * x.size), rel=0.05)


def test_std_and_se_tracks_spread_of_std_for_heavy_tails():
    # The product of two standard normals (the d_k = 1 logit) has kurtosis 9: the std of
    # the sample std is twice the Gaussian formula s / sqrt(2 N).
    rng = np.random.default_rng(3)
    repeats, n = 400, 2000
    x = rng.standard_normal((repeats, n)) * rng.standard_normal((repeats, n))
    stds, ses = np.array([std_and_se(row) for row in x]).T
    spread = stds.std(ddof=1)
    assert 1 / 1.5 < np.mean(ses) / spread < 1.5
    assert spread / (np.mean(stds) / np.sqrt(2 * n)) > 1.5  # the case really is heavy-tailed
