"""attnlab.studies.failure_modes.thresholds: the first max logit at which each softmax of
part (a) breaks, on a table whose answers are known (the computed table:
``test_failure_modes_compute``)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnlab.studies.failure_modes.study import TV_TOLERANCE
from attnlab.studies.failure_modes.thresholds import overflow_thresholds


def test_overflow_thresholds_on_a_known_table():
    s = [1.0, 2.0, 3.0, 4.0]
    frame = pd.DataFrame(
        {
            "method": ["naive"] * 4 + ["safe"] * 4,
            "max_logit": s[::-1] + s,  # unsorted: the reader sorts by max logit
            "nonfinite_fraction": [1.0, 0.5, 0.0, 0.0] + [0.0] * 4,
            "zero_row_fraction": [0.0, 0.25, 0.0, 0.0] + [0.0] * 4,
            "tv_error_max": [np.inf, np.inf, 2 * TV_TOLERANCE, 1e-4] + [1e-6] * 4,
        }
    )
    found = overflow_thresholds(frame).set_index("method")
    assert list(found.index) == ["naive", "safe"]  # the table's order
    naive = found.loc["naive"]
    assert (naive.first_nonfinite, naive.first_zero_row, naive.first_error_above_tol) == (
        3.0,
        3.0,
        2.0,
    )
    assert naive.max_tv_error_before_overflow == 2 * TV_TOLERANCE  # at s = 1 and 2
    assert naive.sweep_max == 4.0
    safe = found.loc["safe"]
    assert np.isnan([safe.first_nonfinite, safe.first_zero_row, safe.first_error_above_tol]).all()
    assert safe.max_tv_error_before_overflow == 1e-6
    # The tolerance is a parameter: above the naive method's finite error, it first fails
    # where a weight stops being finite.
    looser = overflow_thresholds(frame, tolerance=3 * TV_TOLERANCE).set_index("method")
    assert looser.loc["naive", "first_error_above_tol"] == 3.0
