"""Where unscaled attention condenses, read from experiment 06's table (pandas and numpy,
no JAX): the predicted threshold ``d_k = 2 ln n`` and, per ``n``, the measured ones. The
computation (``compute``), the figure and the report share these."""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnlab.studies.condensation.study import DEPARTURE_RATIO, SATURATED_MAX_WEIGHT


def threshold_dk(n_keys: int | np.ndarray) -> float | np.ndarray:
    """The condensation threshold of unscaled attention, ``d_k = 2 ln n``."""
    return 2.0 * np.log(n_keys)


def first_crossing(d_k: np.ndarray, value: np.ndarray, level: float) -> tuple[float, float]:
    """The first grid ``d_k`` with ``value >= level`` and the crossing interpolated linearly
    in ``log2 d_k`` between it and the grid point before; ``(nan, nan)`` if never reached.

    The interpolated value equals the grid value when the first point already qualifies.
    """
    reached = np.flatnonzero(np.asarray(value) >= level)
    if reached.size == 0:
        return float("nan"), float("nan")
    i = int(reached[0])
    if i == 0:
        return float(d_k[0]), float(d_k[0])
    lo, hi = np.log2(d_k[i - 1]), np.log2(d_k[i])
    t = (level - value[i - 1]) / (value[i] - value[i - 1])
    return float(d_k[i]), float(2.0 ** (lo + t * (hi - lo)))


def measured_thresholds(frame: pd.DataFrame) -> pd.DataFrame:
    """Per ``n``, where unscaled attention leaves the scaled regime, against ``2 ln n``.

    Two criteria on the mean max weight ``w_u`` of unscaled attention (``w_s`` scaled):

    * saturation: ``w_u >= 1/2``, one key holds half of the mass on average;
    * departure: ``w_u >= 2 w_s``, twice as peaked as scaled attention on the same draws.

    For each, the first grid ``d_k`` that meets it and the crossing interpolated in
    ``log2 d_k``; also ``w_u`` interpolated at ``d_k = 2 ln n`` (NaN outside the grid).
    """
    rows = []
    for n, group in frame.groupby("n_keys", sort=True):
        group = group.sort_values("d_k")
        d_k = group.d_k.to_numpy(float)
        unscaled = group.max_weight_unscaled_mean.to_numpy()
        ratio = unscaled / group.max_weight_scaled_mean.to_numpy()
        sat_grid, sat_interp = first_crossing(d_k, unscaled, SATURATED_MAX_WEIGHT)
        dep_grid, dep_interp = first_crossing(d_k, ratio, DEPARTURE_RATIO)
        at = threshold_dk(n)
        inside = d_k[0] <= at <= d_k[-1]
        rows.append(
            {
                "n_keys": int(n),
                "threshold_dk": at,
                "saturation_dk_grid": sat_grid,
                "saturation_dk": sat_interp,
                "departure_dk_grid": dep_grid,
                "departure_dk": dep_interp,
                "max_weight_at_threshold": (
                    float(np.interp(np.log2(at), np.log2(d_k), unscaled)) if inside else np.nan
                ),
            }
        )
    return pd.DataFrame(rows)
