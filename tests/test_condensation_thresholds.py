"""attnlab.studies.condensation.thresholds: the predicted threshold 2 ln n and the measured
ones, on tables whose crossings are known."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from attnlab.studies.condensation.thresholds import (
    first_crossing,
    measured_thresholds,
    threshold_dk,
)

EPS64 = float(np.finfo(np.float64).eps)
#: float64 interpolation in log2 d_k: t = (level - v0) / (v1 - v0) from values ~0.1-1
#: (a few eps64 relative to |level| + |v0|, over |v1 - v0| >= 0.1), then 2^x: < 1e-14.
INTERP_RTOL = 1e-14


def test_threshold_is_two_ln_n():
    # numpy's and math's float64 log, a few ulp each, then an exact doubling.
    assert threshold_dk(256) == pytest.approx(2 * math.log(256), rel=8 * EPS64)
    # Exact: the same float64 operations.
    np.testing.assert_array_equal(threshold_dk(np.array([4, 4096])), 2 * np.log([4, 4096]))


def test_first_crossing_interpolates_in_log2():
    d_k = np.array([1.0, 2.0, 4.0, 8.0])
    assert first_crossing(d_k, np.array([0.1, 0.2, 0.3, 0.4]), 0.9) == (
        pytest.approx(np.nan, nan_ok=True),
        pytest.approx(np.nan, nan_ok=True),
    )
    assert first_crossing(d_k, np.array([0.6, 0.7, 0.8, 0.9]), 0.5) == (1.0, 1.0)
    grid_dk, at = first_crossing(d_k, np.array([0.1, 0.2, 0.4, 0.8]), 0.3)
    assert grid_dk == 4.0
    assert at == pytest.approx(2.0**1.5, rel=INTERP_RTOL)


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
    # numpy's and math's float64 log, a few ulp each, then an exact doubling.
    assert row.n_keys == 8 and row.threshold_dk == pytest.approx(2 * math.log(8), rel=8 * EPS64)
    # max weight 0.5 between d_k 2 (0.3) and 4 (0.6): two thirds of the way in log2.
    assert row.saturation_dk_grid == 4
    assert row.saturation_dk == pytest.approx(2 ** (1 + 2 / 3), rel=INTERP_RTOL)
    # 2x scaled = 0.4, first reached between d_k 2 and 4, a third of the way.
    assert row.departure_dk_grid == 4
    assert row.departure_dk == pytest.approx(2 ** (1 + 1 / 3), rel=INTERP_RTOL)
    at = np.interp(np.log2(2 * math.log(8)), np.log2(d_k), unscaled)
    assert row.max_weight_at_threshold == pytest.approx(at, rel=INTERP_RTOL)
