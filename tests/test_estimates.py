"""attnlab.core.estimates: Monte-Carlo means and standard deviations with their standard
errors, against numpy and the delta method's limits."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.core.estimates import mean_and_sem, std_and_se

EPS64 = float(np.finfo(np.float64).eps)


def test_mean_and_sem_matches_numpy():
    x = np.random.default_rng(0).normal(size=(3, 50)).astype(np.float32)
    x64 = x.astype(np.float64)
    mean, sem = mean_and_sem(x)
    assert mean.dtype == sem.dtype == np.float64
    # Exact: the same numpy float64 operations on the same (exactly widened) values.
    np.testing.assert_array_equal(mean, x64.mean(axis=-1))
    np.testing.assert_array_equal(sem, x64.std(axis=-1, ddof=1) / np.sqrt(50))
    mean0, sem0 = mean_and_sem(x, axis=0)
    np.testing.assert_array_equal(mean0, x64.mean(axis=0))
    np.testing.assert_array_equal(sem0, x64.std(axis=0, ddof=1) / np.sqrt(3))


def test_std_and_se_matches_moment_formula():
    x = np.random.default_rng(1).standard_t(df=6, size=1000)
    std, se = std_and_se(x)
    centred = x - x.mean()
    m2, m4 = np.mean(centred**2), np.mean(centred**4)
    assert isinstance(std, float) and isinstance(se, float)
    # float64 means of 1000 non-negative terms: < 1000 eps64 = 2.2e-13 relative each; the
    # se's m4 - m2^2 loses at most log2(kurtosis / (kurtosis - 1)) < 1 bit (kurtosis 6).
    rel = 4 * 1000 * EPS64
    assert std == pytest.approx(np.std(x), rel=rel)
    assert se == pytest.approx(np.sqrt((m4 - m2**2) / x.size) / (2 * np.sqrt(m2)), rel=rel)


def test_std_and_se_gaussian_limit():
    # For normal data m4 = 3 m2^2, so se -> s / sqrt(2 N).
    x = np.random.default_rng(2).normal(scale=3.0, size=200_000)
    std, se = std_and_se(x)
    # 5 SE: the std of normal data has relative SE 1 / sqrt(2 N); the estimated se is
    # sqrt(kurtosis - 1) s / sqrt(4N), and the sample kurtosis has SE sqrt(24 / N), so its
    # relative SE is sqrt(24 / N) / (2 (3 - 1)).
    assert std == pytest.approx(3.0, rel=5 / np.sqrt(2 * x.size))
    assert se == pytest.approx(std / np.sqrt(2 * x.size), rel=5 * np.sqrt(24 / x.size) / 4)


def test_std_and_se_tracks_spread_of_std_for_heavy_tails():
    # The product of two standard normals (the d_k = 1 logit) has kurtosis 9: the std of
    # the sample std is twice the Gaussian formula s / sqrt(2 N).
    rng = np.random.default_rng(3)
    repeats, n = 400, 2000
    x = rng.standard_normal((repeats, n)) * rng.standard_normal((repeats, n))
    stds, ses = np.array([std_and_se(row) for row in x]).T
    spread = stds.std(ddof=1)
    # The sample std of 2000 values is close to normal, so the spread of 400 of them has
    # relative SE 1 / sqrt(2 (400 - 1)); the mean of the ses has relative SE
    # sd(ses) / (mean(ses) sqrt(400)). Within 5 SE of the ratio 1:
    ratio = np.mean(ses) / spread
    rel_se_ses = ses.std(ddof=1) / ses.mean() / np.sqrt(repeats)
    rel_se = np.hypot(1 / np.sqrt(2 * (repeats - 1)), rel_se_ses)
    assert abs(ratio - 1) < 5 * rel_se * ratio
    # ... and the case really is heavy-tailed: the spread is twice the Gaussian formula
    # s / sqrt(2 N) (sqrt((9 - 1) / 2) = 2), above 1 by more than 5 SE.
    gaussian_ratio = spread / (np.mean(stds) / np.sqrt(2 * n))
    assert gaussian_ratio - 5 * gaussian_ratio / np.sqrt(2 * (repeats - 1)) > 1
