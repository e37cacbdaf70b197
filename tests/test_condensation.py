"""attnlab.studies.condensation.compute: the (d_k, n) grid of 06 and its measured thresholds.

The grid functions compile one program (gamma sampler included) per grid shape, so every
test here uses ``DKS``, ``N_KEYS`` and ``TRIALS``, the settings of the end-to-end test.
"""

from __future__ import annotations

import math

import jax
import numpy as np
import pandas as pd
import pytest

from attnlab.studies.condensation.compute import (
    COLUMNS,
    CondensationConfig,
    first_crossing,
    max_weight_grid,
    measured_thresholds,
    run_condensation,
    threshold_dk,
)

DKS = (1, 4, 16)
N_KEYS = (4, 16)
TRIALS = 64


@pytest.fixture(scope="module")
def grid() -> np.ndarray:
    return max_weight_grid(jax.random.key(0), DKS, N_KEYS, TRIALS)


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return run_condensation(CondensationConfig(dks=DKS, n_keys=N_KEYS, trials=TRIALS, seed=0))


def test_threshold_is_two_ln_n():
    assert threshold_dk(256) == pytest.approx(2 * math.log(256))
    np.testing.assert_allclose(threshold_dk(np.array([4, 4096])), 2 * np.log([4, 4096]))


def test_grid_shape_bounds_and_d_k_1(grid):
    assert grid.shape == (TRIALS, len(DKS), len(N_KEYS), 2)
    for j, n in enumerate(N_KEYS):
        assert (grid[:, :, j] >= 1 / n - 1e-6).all() and (grid[:, :, j] <= 1 + 1e-6).all()
    # d_k = 1: z / sqrt(1) = z, so both variants see the same row.
    np.testing.assert_array_equal(grid[:, 0, :, 0], grid[:, 0, :, 1])
    # Unscaled attention is sharper at d_k = 16 on average, for every n.
    assert (grid[:, 2, :, 0].mean(0) > grid[:, 2, :, 1].mean(0)).all()


def test_table_matches_grid(grid, table):
    assert list(table.columns) == list(COLUMNS)
    assert table[["n_keys", "d_k"]].values.tolist() == [[n, d] for n in N_KEYS for d in DKS]
    first = table[(table.n_keys == 16) & (table.d_k == 4)].iloc[0]
    assert first.max_weight_unscaled_mean == pytest.approx(grid[:, 1, 1, 0].mean(), rel=1e-6)
    assert first.threshold_dk == pytest.approx(2 * math.log(16))
    np.testing.assert_allclose(
        table.gap_mean, table.max_weight_unscaled_mean - table.max_weight_scaled_mean, atol=1e-6
    )
    d_k_1 = table[table.d_k == 1]
    assert (d_k_1.gap_mean == 0).all() and (d_k_1.gap_sem == 0).all()
    assert (table[table.d_k > 1].filter(like="_sem") > 0).all().all()


def test_first_crossing_interpolates_in_log2():
    d_k = np.array([1.0, 2.0, 4.0, 8.0])
    assert first_crossing(d_k, np.array([0.1, 0.2, 0.3, 0.4]), 0.9) == (
        pytest.approx(np.nan, nan_ok=True),
        pytest.approx(np.nan, nan_ok=True),
    )
    assert first_crossing(d_k, np.array([0.6, 0.7, 0.8, 0.9]), 0.5) == (1.0, 1.0)
    grid_dk, at = first_crossing(d_k, np.array([0.1, 0.2, 0.4, 0.8]), 0.3)
    assert grid_dk == 4.0
    assert at == pytest.approx(2.0**1.5)


def test_measured_thresholds_on_a_known_table():
    d_k = [1, 2, 4, 8]
    unscaled = [0.2, 0.3, 0.6, 0.9]
    frame = pd.DataFrame(
        {
            "n_keys": 8,
            "d_k": d_k,
            "max_weight_unscaled_mean": unscaled,
            "max_weight_scaled_mean": [0.2, 0.2, 0.2, 0.2],
        }
    )
    row = measured_thresholds(frame).iloc[0]
    assert row.n_keys == 8 and row.threshold_dk == pytest.approx(2 * math.log(8))
    # max weight 0.5 between d_k 2 (0.3) and 4 (0.6): two thirds of the way in log2.
    assert row.saturation_dk_grid == 4
    assert row.saturation_dk == pytest.approx(2 ** (1 + 2 / 3))
    # 2x scaled = 0.4, first reached between d_k 2 and 4, a third of the way.
    assert row.departure_dk_grid == 4
    assert row.departure_dk == pytest.approx(2 ** (1 + 1 / 3))
    at = np.interp(np.log2(2 * math.log(8)), np.log2(d_k), unscaled)
    assert row.max_weight_at_threshold == pytest.approx(at)


def test_measured_thresholds_of_the_grid(table):
    found = measured_thresholds(table)
    assert found.n_keys.tolist() == list(N_KEYS)
    # 2 ln 4 = 2.8 and 2 ln 16 = 5.5 are inside the grid [1, 16].
    assert found.max_weight_at_threshold.between(0, 1).all()
