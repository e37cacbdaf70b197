"""attnlab.studies.statics.compute (experiments 01-03): the tables, checked against closed
forms and against float64 recomputations from the tables' own draws.

The samplers themselves are tested in ``test_sampling.py``; here each ``run_*`` function is
called directly at tiny settings and its table's contract is checked: the promised columns
and rows, the closed form ``std(q . k) = sqrt(d_k)`` within the table's standard errors, the
standard error itself against its closed form, and every mean re-derived in numpy float64
(the Jacobian by float64 autodiff) from the same random draws, within float32 error bounds
written beside each comparison.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from attnlab.core.sampling import trial_keys
from attnlab.core.softmax_sweeps import (
    SoftmaxSweepConfig,
    run_jacobian_sweep,
    run_saturation_sweep,
)
from attnlab.studies.statics.compute import HP_STREAM, LogitVarianceConfig, run_logit_variance

EPS = float(np.finfo(np.float32).eps)
EPS64 = float(np.finfo(np.float64).eps)
TINY = float(np.finfo(np.float32).tiny)
#: XLA's float32 exp, log and sqrt, and the samplers' transforms (normal, chi-square), are
#: accurate to a few ulp; we allow 4 eps each.
ULPS = 4
#: Standard errors allowed between an estimate and its closed form (two-sided 5.7e-7).
SE_MULTIPLE = 5

DKS = (1, 16, 256)
N_KEYS = 16
TRIALS = 512
VARIANCE = LogitVarianceConfig(dks=DKS, samples=4096, seed=3, hp_samples=1_000_000)
SAMPLERS = ("direct", "exact")
STATISTICS = ("max_weight", "entropy", "jacobian_fro")


def sweep_config(sampler: str) -> SoftmaxSweepConfig:
    return SoftmaxSweepConfig(dks=DKS, n_keys=N_KEYS, trials=TRIALS, seed=5, sampler=sampler)


@pytest.fixture(scope="module")
def variance() -> tuple[pd.DataFrame, list[int]]:
    """Experiment 01's table at ``VARIANCE`` and the counts its progress callback got."""
    counts: list[int] = []
    return run_logit_variance(VARIANCE, counts.append), counts


@pytest.fixture(scope="module")
def sweeps() -> dict[str, tuple[pd.DataFrame, pd.DataFrame, list[int]]]:
    """Per sampler: the 02 and 03 tables and the progress counts of the 02 run."""
    out = {}
    for sampler in SAMPLERS:
        counts: list[int] = []
        saturation = run_saturation_sweep(sweep_config(sampler), counts.append)
        out[sampler] = (saturation, run_jacobian_sweep(sweep_config(sampler)), counts)
    return out


# --- experiment 01 -----------------------------------------------------------------------


def test_logit_variance_columns_rows_and_progress(variance):
    table, counts = variance
    assert list(table.columns) == [
        "d_k", "samples", "std_measured", "std_se", "std_predicted", "rel_error",
        "rel_error_se", "std_scaled", "std_scaled_se", "hp_samples", "std_hp", "std_hp_se",
        "rel_error_hp", "rel_error_hp_se",
    ]  # fmt: skip
    assert table["d_k"].tolist() == list(DKS)
    assert (table["samples"] == VARIANCE.samples).all()
    assert (table["hp_samples"] == VARIANCE.hp_samples).all()
    assert sum(counts) == len(DKS) * (VARIANCE.samples + VARIANCE.hp_samples)


def test_std_is_sqrt_d_k_within_its_standard_errors(variance):
    """The closed form Var(q . k) = d_k (sum of d_k products of independent unit normals),
    for the headline, the high-precision and the scaled columns."""
    table, _ = variance
    root = np.sqrt(table["d_k"].to_numpy(np.float64))
    np.testing.assert_array_equal(table["std_predicted"], root)
    for std, se, expected in (
        ("std_measured", "std_se", root),
        ("std_hp", "std_hp_se", root),
        ("std_scaled", "std_scaled_se", np.ones_like(root)),
    ):
        z = np.abs(table[std] - expected) / table[se]
        assert (z < SE_MULTIPLE).all(), (std, z.tolist())


def _product_moment(d_k: int, k: int) -> float:
    """``E[(q . k)^(2k)]``: given q the product is ``|q| g``, so it is
    ``E[chi^2_d^k] E[g^(2k)] = d (d + 2) ... (d + 2k - 2) (2k - 1)!!``."""
    chi = math.prod(d_k + 2 * j for j in range(k))
    return chi * math.prod(range(1, 2 * k, 2))


def test_std_se_matches_its_closed_form(variance):
    """se(s) = sqrt((m4 - m2^2) / N) / (2 sqrt(m2)) with m2 = d, m4 = 3 d^2 + 6 d gives
    sqrt((d + 3) / (2 N)). The table's se estimates it from the sample's m2 and m4; by the
    delta method (the odd moments vanish, so centring adds nothing at first order) the
    estimate of f = m4 - m2^2 has variance [Var z^4 - 4 m2 Cov(z^4, z^2) + 4 m2^2 Var z^2]
    / N and m2 its Var z^2 / N, and se's relative error is at most half of each relative
    error added. Checked within SE_MULTIPLE of that at N = hp_samples."""
    table, _ = variance
    n = VARIANCE.hp_samples
    for row in table.itertuples():
        m2, m4, m6, m8 = (_product_moment(row.d_k, k) for k in (1, 2, 3, 4))
        f = m4 - m2**2
        var_f = (m8 - m4**2) - 4 * m2 * (m6 - m4 * m2) + 4 * m2**2 * (m4 - m2**2)
        rel_sd = 0.5 * np.sqrt(var_f / n) / f + 0.5 * np.sqrt((m4 - m2**2) / n) / m2
        expected = np.sqrt((row.d_k + 3) / (2 * n))
        assert abs(row.std_hp_se / expected - 1) < SE_MULTIPLE * rel_sd, row.d_k


def test_derived_columns_follow_their_formulas(variance):
    table, _ = variance
    root = np.sqrt(table["d_k"].to_numpy(np.float64))
    # Exact: the same float64 operations on the same numbers.
    for measured, rel in (("std_measured", "rel_error"), ("std_hp", "rel_error_hp")):
        np.testing.assert_array_equal(table[rel], table[measured] / root - 1.0)
    np.testing.assert_array_equal(table["rel_error_se"], table["std_se"] / root)
    np.testing.assert_array_equal(table["rel_error_hp_se"], table["std_hp_se"] / root)


def _float64_std(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean((x - x.mean()) ** 2)))


def test_headline_std_recomputed_from_its_draws(variance):
    """Sample t of d_k is ``k . q`` of the unit normals drawn from trial key t
    (``fold_in(fold_in(key(seed), d_k), t)``), here multiplied out in float64. The table's
    float32 products differ by <= (d_k + 2 ULPS) EPS sum_j |q_j k_j| each, and a std moves
    by at most the rms of such per-sample errors (|s(x) - s(y)| <= s(x - y)); its scaled
    column divides by sqrt(d_k) in float32 (two more roundings: 2 EPS of each value)."""
    table, _ = variance

    def draw(key, d_k):
        kq, kk = jax.random.split(key)
        return jax.random.normal(kq, (d_k,)), jax.random.normal(kk, (1, d_k))[0]

    for row in table.itertuples():
        keys = trial_keys(jax.random.key(VARIANCE.seed), row.d_k, VARIANCE.samples)
        with jax.threefry_partitionable(False):
            q, k = jax.jit(jax.vmap(lambda key, d=row.d_k: draw(key, d)))(keys)
        q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
        z = np.sum(q * k, -1)
        err = (row.d_k + 2 * ULPS) * EPS * np.sum(np.abs(q * k), -1)
        rms = float(np.sqrt(np.mean(err**2)))
        std = _float64_std(z)
        assert abs(row.std_measured - std) <= rms, row.d_k
        scaled_err = np.sqrt(np.mean((err + 2 * EPS * np.abs(z)) ** 2)) / np.sqrt(row.d_k)
        assert abs(row.std_scaled - std / np.sqrt(row.d_k)) <= scaled_err, row.d_k


def test_high_precision_std_recomputed_from_its_own_stream(variance):
    """The hp column draws ``|q| g`` with |q|^2 ~ chi^2(d_k) from ``fold_in(fold_in(key(seed),
    HP_STREAM), d_k)`` (chunk 0: one chunk at 1,000,000 draws). Re-drawn here and multiplied
    in float64: the table's float32 sqrt and product add (2 ULPS + 2) EPS |z| per value."""
    table, _ = variance
    stream = jax.random.fold_in(jax.random.key(VARIANCE.seed), HP_STREAM)
    n = VARIANCE.hp_samples

    @jax.jit
    def draw(key, d_k):
        chi2_key, normal_key = jax.random.split(key)
        return jax.random.chisquare(chi2_key, d_k, (n,)), jax.random.normal(normal_key, (n,))

    for row in table.itertuples():
        key = jax.random.fold_in(jax.random.fold_in(stream, row.d_k), 0)
        chi2, g = (np.asarray(a, np.float64) for a in draw(key, jnp.float32(row.d_k)))
        z = np.sqrt(chi2) * g
        rms = float(np.sqrt(np.mean(((2 * ULPS + 2) * EPS * z) ** 2)))
        assert abs(row.std_hp - _float64_std(z)) <= rms, row.d_k
        # ... and it is another stream than the headline one: the two estimates of one std
        # are not the same number.
        assert row.std_hp != row.std_measured


# --- experiments 02 and 03 ---------------------------------------------------------------


def test_sweep_columns_rows_and_progress(sweeps):
    for sampler, (saturation, jacobian, counts) in sweeps.items():
        settings = ["variant", "d_k", "n_keys", "trials", "sampler"]
        assert list(saturation.columns) == [
            *settings, "max_weight_mean", "max_weight_sem", "entropy_mean", "entropy_sem",
        ]  # fmt: skip
        assert list(jacobian.columns) == [*settings, "jacobian_fro_mean", "jacobian_fro_sem"]
        for table in (saturation, jacobian):
            expected = [(v, d) for v in ("scaled", "unscaled") for d in DKS]
            assert list(zip(table["variant"], table["d_k"], strict=True)) == expected
            assert (table["n_keys"] == N_KEYS).all() and (table["trials"] == TRIALS).all()
            assert (table["sampler"] == sampler).all()
        assert sum(counts) == len(DKS) * TRIALS


@functools.cache  # both variants of a width read the same draws
def _draws(sampler: str, d_k: int) -> tuple[np.ndarray, np.ndarray]:
    """float64 unscaled logits ``[trials, n_keys]`` of every trial of ``sampler`` from its
    own float32 draws, and the bound on the float32 logits' error, relative to |scale|."""
    keys = trial_keys(jax.random.key(5), d_k, TRIALS)
    if sampler == "direct":

        def draw(key):
            kq, kk = jax.random.split(key)
            return jax.random.normal(kq, (d_k,)), jax.random.normal(kk, (N_KEYS, d_k))

        with jax.threefry_partitionable(False):
            q, k = (np.asarray(a, np.float64) for a in jax.jit(jax.vmap(draw))(keys))
        z = np.einsum("tnd,td->tn", k, q)
        # d_k-term float32 product, the normal transform of q and k, the scale.
        z_err = (d_k + 2 * ULPS + 2) * EPS * np.einsum("tnd,td->tn", np.abs(k), np.abs(q))
        return z, z_err

    widths = np.full((TRIALS,), d_k, np.float32)
    with jax.threefry_partitionable(False):
        chi2, g = (np.asarray(a, np.float64) for a in _draw_exact(keys, widths))
    z = np.sqrt(chi2)[:, None] * g
    # float32 sqrt, product and scale, and the samplers' transforms.
    return z, (2 * ULPS + 3) * EPS * np.abs(z)


def _draw_exact_one(key, width):
    """The exact sampler's chi-square and normals of one trial (as ``exact_logits``)."""
    kr, kg = jax.random.split(key)
    return jax.random.chisquare(kr, width), jax.random.normal(kg, (N_KEYS,))


#: One program for every width (traced): the chi-square sampler is slow to compile.
_draw_exact = jax.jit(jax.vmap(_draw_exact_one))
#: The softmax Jacobian of each row, by autodiff (run under float64).
_softmax_jacobians = jax.jit(jax.vmap(jax.jacfwd(jax.nn.softmax)))


def _softmax64(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    gap = x.max(-1, keepdims=True) - x
    e = np.exp(-gap)
    return e / e.sum(-1, keepdims=True), gap


def _reference(sampler: str, d_k: int, variant: str) -> tuple[np.ndarray, np.ndarray]:
    """``[statistic, trial]``: the float64 max weight and entropy of ``softmax(c z)``, the
    Jacobian's Frobenius norm by float64 autodiff of softmax, and bounds on the error of the
    table's float32 evaluation of each.

    Logit errors within +-M move p_i by <= p_i (1 - p_i) expm1(2M); the float32 softmax rounds
    z - max (EPS |z - max|), exp, the n-term sum and the division, and may flush weights
    below TINY. The max moves by at most the largest weight error; the entropy by
    sum |ln p + 1| dp plus its own rounding (log, products, the n-term sum); the norm by twice
    the largest relative error of the weights above TINY plus 4 n EPS of itself, and by
    3 n TINY for those below (changing one weight by d moves J by <= (1 + 2 |p|) |d| in
    Frobenius norm); float64 autodiff's 1 - p_m adds an absolute eps64 per entry (4 EPS64
    in all)."""
    z, z_err = _draws(sampler, d_k)
    scale = 1 / np.sqrt(d_k) if variant == "scaled" else 1.0
    p, gap = _softmax64(scale * z)
    n = N_KEYS
    big_m = (scale * z_err).max(-1, keepdims=True)
    relative = (1 - p) * np.expm1(2 * big_m) + (gap + ULPS + n + 2) * EPS
    e_p = p * relative + TINY
    log_p = np.log(np.where(p > 0, p, 1.0))
    entropy = -np.sum(p * log_p, -1)
    e_entropy = np.sum(np.abs(log_p + 1) * e_p, -1) + (n + ULPS + 1) * EPS * entropy

    with jax.enable_x64(True):
        jacobian = _softmax_jacobians(jnp.asarray(scale * z))
    frobenius = np.sqrt(np.sum(np.asarray(jacobian) ** 2, axis=(-2, -1)))
    largest = np.max(np.where(p >= TINY, relative, 0.0), -1)
    e_frobenius = (2 * largest + 4 * n * EPS) * frobenius + 3 * n * TINY + 4 * EPS64
    values = np.stack([p.max(-1), entropy, frobenius])
    return values, np.stack([e_p.max(-1), e_entropy, e_frobenius])


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_sweep_means_recomputed_in_float64(sweeps, sampler):
    """Each mean and SEM against the float64 statistics of the same rows: a mean moves by at
    most the mean of the per-trial bounds, a SEM by sqrt(sum b^2 / (N - 1)) / sqrt(N)
    (|s(x) - s(y)| <= s(x - y))."""
    saturation, jacobian, _ = sweeps[sampler]
    table = saturation.merge(jacobian, on=["variant", "d_k", "n_keys", "trials", "sampler"])
    for row in table.to_dict("records"):
        values, bounds = _reference(sampler, row["d_k"], row["variant"])
        for s, name in enumerate(STATISTICS):
            where = (sampler, row["variant"], row["d_k"], name)
            assert abs(row[f"{name}_mean"] - values[s].mean()) <= bounds[s].mean(), where
            sem = values[s].std(ddof=1) / np.sqrt(TRIALS)
            sem_bound = np.sqrt(np.sum(bounds[s] ** 2) / (TRIALS - 1) / TRIALS)
            assert abs(row[f"{name}_sem"] - sem) <= sem_bound, where


def test_samplers_agree_within_their_standard_errors(sweeps):
    """The direct and the exact sampler draw from one law (independent draws, seed 5 each:
    different streams, since the samplers split their keys differently)."""
    columns = [f"{s}_{kind}" for s in STATISTICS for kind in ("mean", "sem")]
    direct, exact = (
        sweeps[s][0].merge(sweeps[s][1], on=["variant", "d_k"])[columns] for s in SAMPLERS
    )
    for name in STATISTICS:
        gap = np.abs(direct[f"{name}_mean"] - exact[f"{name}_mean"])
        bound = SE_MULTIPLE * np.hypot(direct[f"{name}_sem"], exact[f"{name}_sem"])
        assert (gap <= bound).all(), (name, (gap / bound).tolist())


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_variants_see_the_same_rows(sweeps, sampler):
    """Common random numbers: both variants evaluate the same rows z, so at d_k = 1 (scale
    1/sqrt(1) = 1 exactly) their tables are equal, and at d_k > 1 the unscaled row, a colder
    softmax of the same logits, has the larger max weight (p_max = 1 / sum_i exp(c (z_i -
    z_max)) grows with c) and the lower entropy (dH/dc = -c Var_p(z) <= 0), in every trial
    and so in the mean."""
    saturation, jacobian, _ = sweeps[sampler]
    table = saturation.merge(jacobian, on=["variant", "d_k"]).set_index(["variant", "d_k"])
    numbers = [f"{s}_{kind}" for s in STATISTICS for kind in ("mean", "sem")]
    scaled, unscaled = table.loc["scaled", numbers], table.loc["unscaled", numbers]
    pd.testing.assert_series_equal(scaled.loc[1], unscaled.loc[1], check_names=False)
    wider = [d for d in DKS if d > 1]
    assert (unscaled.loc[wider, "max_weight_mean"] > scaled.loc[wider, "max_weight_mean"]).all()
    assert (unscaled.loc[wider, "entropy_mean"] < scaled.loc[wider, "entropy_mean"]).all()
