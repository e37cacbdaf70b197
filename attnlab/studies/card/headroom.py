"""The card's float16 headroom: how large q and k may grow before float16 breaks a mechanism.

Trained models carry large activations (article 000's overflow needs them; N(0, 1) entries
stay far below float16's 65,504 even unscaled at d_k 1024). So q and k get iid N(0, sigma^2)
entries for each ``sigma`` of ``SIGMAS`` (1 to 64), are rounded to float16, and pass through
the mechanism in float16 and, the same rounded values, in float32. A ``(d_k, sigma)`` cell
is *good* when every float16 weight is finite and ``max |p_16 - p_32| <= TOLERANCE``.

The *headroom* at a width is the largest ``sigma`` of the grid at which that cell and every
smaller one are good (0 if ``sigma = 1`` already fails); when every ``sigma`` is good it is
the grid's top, a lower bound (``headroom`` returns ``censored`` true). The cells are computed by
``attnlab.studies.card.precision`` (JAX); this module reads them (no JAX), for the verdicts
and the report.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: The stds of q's and k's entries: from the statics' N(0, 1) to past float16's overflow of
#: a d_k 1024 dot product (``64^2 * 1024 * 4`` standard deviations > 65,504).
SIGMAS: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
#: Largest ``|p_16 - p_32|`` of a good cell (07's total-variation bound for float16).
TOLERANCE = 1e-2


def headroom(rows: pd.DataFrame) -> tuple[float, bool]:
    """``(headroom, censored)`` of one mechanism's rows at one width (module docstring)."""
    rows = rows.sort_values("sigma")
    good = rows.finite_float16.astype(bool) & (rows.max_error <= TOLERANCE)
    bad = np.flatnonzero(~good.to_numpy())
    if not bad.size:
        return float(rows.sigma.iloc[-1]), True
    return (float(rows.sigma.iloc[bad[0] - 1]) if bad[0] > 0 else 0.0), False
