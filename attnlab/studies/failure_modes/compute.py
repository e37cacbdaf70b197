"""Experiment 07: the companion article's failure modes at the boundaries, measured.

Three parts (article 000, "Failure modes at the boundaries" and "The correction assumes
more than the formula admits"), one table each:

* overflow: a softmax computed entirely in float16 overflows once a logit exceeds
  ``ln 65504 ~ 11.09`` unless the row maximum is subtracted first; float32 upcasting
  (``attnlab.masked_softmax`` on float32 logits, the suite's policy) does not.
* masks: a naive mask ``z <- where(mask, z, fill)`` with ``fill`` in {-inf, -1e9,
  finfo(dtype).min}, in float16, bfloat16 and float32, on partly and fully masked rows:
  NaN in the output or gradient, and mass leaked to masked keys; ``attnlab.masked_softmax``
  as the reference (zeros for a fully masked row).
* correlation: ``q, k`` standard normal with ``corr(q_i, k_i) = rho`` (same index only).
  Writing ``q_i = rho k_i + sqrt(1 - rho^2) e_i`` with ``e_i`` independent,

      E[q_i k_i] = rho,   E[q_i^2 k_i^2] = rho^2 E[k^4] + (1 - rho^2) E[e^2] E[k^2]
                                         = 3 rho^2 + 1 - rho^2 = 1 + 2 rho^2,

  so ``Var(q_i k_i) = 1 + rho^2`` and, summing ``d_k`` independent coordinates,

      E[q . k] = d_k rho,   std(q . k) = sqrt(d_k (1 + rho^2)).

  Dividing by ``sqrt(d_k)`` fixes the spread to ``sqrt(1 + rho^2)`` but leaves a mean
  ``sqrt(d_k) rho`` that grows with the width: a correlated logit needs ``1/d_k`` (the muP
  argument), not ``1/sqrt(d_k)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from attnlab.core.attention import masked_softmax
from attnlab.core.estimates import std_and_se
from attnlab.core.parallel import chunked_map
from attnlab.core.sampling import CHUNK_ELEMENTS, chunk_for
from attnlab.harness.memory import (
    DRAW_COPIES,
    FLOAT32_BYTES,
    KEY_BYTES,
    Need,
    count,
    product,
    size,
)
from attnlab.studies.failure_modes.study import (
    CORRELATION_COLUMNS,
    MASK_COLUMNS,
    MASK_ROWS,
    OVERFLOW_COLUMNS,
    REFERENCE_FILL,
)

# --- (a) float16 overflow -------------------------------------------------------------------

#: Softmax implementations of part (a), each a function of float16 logits.
OVERFLOW_METHODS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "float16": lambda z: softmax_in_dtype(z, jnp.float16, subtract_max=False),
    "float16, max subtracted": lambda z: softmax_in_dtype(z, jnp.float16, subtract_max=True),
    "float32 upcast (masked_softmax)": lambda z: masked_softmax(z.astype(jnp.float32)),
}


@dataclass(frozen=True)
class OverflowConfig:
    """Rows of ``n_keys`` logits scaled so their maximum is ``s``, for ``s`` on a grid."""

    max_logits: tuple[float, ...] = tuple(np.arange(1.0, 40.0 + 1e-9, 0.125).tolist())
    rows: int = 256
    n_keys: int = 64
    seed: int = 0


def softmax_in_dtype(z: jax.Array, dtype: jnp.dtype, subtract_max: bool = True) -> jax.Array:
    """``exp(z - m) / sum exp(z - m)`` over the last axis with every step in ``dtype``.

    ``m`` is the row maximum, or 0 when ``subtract_max`` is False (the textbook formula).
    The sum is rounded to ``dtype``; ``jnp.sum`` accumulates float16 in float32 internally,
    so the overflow it shows is that of ``exp`` and of the rounded sum, not of accumulation.
    """
    z = jnp.asarray(z, dtype)
    if subtract_max:
        z = z - jnp.max(z, axis=-1, keepdims=True)
    e = jnp.exp(z)
    return e / jnp.sum(e, axis=-1, keepdims=True)


def overflow_rows(config: OverflowConfig) -> np.ndarray:
    """Unit-shape rows ``u`` with ``max_i u_i = 1`` exactly and ``u_i >= -1``: a standard
    normal row divided by its entry of largest magnitude (sign-corrected). Shape
    ``[rows, n_keys]``, float64; the logits at magnitude ``s`` are ``s u``."""
    g = np.random.default_rng(config.seed).standard_normal((config.rows, config.n_keys))
    pivot = np.take_along_axis(g, np.argmax(np.abs(g), axis=-1)[:, None], axis=-1)
    return g / pivot


def total_variation(p: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """``(1/2) sum_i |p_i - r_i|`` per row; ``inf`` for a row with any non-finite entry."""
    p = np.asarray(p, np.float64)
    tv = 0.5 * np.sum(np.abs(p - reference), axis=-1)
    return np.where(np.all(np.isfinite(p), axis=-1), tv, np.inf)


def softmax64(z: np.ndarray) -> np.ndarray:
    """The float64 reference softmax over the last axis (max subtracted)."""
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def run_overflow(config: OverflowConfig) -> pd.DataFrame:
    """Part (a): per method and max logit ``s``, the fraction of rows with a non-finite
    weight, the fraction of all-zero rows (the row sum overflowed to inf while every
    ``exp`` was finite, so ``e / inf = 0``) and the worst and mean total-variation error
    against float64 (non-finite rows count as inf in the worst, and are left out of the mean).

    The logits are the float16 values of ``s u``: what a float16 projection hands the
    softmax. The reference is the float64 softmax of those same values, so the error is the
    softmax's own, not the rounding of the logits.
    """
    units = overflow_rows(config)
    s = np.asarray(config.max_logits, np.float64)
    logits16 = (s[:, None, None] * units[None]).astype(np.float16)  # [S, rows, n]
    reference = softmax64(logits16.astype(np.float64))
    rows = []
    for method, fn in OVERFLOW_METHODS.items():
        p = np.asarray(jax.jit(fn)(jnp.asarray(logits16)), np.float64)
        tv = total_variation(p, reference)  # [S, rows]
        finite = np.isfinite(tv)
        zero_rows = np.all(p == 0, axis=-1)  # the row sum overflowed: e / inf = 0
        for i, max_logit in enumerate(s):
            rows.append(
                {
                    "method": method,
                    "max_logit": max_logit,
                    "rows": config.rows,
                    "n_keys": config.n_keys,
                    "nonfinite_fraction": float(np.mean(~finite[i])),
                    "zero_row_fraction": float(np.mean(zero_rows[i])),
                    "tv_error_max": float(np.max(tv[i])),
                    "tv_error_mean": float(np.mean(tv[i][finite[i]]))
                    if finite[i].any()
                    else np.nan,
                }
            )
    return pd.DataFrame(rows, columns=list(OVERFLOW_COLUMNS))


# --- (b) mask fill values -------------------------------------------------------------------

MASK_DTYPES: dict[str, jnp.dtype] = {
    "float16": jnp.float16,
    "bfloat16": jnp.bfloat16,
    "float32": jnp.float32,
}
#: Fill values of a naive mask, each a function of the dtype.
MASK_FILLS: dict[str, Callable[[jnp.dtype], float]] = {
    "-inf": lambda dtype: -np.inf,
    "-1e9": lambda dtype: -1e9,
    "finfo.min": lambda dtype: float(jnp.finfo(dtype).min),
}


def stored_value(value: float, dtype: jnp.dtype) -> float:
    """``value`` as ``dtype`` stores it (``-1e9`` is ``-inf`` in float16), as a float."""
    with np.errstate(over="ignore"):
        return float(np.asarray(value, np.float32).astype(dtype))


def naive_masked_softmax(z: jax.Array, mask: jax.Array, fill: float, dtype: jnp.dtype) -> jax.Array:
    """``softmax(where(mask, z, fill))`` with the max subtracted, every step in ``dtype``."""
    filled = jnp.where(mask, jnp.asarray(z, dtype), jnp.asarray(stored_value(fill, dtype), dtype))
    return softmax_in_dtype(filled, dtype)


def mask_softmax(fill: str, dtype: jnp.dtype, mask: jax.Array) -> Callable[[jax.Array], jax.Array]:
    """The softmax of a row under ``mask``: naive with fill ``MASK_FILLS[fill]``, or
    ``masked_softmax`` on the logits in ``dtype`` when ``fill`` is ``REFERENCE_FILL``."""
    if fill == REFERENCE_FILL:
        return lambda z: masked_softmax(jnp.asarray(z, dtype), mask)
    value = MASK_FILLS[fill](dtype)
    return lambda z: naive_masked_softmax(z, mask, value, dtype)


@jax.jit
def _mask_outputs(z: jax.Array, masks: jax.Array, values: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Weights ``[dtypes, fills, rows, n]`` (float32) of every naive fill and of the
    reference in every dtype, on the logits ``z`` ``[n]`` under ``masks`` ``[rows, n]``; and
    per row whether the gradient of ``L = sum_j p_j v_j`` with respect to the logits or to
    the values ``v`` (a parameter every row of a batch shares) has a NaN."""
    weights, grad_nans = [], []
    for dtype in MASK_DTYPES.values():
        x = jnp.broadcast_to(z.astype(dtype), masks.shape)
        for fill in (*MASK_FILLS, REFERENCE_FILL):
            softmax = mask_softmax(fill, dtype, masks)

            def loss(x: jax.Array, v: jax.Array, softmax=softmax) -> jax.Array:
                return jnp.sum(softmax(x).astype(jnp.float32) * v)

            g_z, g_v = jax.grad(loss, argnums=(0, 1))(x, jnp.broadcast_to(values, masks.shape))
            weights.append(softmax(x).astype(jnp.float32))
            grad_nans.append(jnp.any(jnp.isnan(g_z) | jnp.isnan(g_v), axis=-1))
    shape = (len(MASK_DTYPES), len(MASK_FILLS) + 1, *masks.shape)
    return jnp.stack(weights).reshape(shape), jnp.stack(grad_nans).reshape(shape[:-1])


def run_masks(seed: int = 0) -> pd.DataFrame:
    """Part (b): every (dtype, fill, row kind) of a naive mask, plus ``masked_softmax`` on
    the same dtype. Logits are standard normal, rounded to the dtype; the reference is the
    float64 softmax over the unmasked keys (all zeros for a fully masked row). Leaked mass
    is the total weight on masked keys; NaN where the output is NaN."""
    rng = np.random.default_rng(seed)
    masks = np.stack(list(MASK_ROWS.values()))  # [rows, n]
    z = rng.standard_normal(masks.shape[-1]).astype(np.float32)
    values = rng.standard_normal(masks.shape[-1]).astype(np.float32)
    weights, grad_nans = _mask_outputs(jnp.asarray(z), jnp.asarray(masks), jnp.asarray(values))
    weights, grad_nans = np.asarray(weights, np.float64), np.asarray(grad_nans)
    rows = []
    for i, (dtype_name, dtype) in enumerate(MASK_DTYPES.items()):
        z_dtype = np.asarray(jnp.asarray(z, dtype), np.float64)
        for j, fill in enumerate((*MASK_FILLS, REFERENCE_FILL)):
            reference_fill = fill == REFERENCE_FILL
            stored = np.nan if reference_fill else stored_value(MASK_FILLS[fill](dtype), dtype)
            for r, (row_name, mask) in enumerate(MASK_ROWS.items()):
                p = weights[i, j, r]
                reference = np.zeros_like(p)
                if mask.any():
                    reference[mask] = softmax64(z_dtype[mask])
                nan = bool(np.isnan(p).any())
                rows.append(
                    {
                        "dtype": dtype_name,
                        "fill": fill,
                        "fill_stored": stored,
                        "row": row_name,
                        "output_nan": nan,
                        "grad_nan": bool(grad_nans[i, j, r]),
                        "row_sum": np.nan if nan else float(p.sum()),
                        "leaked_mass": np.nan if nan else float(p[~mask].sum()),
                        "max_abs_error": np.nan if nan else float(np.max(np.abs(p - reference))),
                    }
                )
    return pd.DataFrame(rows, columns=list(MASK_COLUMNS))


# --- (c) correlated queries and keys --------------------------------------------------------


@dataclass(frozen=True)
class CorrelationConfig:
    """Part (c): ``samples`` pairs ``(q, k)`` per ``d_k``, evaluated at every ``rho``."""

    dks: tuple[int, ...] = (16, 64, 256)
    rhos: tuple[float, ...] = tuple(np.round(np.arange(-1.0, 1.0 + 1e-9, 0.125), 3).tolist())
    samples: int = 50_000
    seed: int = 0


def predicted_logit_moments(d_k: float, rho: float | np.ndarray) -> tuple[float, float]:
    """Mean ``d_k rho`` and std ``sqrt(d_k (1 + rho^2))`` of ``q . k`` at correlation rho."""
    rho = np.asarray(rho, np.float64)
    return d_k * rho, np.sqrt(d_k * (1.0 + rho**2))


def correlated_products(
    key: jax.Array,
    dks: Sequence[int],
    rhos: Sequence[float],
    samples: int,
    on_chunk: Callable[[int], None] | None = None,
) -> np.ndarray:
    """``q . k`` for ``q = rho k + sqrt(1 - rho^2) e`` with ``k, e ~ N(0, I)`` independent,
    for every ``rho`` and ``d_k`` on the same draws: ``[samples, len(dks), len(rhos)]``.

    Sample ``t`` draws ``k, e`` of width ``max(dks)`` from ``fold_in(key, t)``; width
    ``d_k`` uses their first ``d_k`` coordinates, so one compiled program serves all widths.
    """
    rho = jnp.asarray(rhos, jnp.float32)
    rest = jnp.sqrt(jnp.clip(1.0 - rho**2, 0.0))
    width = max(dks)
    prefix = np.asarray(dks) - 1

    def one(item_key: jax.Array) -> jax.Array:
        kk, ke = jax.random.split(item_key)
        k = jax.random.normal(kk, (width,))
        e = jax.random.normal(ke, (width,))
        q = rho[:, None] * k + rest[:, None] * e  # [R, width]
        return jnp.cumsum(q * k, axis=-1)[:, prefix].T  # [D, R]

    keys = jax.vmap(lambda t: jax.random.fold_in(key, t))(jnp.arange(samples))
    with jax.threefry_partitionable(False):
        return chunked_map(
            one, keys, min(samples, chunk_for(width * (2 + 2 * len(rhos)))), on_chunk
        )


def run_correlation(
    config: CorrelationConfig, on_progress: Callable[[int], None] | None = None
) -> pd.DataFrame:
    """Part (c): measured mean and std of ``q . k`` (with standard errors) against the
    prediction, per ``(d_k, rho)``; ``std_z = (measured - predicted) / se``."""
    products = correlated_products(
        jax.random.key(config.seed), config.dks, config.rhos, config.samples, on_progress
    )
    rows = []
    for d, d_k in enumerate(config.dks):
        for r, rho in enumerate(config.rhos):
            x = products[:, d, r].astype(np.float64)
            std, se = std_and_se(x)
            mean_pred, std_pred = predicted_logit_moments(d_k, rho)
            rows.append(
                {
                    "d_k": d_k,
                    "rho": rho,
                    "samples": config.samples,
                    "mean_measured": float(x.mean()),
                    "mean_se": float(x.std(ddof=1) / np.sqrt(x.size)),
                    "mean_predicted": float(mean_pred),
                    "std_measured": std,
                    "std_se": se,
                    "std_predicted": float(std_pred),
                    "std_z": (std - float(std_pred)) / se if se > 0 else np.nan,
                }
            )
    return pd.DataFrame(rows, columns=list(CORRELATION_COLUMNS))


# --- the experiment -------------------------------------------------------------------------

#: Bytes per logit of part (a), every max logit of every row: the float16 logits (2), the
#: float64 reference and its softmax's temporaries (4 x 8), and one method's float64
#: weights and their error's temporaries (3 x 8), rounded up.
OVERFLOW_LOGIT_BYTES = 64
#: Bytes per sample of part (c) beside its products: its key and index, and the float64
#: copies of one (d_k, rho) column that ``std_and_se`` makes (3 x 8).
CORRELATION_SAMPLE_BYTES = KEY_BYTES + 4 + 3 * 8


def failure_modes_needs(overflow: OverflowConfig, correlation: CorrelationConfig) -> list[Need]:
    """Experiment 07's largest allocations (``attnlab.harness.memory``):

    * part (a): ``rows * S * n_keys * OVERFLOW_LOGIT_BYTES`` for ``S`` max logits;
    * part (c), the products: ``samples * (D * R * 4 + CORRELATION_SAMPLE_BYTES)`` for
      ``D`` widths and ``R`` correlations;
    * part (c), one chunk: ``max(CHUNK_ELEMENTS, max(d_k) (2 + 2 R)) * 4 * DRAW_COPIES``.
    """
    rows, default = OverflowConfig().rows, CorrelationConfig()
    n_rhos = len(correlation.rhos)
    per_sample = len(correlation.dks) * n_rhos * FLOAT32_BYTES + CORRELATION_SAMPLE_BYTES
    chunk = max(CHUNK_ELEMENTS, max(correlation.dks) * (2 + 2 * n_rhos))
    return [
        Need(
            product(overflow.rows, len(overflow.max_logits), overflow.n_keys, OVERFLOW_LOGIT_BYTES),
            "the float16 rows of part (a)",
            (size("--rows", overflow.rows, rows),),
        ),
        Need(
            product(correlation.samples, per_sample),
            "the query-key products of part (c)",
            (
                size("--samples", correlation.samples, default.samples),
                count("--dk", correlation.dks, default.dks),
            ),
        ),
        Need(
            product(chunk, FLOAT32_BYTES, DRAW_COPIES),
            "one chunk of correlated vectors",
            (size("--dk", correlation.dks, default.dks),),
        ),
    ]


def run_failure_modes(
    overflow: OverflowConfig,
    correlation: CorrelationConfig,
    on_progress: Callable[[int], None] | None = None,
) -> dict[str, pd.DataFrame]:
    """The three parts, keyed like ``PART_CSVS``; the mask part uses ``overflow.seed``."""
    return {
        "overflow": run_overflow(overflow),
        "masks": run_masks(overflow.seed),
        "correlation": run_correlation(correlation, on_progress),
    }
