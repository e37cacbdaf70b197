"""The card's float16 headroom: how large q and k may grow before float16 breaks a mechanism.

Trained models carry large activations (article 000's overflow needs them; N(0, 1) entries
stay far below float16's 65,504 even unscaled at d_k 1024). So q and k get iid N(0, sigma^2)
entries for each ``sigma`` of ``SIGMAS`` (1 to 64), are rounded to float16, and pass through
the mechanism in float16 and, the same rounded values, in float32. A ``(d_k, sigma)`` cell
is *good* when every float16 weight is finite and ``max |p_16 - p_32| <= TOLERANCE``.

The *headroom* at a width is the largest ``sigma`` of the grid at which that cell and every
smaller one are good (0 if ``sigma = 1`` already fails); when every ``sigma`` is good it is
the grid's top, a lower bound (``headroom_censored``).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from attnlab.core.references import load_mechanism

#: The stds of q's and k's entries: from the statics' N(0, 1) to past float16's overflow of
#: a d_k 1024 dot product (``64^2 * 1024 * 4`` standard deviations > 65,504).
SIGMAS: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
#: Largest ``|p_16 - p_32|`` of a good cell (07's total-variation bound for float16).
TOLERANCE = 1e-2
#: ``fold_in`` tag of the section's draws (disjoint from the statics' trial keys).
STREAM = 0x1616


def precision_frame(
    references: Sequence[str],
    dks: Sequence[int],
    n_keys: int,
    trials: int,
    seed: int,
    sigmas: Sequence[float] = SIGMAS,
) -> pd.DataFrame:
    """One row per (mechanism, d_k, sigma): ``trials`` rows of one query over ``n_keys``
    keys; ``finite_float16`` (every float16 weight finite) and ``max_error`` (the largest
    ``|p_16 - p_32|``, NaN where a weight is not finite). The draws at a width are the
    same for every ``sigma`` (scaled), so the cells differ only by the scale."""
    key = jax.random.fold_in(jax.random.key(seed), STREAM)
    rows = []
    for mechanism in (load_mechanism(r) for r in references):
        for d_k in dks:
            kq, kk = jax.random.split(jax.random.fold_in(key, d_k))
            q1 = jax.random.normal(kq, (trials, 1, d_k))
            k1 = jax.random.normal(kk, (trials, n_keys, d_k))
            for sigma in sigmas:
                q16, k16 = (sigma * q1).astype(jnp.float16), (sigma * k1).astype(jnp.float16)
                p16 = np.asarray(jnp.asarray(mechanism(q16, k16), jnp.float32))
                p32 = np.asarray(mechanism(q16.astype(jnp.float32), k16.astype(jnp.float32)))
                finite = bool(np.isfinite(p16).all())
                error = float(np.abs(p16 - p32).max()) if finite else np.nan
                rows.append(
                    {"mechanism": mechanism.name, "d_k": d_k, "sigma": sigma, "n_keys": n_keys,
                     "trials": trials, "finite_float16": finite, "max_error": error}
                )  # fmt: skip
    return pd.DataFrame(rows)


def headroom(rows: pd.DataFrame) -> tuple[float, bool]:
    """``(headroom, censored)`` of one mechanism's rows at one width (module docstring)."""
    rows = rows.sort_values("sigma")
    good = rows.finite_float16.astype(bool) & (rows.max_error <= TOLERANCE)
    bad = np.flatnonzero(~good.to_numpy())
    if not bad.size:
        return float(rows.sigma.iloc[-1]), True
    return (float(rows.sigma.iloc[bad[0] - 1]) if bad[0] > 0 else 0.0), False
