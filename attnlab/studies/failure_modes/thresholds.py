"""Where a float16 softmax breaks, read from part (a)'s table of experiment 07 (pandas, no
JAX): the computation's tests, the figure and the report share it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnlab.studies.failure_modes.study import TV_TOLERANCE


def overflow_thresholds(frame: pd.DataFrame, tolerance: float = TV_TOLERANCE) -> pd.DataFrame:
    """Per method: the first max logit with a non-finite weight in some row, the first with
    an all-zero row, and the first with a total-variation error above ``tolerance``
    (non-finite counts); NaN if never. Also the worst error while every row is finite."""
    rows = []
    for method, group in frame.groupby("method", sort=False):
        group = group.sort_values("max_logit")
        nonfinite = group.max_logit[group.nonfinite_fraction > 0]
        zero_rows = group.max_logit[group.zero_row_fraction > 0]
        too_large = group.max_logit[group.tv_error_max > tolerance]
        rows.append(
            {
                "method": method,
                "first_nonfinite": float(nonfinite.iloc[0]) if len(nonfinite) else np.nan,
                "first_zero_row": float(zero_rows.iloc[0]) if len(zero_rows) else np.nan,
                "first_error_above_tol": float(too_large.iloc[0]) if len(too_large) else np.nan,
                "max_tv_error_before_overflow": float(
                    group.tv_error_max[group.nonfinite_fraction == 0].max()
                ),
                "sweep_max": float(group.max_logit.max()),
            }
        )
    return pd.DataFrame(rows)
