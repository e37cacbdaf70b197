"""attnlab.studies.condensation.compute: the (d_k, n) grid of 06 (its thresholds on a known
table: ``test_condensation_thresholds``).

The grid functions compile one program (gamma sampler included) per grid shape, so every
test here uses ``DKS``, ``N_KEYS`` and ``TRIALS``, the settings of the end-to-end test.
"""

from __future__ import annotations

import math

import jax
import numpy as np
import pandas as pd
import pytest

from attnlab.core.estimates import mean_and_sem
from attnlab.studies.condensation.compute import (
    CondensationConfig,
    max_weight_grid,
    run_condensation,
)
from attnlab.studies.condensation.study import COLUMNS
from attnlab.studies.condensation.thresholds import measured_thresholds

DKS = (1, 4, 16)
N_KEYS = (4, 16)
TRIALS = 64
EPS = float(np.finfo(np.float32).eps)
EPS64 = float(np.finfo(np.float64).eps)
#: XLA's float32 exp is accurate to a few ulp; we allow 4 eps.
ULPS = 4


@pytest.fixture(scope="module")
def grid() -> np.ndarray:
    return max_weight_grid(jax.random.key(0), DKS, N_KEYS, TRIALS)


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return run_condensation(CondensationConfig(dks=DKS, n_keys=N_KEYS, trials=TRIALS, seed=0))


def test_grid_shape_bounds_and_d_k_1(grid):
    assert grid.shape == (TRIALS, len(DKS), len(N_KEYS), 2)
    for j, n in enumerate(N_KEYS):
        # In [1/n, 1] up to float32: the largest weight exp(0) / sum rounds in exp (ULPS),
        # the division (2) and, from below, the n-term sum.
        lo, hi = (1 - (n + ULPS + 2) * EPS) / n, 1 + (ULPS + 2) * EPS
        assert (grid[:, :, j] >= lo).all() and (grid[:, :, j] <= hi).all()
    # Exact: d_k = 1: z / sqrt(1) = z, so both variants see the same row, same ops.
    np.testing.assert_array_equal(grid[:, 0, :, 0], grid[:, 0, :, 1])
    # Unscaled attention is sharper at d_k = 16 on average, for every n: the paired
    # difference exceeds 5 standard errors.
    gap_mean, gap_sem = mean_and_sem(grid[:, 2, :, 0] - grid[:, 2, :, 1], axis=0)
    assert (gap_mean > 5 * gap_sem).all()


def test_table_matches_grid(grid, table):
    assert list(table.columns) == list(COLUMNS)
    assert table[["n_keys", "d_k"]].values.tolist() == [[n, d] for n in N_KEYS for d in DKS]
    first = table[(table.n_keys == 16) & (table.d_k == 4)].iloc[0]
    # The same float32 values (the same program and key), averaged in float64 by both:
    # the sums of TRIALS like-signed terms round by < TRIALS eps64.
    mean64 = grid[:, 1, 1, 0].astype(np.float64).mean()
    assert first.max_weight_unscaled_mean == pytest.approx(mean64, rel=TRIALS * EPS64)
    assert first.threshold_dk == 2 * math.log(16)  # exact: the same float64 expression
    # The gap is averaged from float32 differences |w_u - w_s| <= 1, each rounded by at
    # most EPS / 2; the float64 means add ~TRIALS eps64.
    difference = table.max_weight_unscaled_mean - table.max_weight_scaled_mean
    np.testing.assert_allclose(table.gap_mean, difference, rtol=0, atol=EPS / 2 + TRIALS * EPS64)
    d_k_1 = table[table.d_k == 1]
    # Exact: identical rows at d_k = 1 (above), so every difference is 0.
    assert (d_k_1.gap_mean == 0).all() and (d_k_1.gap_sem == 0).all()
    assert (table[table.d_k > 1].filter(like="_sem") > 0).all().all()


def test_measured_thresholds_of_the_grid(table):
    found = measured_thresholds(table)
    assert found.n_keys.tolist() == list(N_KEYS)
    # 2 ln 4 = 2.8 and 2 ln 16 = 5.5 are inside the grid [1, 16].
    assert found.max_weight_at_threshold.between(0, 1).all()
