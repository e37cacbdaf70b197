"""Experiment 06: where unscaled attention condenses onto one key, over a (d_k, n) grid.

Unscaled logits of standard normal ``q, k_i`` are, given ``q``, i.i.d. ``N(0, sigma^2)`` with
``sigma = |q| ~ sqrt(d_k)``. For i.i.d. Gaussian logits the softmax has a condensation
transition (Derrida's random energy model): with ``n`` keys the largest logit sits about
``sigma sqrt(2 ln n)`` above the mean, and the row stays spread over many keys while
``sigma < sqrt(2 ln n)`` but puts a finite share of its mass on a few keys once
``sigma > sqrt(2 ln n)``. With ``sigma^2 = d_k`` the threshold is

    d_k = 2 ln n                         (article 004, "Keep the head small"),

so small heads over many keys should never saturate without the ``1/sqrt(d_k)`` factor.
Scaled attention sees ``z / sqrt(d_k)``, whose law barely depends on ``d_k``.

Sampling: the exact sampler of ``attnlab.core.sampling`` (``z = |q| g``, ``|q|^2 ~ chi^2(d_k)``,
``d_k`` traced) draws one row of ``max(n_keys)`` logits per trial and head width; the row
of ``n`` keys is its first ``n`` entries, which are i.i.d. with the same law. So every cell
of the grid comes out of one compiled program, and the cells of one ``(trial, d_k)`` share
their random numbers across ``n`` (common random numbers, which smooths the map along
``n``). Trial ``t`` at width ``d_k`` uses the key ``fold_in(fold_in(seed_key, d_k), t)``;
results depend on the seed, the trial count, ``d_k`` and the largest ``n``, never on the
other widths, the chunking or the device count.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from attnlab.core.attention import masked_softmax
from attnlab.core.estimates import mean_and_sem
from attnlab.core.parallel import chunked_map
from attnlab.core.sampling import CHUNK_ELEMENTS, chunk_for, exact_logits, trial_keys
from attnlab.core.softmax_stats import max_weight
from attnlab.harness.memory import (
    DRAW_COPIES,
    FLOAT32_BYTES,
    KEY_BYTES,
    Need,
    count,
    product,
    size,
)
from attnlab.studies.condensation.study import COLUMNS
from attnlab.studies.condensation.thresholds import threshold_dk

#: d_k = 1, 2, 4, ..., 1024, as in experiments 01-03.
DEFAULT_DKS: tuple[int, ...] = tuple(2**i for i in range(11))
#: n = 4, 8, ..., 4096 keys per softmax row.
DEFAULT_N_KEYS: tuple[int, ...] = tuple(2**i for i in range(2, 13))


@dataclass(frozen=True)
class CondensationConfig:
    """Experiment 06: mean max weight of scaled and unscaled rows on a (d_k, n) grid."""

    dks: tuple[int, ...] = DEFAULT_DKS
    n_keys: tuple[int, ...] = DEFAULT_N_KEYS
    trials: int = 1000
    seed: int = 0


#: Bytes per (trial, d_k, n) cell beside the chunk: its two max weights (float32), their
#: gap (float32) and ``mean_and_sem``'s float64 copies (about 16).
CELL_BYTES = 2 * FLOAT32_BYTES + FLOAT32_BYTES + 16


def condensation_needs(config: CondensationConfig) -> list[Need]:
    """Experiment 06's largest allocations (``attnlab.harness.memory``):

    * the grid's per-trial max weights: ``trials * D * (N * CELL_BYTES + KEY_BYTES)`` for
      ``D`` widths and ``N`` row lengths (every cell of every trial is kept);
    * one chunk of logits: ``max(CHUNK_ELEMENTS, e) * 4 * DRAW_COPIES`` bytes, where a trial
      draws ``e = D (max(n) + 2 sum(n))`` numbers and a chunk holds about ``CHUNK_ELEMENTS``.
    """
    default = CondensationConfig()
    n_dks, n_lengths = len(config.dks), len(config.n_keys)
    trial = n_dks * (max(config.n_keys) + 2 * sum(config.n_keys))
    widths = count("--dk", config.dks, default.dks)
    return [
        Need(
            product(config.trials, n_dks, n_lengths * CELL_BYTES + KEY_BYTES),
            "the max weights of every trial and grid cell",
            (
                size("--trials", config.trials, default.trials),
                widths,
                count("--n-keys", config.n_keys, default.n_keys),
            ),
        ),
        Need(
            product(max(CHUNK_ELEMENTS, trial), FLOAT32_BYTES, DRAW_COPIES),
            "one chunk of logits",
            (size("--n-keys", config.n_keys, default.n_keys), widths),
        ),
    ]


def max_weight_grid(
    key: jax.Array,
    dks: Sequence[int],
    n_keys: Sequence[int],
    trials: int,
    on_chunk: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Per-trial max weights ``[trials, len(dks), len(n_keys), 2]`` (last axis: unscaled,
    scaled) of ``softmax(z)`` and ``softmax(z / sqrt(d_k))`` for exact-law logits ``z``.

    Row ``n`` of a trial is the first ``n`` of its ``max(n_keys)`` logits.
    """
    n_max = max(n_keys)
    widths = jnp.asarray(dks, jnp.float32)
    keys = jnp.stack([trial_keys(key, d_k, trials) for d_k in dks], axis=1)  # [trials, D]

    def one_width(k: jax.Array, d_k: jax.Array) -> jax.Array:
        z = exact_logits(k, d_k, n_max)
        rows = [jnp.stack([z[:n], z[:n] / jnp.sqrt(d_k)]) for n in n_keys]
        return jnp.stack([max_weight(masked_softmax(r)) for r in rows])  # [N, 2]

    def one_trial(row_keys: jax.Array) -> jax.Array:
        return jax.vmap(one_width)(row_keys, widths)

    elements = len(dks) * (n_max + 2 * sum(n_keys))
    with jax.threefry_partitionable(False):
        return chunked_map(one_trial, keys, min(trials, chunk_for(elements)), on_chunk)


def run_condensation(
    config: CondensationConfig, on_progress: Callable[[int], None] | None = None
) -> pd.DataFrame:
    """One row per ``(n_keys, d_k)``: mean max weight of unscaled and scaled attention and
    their paired gap ``unscaled - scaled``, each with its SEM over trials, beside the
    threshold ``2 ln n``. Columns: ``COLUMNS``."""
    weights = max_weight_grid(
        jax.random.key(config.seed), config.dks, config.n_keys, config.trials, on_progress
    )
    unscaled_mean, unscaled_sem = mean_and_sem(weights[..., 0], axis=0)
    scaled_mean, scaled_sem = mean_and_sem(weights[..., 1], axis=0)
    gap_mean, gap_sem = mean_and_sem(weights[..., 0] - weights[..., 1], axis=0)
    rows = [
        {
            "n_keys": n,
            "d_k": d_k,
            "trials": config.trials,
            "threshold_dk": threshold_dk(n),
            "max_weight_unscaled_mean": unscaled_mean[i, j],
            "max_weight_unscaled_sem": unscaled_sem[i, j],
            "max_weight_scaled_mean": scaled_mean[i, j],
            "max_weight_scaled_sem": scaled_sem[i, j],
            "gap_mean": gap_mean[i, j],
            "gap_sem": gap_sem[i, j],
        }
        for i, d_k in enumerate(config.dks)
        for j, n in enumerate(config.n_keys)
    ]
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    return frame.sort_values(["n_keys", "d_k"], kind="stable", ignore_index=True)
