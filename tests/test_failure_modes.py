"""attnlab.studies.failure_modes.compute: float16 overflow, mask fills, correlated q and k."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from attnlab.studies.failure_modes.compute import (
    CORRELATION_COLUMNS,
    FLOAT16_EXP_LIMIT,
    MASK_COLUMNS,
    OVERFLOW_COLUMNS,
    CorrelationConfig,
    OverflowConfig,
    correlated_products,
    overflow_rows,
    overflow_thresholds,
    predicted_logit_moments,
    run_correlation,
    run_masks,
    run_overflow,
    softmax_in_dtype,
    stored_value,
    total_variation,
)

#: The correlation settings of the end-to-end test (one compiled program for both).
CORRELATION = CorrelationConfig(dks=(4, 16), samples=2000, seed=0)


def test_float16_exp_limit():
    assert math.isclose(FLOAT16_EXP_LIMIT, math.log(65504))


def test_float16_softmax_overflows_without_max_subtraction():
    row = jnp.zeros((2, 8)).at[:, 0].set(jnp.array([11.0, 11.2]))
    naive = np.asarray(softmax_in_dtype(row, jnp.float16, subtract_max=False), np.float64)
    safe = np.asarray(softmax_in_dtype(row, jnp.float16), np.float64)
    assert np.isfinite(naive[0]).all()
    assert np.isnan(naive[1, 0]) and (naive[1, 1:] == 0).all()  # inf / inf and 1 / inf
    assert np.isfinite(safe).all()
    np.testing.assert_allclose(safe.sum(-1), 1, atol=2e-3)


def test_overflow_rows_have_max_one():
    units = overflow_rows(OverflowConfig(rows=16, n_keys=8))
    assert units.shape == (16, 8)
    np.testing.assert_array_equal(units.max(-1), 1.0)
    assert (units >= -1).all()


def test_total_variation_marks_nonfinite_rows():
    p = np.array([[0.5, 0.5], [np.nan, 0.0], [1.0, 0.0]])
    ref = np.array([[0.5, 0.5], [0.5, 0.5], [0.5, 0.5]])
    np.testing.assert_array_equal(total_variation(p, ref), [0.0, np.inf, 0.5])


def test_overflow_thresholds():
    config = OverflowConfig(max_logits=(1.0, 5.0, 11.0, 11.25, 30.0), rows=8, n_keys=16)
    frame = run_overflow(config)
    assert list(frame.columns) == list(OVERFLOW_COLUMNS)
    naive = frame[frame.method == "float16"].set_index("max_logit")
    assert naive.loc[[11.25, 30.0], "nonfinite_fraction"].eq(1).all()
    assert naive.loc[[1.0, 5.0], "nonfinite_fraction"].eq(0).all()
    assert np.isinf(naive.loc[30.0, "tv_error_max"])
    found = overflow_thresholds(frame).set_index("method")
    assert found.loc["float16", "first_nonfinite"] == 11.25
    for method in ("float16, max subtracted", "float32 upcast (masked_softmax)"):
        assert np.isnan(found.loc[method, "first_nonfinite"])
        assert np.isnan(found.loc[method, "first_error_above_tol"])
    assert found.loc["float16, max subtracted", "max_tv_error_before_overflow"] < 2e-3
    assert found.loc["float32 upcast (masked_softmax)", "max_tv_error_before_overflow"] < 1e-6


def test_stored_fill_values():
    assert stored_value(-1e9, jnp.float16) == -np.inf
    assert stored_value(-1e9, jnp.bfloat16) == pytest.approx(-1e9, rel=1e-2)
    assert stored_value(-1e9, jnp.float32) == -1e9
    assert stored_value(float(jnp.finfo(jnp.float16).min), jnp.float16) == -65504.0


@pytest.fixture(scope="module")
def masks() -> pd.DataFrame:
    return run_masks(seed=0)


def test_mask_table(masks):
    assert list(masks.columns) == list(MASK_COLUMNS)
    assert len(masks) == 3 * 4 * 2
    partly = masks[masks.row == "partly masked"]
    assert not partly.output_nan.any() and not partly.grad_nan.any()
    assert (partly.leaked_mass == 0).all()
    np.testing.assert_allclose(partly.row_sum, 1, atol=2e-3)
    full = masks[masks.row == "fully masked"].set_index(["dtype", "fill"])
    nan = {("float16", "-inf"), ("float16", "-1e9"), ("bfloat16", "-inf"), ("float32", "-inf")}
    for key, row in full.iterrows():
        if key[1] == "masked_softmax":
            assert not row.output_nan and row.row_sum == 0 and not row.grad_nan
        elif key in nan:
            assert row.output_nan and row.grad_nan and np.isnan(row.leaked_mass)
        else:  # a finite fill: uniform over the masked keys
            assert not row.output_nan and row.leaked_mass == pytest.approx(1.0)
            assert row.max_abs_error == pytest.approx(1 / 8)


def test_predicted_moments():
    mean, std = predicted_logit_moments(64, np.array([-1.0, 0.0, 0.5]))
    np.testing.assert_allclose(mean, [-64, 0, 32])
    np.testing.assert_allclose(std, np.sqrt(64 * np.array([2.0, 1.0, 1.25])))


def test_correlated_products_at_the_extremes():
    rhos = np.asarray(CORRELATION.rhos)
    products = correlated_products(
        jax.random.key(CORRELATION.seed), CORRELATION.dks, CORRELATION.rhos, CORRELATION.samples
    )
    assert products.shape == (CORRELATION.samples, len(CORRELATION.dks), len(rhos))
    # rho = 1: q = k, so q . k = |k|^2 >= 0; rho = -1: its negative.
    plus, minus = products[..., rhos == 1.0][..., 0], products[..., rhos == -1.0][..., 0]
    assert (plus >= 0).all()
    np.testing.assert_allclose(minus, -plus, rtol=1e-6)


def test_correlation_matches_the_derivation():
    frame = run_correlation(CORRELATION)
    assert list(frame.columns) == list(CORRELATION_COLUMNS)
    assert len(frame) == len(CORRELATION.dks) * len(CORRELATION.rhos)
    assert (frame.std_z.abs() < 5).all()
    mean_z = (frame.mean_measured - frame.mean_predicted) / frame.mean_se
    assert (mean_z.abs() < 5).all()
