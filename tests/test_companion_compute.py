"""attnlab.studies.companion.compute: article 000's claims (top logit, width divisor, folding)."""

from __future__ import annotations

import math

import jax
import numpy as np
import pandas as pd
import pytest

from attnlab.studies.companion.compute import (
    COLUMNS,
    FOLDS,
    CompanionConfig,
    expected_max_normal,
    fold_measurements,
    run_companion,
)

#: The settings of the end-to-end test (the same compiled programs).
CONFIG = CompanionConfig(trials=50, fold_setups=2, seed=0)
EPS = float(np.finfo(np.float32).eps)
EPS64 = float(np.finfo(np.float64).eps)
#: The folding identities are exact in real arithmetic; they are checked in float64, where
#: the rounding along the longest chain (forward: d_model-, d_k- and two token-term sums;
#: backward the same; then a d_model d_k-term sum of squares, condition 1) times a generous
#: condition number KAPPA of the signed sums stays far below any claimed difference.
KAPPA = 1e4
CHAIN = 2 * (CONFIG.d_model + CONFIG.d_k + 2 * CONFIG.fold_tokens)
FOLD_RTOL = (CHAIN * KAPPA + CONFIG.d_model * CONFIG.d_k) * EPS64


def trapezoid_moment(k: int, n: int) -> float:
    """``E[M^k]`` for the max ``M`` of n standard normals (expected_max_normal's rule)."""
    x = np.linspace(-10.0, 10.0, 20001)
    cdf = 0.5 * (1.0 + np.asarray([math.erf(v / math.sqrt(2.0)) for v in x]))
    pdf = np.exp(-0.5 * x**2) / math.sqrt(2.0 * math.pi)
    return float(np.trapezoid(x**k * n * pdf * cdf ** (n - 1), x))


def test_expected_max_normal_closed_forms():
    # float64 trapezoid rule: its error is negligible for an analytic integrand below
    # 1e-20 outside [-10, 10]; the sum of 20001 terms rounds by < 20001 eps64 int|f| (< 1)
    # = 4.4e-12, relative to results >= 0.56.
    tol = 20001 * EPS64 / 0.5
    assert expected_max_normal(1) == pytest.approx(0.0, abs=tol)
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=tol)
    assert expected_max_normal(3) == pytest.approx(1.5 / math.sqrt(math.pi), rel=tol)
    # Below the leading term sqrt(2 ln n) of the asymptotic expansion.
    assert 3.0 < expected_max_normal(512) < math.sqrt(2 * math.log(512))


def test_folding_ratios_follow_the_derivation():
    # In float64 (other draws than the float32 experiment's): the identities are exact in
    # real arithmetic, and float64 keeps their rounding below FOLD_RTOL.
    with jax.enable_x64(True):
        measured = fold_measurements(CONFIG)
    d_k = CONFIG.d_k
    for name, (power_q, _) in FOLDS.items():
        assert measured[f"{name}/logit_rel_diff"].shape == (CONFIG.fold_setups,)
        if name.endswith("only"):
            expected = d_k**0.25 - 1
            np.testing.assert_allclose(measured[f"{name}/logit_rel_diff"], expected, rtol=FOLD_RTOL)
            continue
        assert (measured[f"{name}/logit_rel_diff"] < FOLD_RTOL).all()
        expected = d_k**-power_q
        np.testing.assert_allclose(measured[f"{name}/grad_ratio"], expected, rtol=FOLD_RTOL)
        np.testing.assert_allclose(
            measured[f"{name}/sgd_logit_change_ratio"], d_k ** (-2 * power_q), rtol=FOLD_RTOL
        )


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return run_companion(CONFIG)


def value(table: pd.DataFrame, quantity: str) -> pd.Series:
    return table.set_index("quantity").loc[quantity]


def test_table_schema(table):
    assert list(table.columns) == list(COLUMNS)
    assert table.quantity.is_unique
    assert set(table.claim) == {"top logit", "model-width divisor", "folded scale"}
    assert (table["sem"] >= 0).all()


def test_top_logit(table):
    n, d_k = CONFIG.n_keys, CONFIG.d_k
    e_max = expected_max_normal(n)
    gap = value(table, "standardized_top_gap")
    # The exact expected max of 512 normals (3.04), not sqrt(2 ln 512) = 3.53. Given q the
    # row is n i.i.d. normals g; (max - mean) / std divides by the row's own std s (ddof 0,
    # n s^2 ~ chi^2(n - 1), independent of the mean), which biases the expectation by
    # E[M] (E[1/s] - 1) + Cov(M, 1/s), |Cov| <= sd(M) sd(1/s): 5 SE plus that bound.
    inv_s = math.sqrt(n / 2) * math.exp(math.lgamma((n - 2) / 2) - math.lgamma((n - 1) / 2))
    sd_inv_s = math.sqrt(n / (n - 3) - inv_s**2)
    sd_max = math.sqrt(trapezoid_moment(2, n) - e_max**2)
    bias = e_max * abs(inv_s - 1) + sd_max * sd_inv_s
    assert abs(gap.value - gap.predicted) < 5 * gap["sem"] + bias
    absolute = value(table, "absolute_top_gap")
    # E[max - mean] = E|q| E[M] exactly, and E|q| (chi, d_k degrees) is below sqrt(d_k).
    chi_mean = math.sqrt(2) * math.exp(math.lgamma((d_k + 1) / 2) - math.lgamma(d_k / 2))
    bias = abs(chi_mean - math.sqrt(d_k)) * e_max
    assert abs(absolute.value - absolute.predicted) < 5 * absolute["sem"] + bias
    # Exact: the same float64 expression.
    assert value(table, "sqrt_2_ln_n").value == math.sqrt(2 * math.log(512))
    assert 0 < value(table, "max_weight_unscaled").value < 0.99


def entropy_bias(n: int, d_k: int, divisor: float) -> float:
    """O(1/n) bias of the mean entropy of ``softmax(z / divisor)`` against the large-n
    value ``ln n - s^2 / 2``: for n i.i.d. N(0, s^2) logits, expanding log S and
    sum(z e^z) / S to second order in their fluctuations gives
    ``(s^2 e^(s^2) - (e^(s^2) - 1) / 2) / n``; here ``s^2 = |q|^2 / divisor^2`` with
    ``|q|^2 ~ chi^2(d_k)``, whose moment generating function gives the expectations."""
    c = 1 / divisor**2
    e_exp = (1 - 2 * c) ** (-d_k / 2)  # E[e^(s^2)]
    e_s2_exp = c * d_k * (1 - 2 * c) ** (-d_k / 2 - 1)  # E[s^2 e^(s^2)]
    return (e_s2_exp - (e_exp - 1) / 2) / n


def test_model_width_divisor(table):
    n, d_k, d_model = CONFIG.n_keys, CONFIG.d_k, CONFIG.d_model
    assert value(table, "divisor_per_head").value == 8  # exact: sqrt(64)
    # Exact: the same float64 expression.
    assert value(table, "divisor_model_width").value == math.sqrt(d_model)
    # Per trial std(z / 8) / std(z * float32(1 / sqrt(512))): the power-of-two divisor is
    # exact, the other rounds each logit once; each float32 std sums n squares (n/2 EPS
    # after the root, insensitive to the mean's error) plus a few roundings: (n + 6) EPS.
    factor = value(table, "over_flattening_factor").value
    assert factor == pytest.approx(math.sqrt(8), rel=(n + 6) * EPS)
    # Paired draws: the hypot of the two SEs bounds the SE of the difference from above.
    wide, head = value(table, "max_weight_model_width"), value(table, "max_weight_per_head")
    assert head.value - wide.value > 5 * math.hypot(head["sem"], wide["sem"])
    for label, divisor in (("per_head", math.sqrt(d_k)), ("model_width", math.sqrt(d_model))):
        row = value(table, f"entropy_{label}")
        assert row.value < math.log(n)  # by > 0.06 nats (s^2 / 2), far above rounding
        # 5 SE, plus the O(1/n) bias of the second-order prediction (0.004 at s = 1).
        bias = entropy_bias(n, d_k, divisor)
        assert abs(row.value - row.predicted) < 5 * row["sem"] + abs(bias)
