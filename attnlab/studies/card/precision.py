"""The card's float16 precision cells, computed: each mechanism on q and k of std ``sigma``
rounded to float16, in float16 and in float32 (``attnlab.studies.card.headroom`` defines
the cells and reads the headroom from them)."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from attnlab.core.mechanism import Mechanism
from attnlab.studies.card.headroom import SIGMAS

#: ``fold_in`` tag of the section's draws (disjoint from the statics' trial keys).
STREAM = 0x1616


def precision_frame(
    mechanisms: Sequence[Mechanism],
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
    for mechanism in mechanisms:
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
