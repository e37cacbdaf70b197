"""attnlab.studies.failure_modes.compute: float16 overflow, mask fills, correlated q and k."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from attnlab.studies.failure_modes.compute import (
    MASK_DTYPES,
    CorrelationConfig,
    OverflowConfig,
    correlated_products,
    overflow_rows,
    predicted_logit_moments,
    run_correlation,
    run_masks,
    run_overflow,
    softmax_in_dtype,
    stored_value,
    total_variation,
)
from attnlab.studies.failure_modes.study import (
    CORRELATION_COLUMNS,
    FLOAT16_EXP_LIMIT,
    MASK_COLUMNS,
    OVERFLOW_COLUMNS,
)
from attnlab.studies.failure_modes.thresholds import overflow_thresholds

#: The correlation settings of the end-to-end test (one compiled program for both).
CORRELATION = CorrelationConfig(dks=(4, 16), samples=2000, seed=0)
EPS = float(np.finfo(np.float32).eps)
EPS64 = float(np.finfo(np.float64).eps)
#: XLA's float32 exp is accurate to a few ulp; we allow 4 eps.
ULPS = 4


def unit_roundoff(dtype) -> float:
    """Half the machine epsilon: the relative error of one rounding to ``dtype``."""
    return float(jnp.finfo(dtype).eps) / 2


def row_sum_tolerance(dtype, n: int) -> float:
    """|sum of a softmax row - 1| computed in ``dtype``: the weights are e_i / S for the
    rounded sum S of the same e_i (accumulated in float32, n EPS, then rounded to dtype)
    and the division (2 roundings, in case of a reciprocal), plus n half-subnormals."""
    info = jnp.finfo(dtype)
    return 3 * unit_roundoff(dtype) + n * EPS + n * float(info.smallest_subnormal)


def test_float16_exp_limit():
    # numpy's and math's float64 log of the same number, a few ulp each.
    assert math.isclose(FLOAT16_EXP_LIMIT, math.log(65504), rel_tol=8 * EPS64)


def test_float16_softmax_overflows_without_max_subtraction():
    row = np.zeros((2, 8), np.float32)  # numpy: eager jnp would compile each step
    row[:, 0] = [11.0, 11.2]
    naive = np.asarray(softmax_in_dtype(row, jnp.float16, subtract_max=False), np.float64)
    safe = np.asarray(softmax_in_dtype(row, jnp.float16), np.float64)
    assert np.isfinite(naive[0]).all()
    assert np.isnan(naive[1, 0]) and (naive[1, 1:] == 0).all()  # inf / inf and 1 / inf
    assert np.isfinite(safe).all()
    np.testing.assert_allclose(safe.sum(-1), 1, atol=row_sum_tolerance(jnp.float16, 8))


def test_overflow_rows_have_max_one():
    units = overflow_rows(OverflowConfig(rows=16, n_keys=8))
    assert units.shape == (16, 8)
    np.testing.assert_array_equal(units.max(-1), 1.0)  # exact: the pivot over itself
    assert (units >= -1).all()


def test_total_variation_marks_nonfinite_rows():
    p = np.array([[0.5, 0.5], [np.nan, 0.0], [1.0, 0.0]])
    ref = np.array([[0.5, 0.5], [0.5, 0.5], [0.5, 0.5]])
    # Exact: halves and their sums are exact in float64.
    np.testing.assert_array_equal(total_variation(p, ref), [0.0, np.inf, 0.5])


def test_overflow_thresholds():
    config = OverflowConfig(max_logits=(1.0, 5.0, 11.0, 11.25, 30.0), rows=8, n_keys=16)
    frame = run_overflow(config)
    assert list(frame.columns) == list(OVERFLOW_COLUMNS)
    naive = frame[frame.method == "float16"].set_index("max_logit")
    # Fractions of 8 rows and grid values are exact.
    assert naive.loc[[11.25, 30.0], "nonfinite_fraction"].eq(1).all()
    assert naive.loc[[1.0, 5.0], "nonfinite_fraction"].eq(0).all()
    assert np.isinf(naive.loc[30.0, "tv_error_max"])
    found = overflow_thresholds(frame).set_index("method")
    assert found.loc["float16", "first_nonfinite"] == 11.25
    for method in ("float16, max subtracted", "float32 upcast (masked_softmax)"):
        assert np.isnan(found.loc[method, "first_nonfinite"])
        assert np.isnan(found.loc[method, "first_error_above_tol"])
    # Against the float64 softmax p of the same float16 logits z, a row's weights are off
    # by their relative rounding in the softmax's dtype (unit roundoff u): z - max
    # (u |z - m|), exp (u, after XLA's float32 exp, ULPS EPS), the sum (float32, n EPS, then
    # rounded) and the division (2 u); so TV = 1/2 sum |dp| <= 1/2 (u E_p|z - m| + 4 u +
    # ULPS EPS + n EPS), plus n subnormals for weights that underflow.
    units = overflow_rows(config)
    s = np.asarray(config.max_logits)
    z = (s[:, None, None] * units[None]).astype(np.float16).astype(np.float64)
    gap = z.max(-1, keepdims=True) - z
    p = np.exp(-gap) / np.exp(-gap).sum(-1, keepdims=True)
    mean_gap = np.sum(p * gap, -1).max(-1)  # [s]: the worst row of each max logit
    n = config.n_keys
    for method, dtype in (
        ("float16, max subtracted", jnp.float16),
        ("float32 upcast (masked_softmax)", jnp.float32),
    ):
        u, tiny = unit_roundoff(dtype), float(jnp.finfo(dtype).smallest_subnormal)
        bound = 0.5 * (u * mean_gap + 4 * u + (ULPS + n) * EPS) + n * tiny
        rows = frame[frame.method == method]
        assert (rows.tv_error_max.to_numpy() <= bound).all(), method
        assert found.loc[method, "max_tv_error_before_overflow"] <= bound.max()


def test_stored_fill_values():
    assert stored_value(-1e9, jnp.float16) == -np.inf
    # Rounded to float32, then to bfloat16: one unit roundoff of each.
    rel = unit_roundoff(jnp.bfloat16) + unit_roundoff(jnp.float32)
    assert stored_value(-1e9, jnp.bfloat16) == pytest.approx(-1e9, rel=rel)
    assert stored_value(-1e9, jnp.float32) == -1e9  # exact: 1e9 = 2^9 * 1953125 < 2^33
    assert stored_value(float(jnp.finfo(jnp.float16).min), jnp.float16) == -65504.0


@pytest.fixture(scope="module")
def masks() -> pd.DataFrame:
    return run_masks(seed=0)


def test_mask_table(masks):
    assert list(masks.columns) == list(MASK_COLUMNS)
    assert len(masks) == 3 * 4 * 2
    partly = masks[masks.row == "partly masked"]
    assert not partly.output_nan.any() and not partly.grad_nan.any()
    assert (partly.leaked_mass == 0).all()  # exact: exp of the fill underflows to 0
    for row in partly.itertuples():
        assert abs(row.row_sum - 1) <= row_sum_tolerance(MASK_DTYPES[row.dtype], 8), row
    full = masks[masks.row == "fully masked"].set_index(["dtype", "fill"])
    nan = {("float16", "-inf"), ("float16", "-1e9"), ("bfloat16", "-inf"), ("float32", "-inf")}
    for key, row in full.iterrows():
        if key[1] == "masked_softmax":
            assert not row.output_nan and row.row_sum == 0 and not row.grad_nan
        elif key in nan:
            assert row.output_nan and row.grad_nan and np.isnan(row.leaked_mass)
        else:  # a finite fill: uniform over the masked keys
            # All eight weights e / S of equal e: within a row sum's tolerance of 1 in
            # total, each within its relative share of 1/8 (the reference is 0).
            tol = row_sum_tolerance(MASK_DTYPES[key[0]], 8)
            assert not row.output_nan and row.leaked_mass == pytest.approx(1.0, abs=tol)
            assert row.max_abs_error == pytest.approx(1 / 8, rel=tol)


def test_predicted_moments():
    mean, std = predicted_logit_moments(64, np.array([-1.0, 0.0, 0.5]))
    # Exact: products and sums of small dyadic numbers, and the same float64 sqrt.
    np.testing.assert_array_equal(mean, [-64, 0, 32])
    np.testing.assert_array_equal(std, np.sqrt(64 * np.array([2.0, 1.0, 1.25])))


def test_correlated_products_at_the_extremes():
    rhos = np.asarray(CORRELATION.rhos)
    products = correlated_products(
        jax.random.key(CORRELATION.seed), CORRELATION.dks, CORRELATION.rhos, CORRELATION.samples
    )
    assert products.shape == (CORRELATION.samples, len(CORRELATION.dks), len(rhos))
    # rho = 1: q = k, so q . k = |k|^2 >= 0; rho = -1: its negative.
    plus, minus = products[..., rhos == 1.0][..., 0], products[..., rhos == -1.0][..., 0]
    assert (plus >= 0).all()
    # Exact: q = +-k exactly (sqrt(1 - rho^2) = 0), and rounding to nearest is symmetric,
    # so the same cumulative sums of negated products are the negated sums.
    np.testing.assert_array_equal(minus, -plus)


def test_correlation_matches_the_derivation():
    frame = run_correlation(CORRELATION)
    assert list(frame.columns) == list(CORRELATION_COLUMNS)
    assert len(frame) == len(CORRELATION.dks) * len(CORRELATION.rhos)
    assert (frame.std_z.abs() < 5).all()  # 5 SE
    mean_z = (frame.mean_measured - frame.mean_predicted) / frame.mean_se
    assert (mean_z.abs() < 5).all()  # 5 SE
