"""attnlab.studies.companion.compute: article 000's claims (top logit, width divisor, folding)."""

from __future__ import annotations

import math

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


def test_expected_max_normal_closed_forms():
    assert expected_max_normal(1) == pytest.approx(0.0, abs=1e-9)
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-7)
    assert expected_max_normal(3) == pytest.approx(1.5 / math.sqrt(math.pi), rel=1e-7)
    # Below the leading term sqrt(2 ln n) of the asymptotic expansion.
    assert 3.0 < expected_max_normal(512) < math.sqrt(2 * math.log(512))


def test_folding_ratios_follow_the_derivation():
    measured = fold_measurements(CONFIG)
    d_k = CONFIG.d_k
    for name, (power_q, _) in FOLDS.items():
        assert measured[f"{name}/logit_rel_diff"].shape == (CONFIG.fold_setups,)
        if name.endswith("only"):
            np.testing.assert_allclose(measured[f"{name}/logit_rel_diff"], d_k**0.25 - 1, rtol=1e-5)
            continue
        assert (measured[f"{name}/logit_rel_diff"] < 1e-5).all()
        np.testing.assert_allclose(measured[f"{name}/grad_ratio"], d_k**-power_q, rtol=1e-4)
        np.testing.assert_allclose(
            measured[f"{name}/sgd_logit_change_ratio"], d_k ** (-2 * power_q), rtol=1e-4
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
    gap = value(table, "standardized_top_gap")
    # The exact expected max of 512 normals (3.04), not sqrt(2 ln 512) = 3.53.
    assert abs(gap.value - gap.predicted) < 5 * gap["sem"] + 0.05
    absolute = value(table, "absolute_top_gap")
    assert abs(absolute.value - absolute.predicted) < 5 * absolute["sem"] + 0.5
    assert value(table, "sqrt_2_ln_n").value == pytest.approx(math.sqrt(2 * math.log(512)))
    assert 0 < value(table, "max_weight_unscaled").value < 0.99


def test_model_width_divisor(table):
    assert value(table, "divisor_per_head").value == 8
    assert value(table, "divisor_model_width").value == pytest.approx(math.sqrt(512))
    assert value(table, "over_flattening_factor").value == pytest.approx(math.sqrt(8), rel=1e-5)
    assert value(table, "max_weight_model_width").value < value(table, "max_weight_per_head").value
    for label in ("per_head", "model_width"):
        row = value(table, f"entropy_{label}")
        assert row.value < math.log(512)
        assert abs(row.value - row.predicted) < 5 * row["sem"] + 0.01
