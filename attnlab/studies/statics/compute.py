"""Experiments 01-03: the static measurements of the article, as tables.

Each configuration is a frozen dataclass whose defaults are the article's settings
(100,000 query-key pairs per d_k for 01; 256 keys and 2000 trials for 02 and 03; d_k from 1
to 1024 in powers of two). Each ``run_*`` function returns a ``pandas.DataFrame``; the
scripts in ``experiments/`` only parse flags and write it.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np
import pandas as pd

from attnlab.core.estimates import std_and_se
from attnlab.core.progress import Progress
from attnlab.core.sampling import CHUNK_ELEMENTS, dot_product_samples, exact_dot_product_samples
from attnlab.core.softmax_sweeps import DEFAULT_DKS
from attnlab.harness.memory import DRAW_COPIES, FLOAT32_BYTES, Need, product, size

#: ``fold_in`` tag of the high-precision stream of experiment 01 (disjoint from the
#: per-d_k trial keys of the headline samples).
HP_STREAM = 0x4850


@dataclass(frozen=True)
class LogitVarianceConfig:
    """Experiment 01: the std of ``q . k`` for standard normal ``q, k`` in ``d_k`` dims."""

    dks: tuple[int, ...] = DEFAULT_DKS
    samples: int = 100_000
    seed: int = 0
    #: Exact-law products per d_k for the high-precision columns (``*_hp``), which decide
    #: the article's "within 0.5% at every d_k" where 100,000 samples (SE ~0.2%) cannot.
    hp_samples: int = 2_000_000


#: Bytes per product of experiment 01 beside its chunk: its key (8) and index (4), the
#: product (4) and its concatenated copy (4), and ``std_and_se``'s float64 copies (3 x 8).
SAMPLE_BYTES = 48
#: Bytes per exact-law product: float32 (4) and its concatenated copy (4), and
#: ``std_and_se``'s float64 copies (3 x 8).
HP_SAMPLE_BYTES = 32


def logit_variance_needs(config: LogitVarianceConfig) -> list[Need]:
    """Experiment 01's largest allocations (``attnlab.harness.memory``), per d_k in turn:

    * the samples: ``samples * SAMPLE_BYTES``;
    * the exact-law samples: ``hp_samples * HP_SAMPLE_BYTES``;
    * one chunk of draws: ``max(CHUNK_ELEMENTS, 2 d_k) * 4 * DRAW_COPIES`` bytes (a chunk
      holds about ``CHUNK_ELEMENTS`` numbers, but at least one pair ``q, k`` of ``2 d_k``).
    """
    default = LogitVarianceConfig()
    return [
        Need(
            product(config.samples, SAMPLE_BYTES),
            "the query-key products of one d_k",
            (size("--samples", config.samples, default.samples),),
        ),
        Need(
            product(config.hp_samples, HP_SAMPLE_BYTES),
            "the exact-law products of one d_k",
            (size("--hp-samples", config.hp_samples, default.hp_samples),),
        ),
        Need(
            product(max(CHUNK_ELEMENTS, 2 * max(config.dks)), FLOAT32_BYTES, DRAW_COPIES),
            "one chunk of query and key vectors",
            (size("--dk", config.dks, default.dks),),
        ),
    ]


def run_logit_variance(config: LogitVarianceConfig, on_progress: Progress = None) -> pd.DataFrame:
    """One row per d_k: measured and predicted (``sqrt(d_k)``) std of ``q . k``.

    Columns: ``d_k, samples, std_measured, std_se, std_predicted, rel_error, rel_error_se,
    std_scaled, std_scaled_se``, where ``rel_error = std_measured / sqrt(d_k) - 1`` and
    ``std_scaled`` is the std of ``q . k / sqrt(d_k)`` (1 in theory); and the
    high-precision ``hp_samples, std_hp, std_hp_se, rel_error_hp, rel_error_hp_se`` from
    ``hp_samples`` exact-law products (an independent stream of the same seed).
    """
    key = jax.random.key(config.seed)
    hp_key = jax.random.fold_in(key, HP_STREAM)
    rows = []
    for d_k in config.dks:
        products = dot_product_samples(key, d_k, config.samples, on_progress)
        hp = exact_dot_product_samples(
            jax.random.fold_in(hp_key, d_k), d_k, config.hp_samples, on_progress
        )
        std_hp, se_hp = std_and_se(hp)
        std, se = std_and_se(products)
        std_scaled, se_scaled = std_and_se(products / np.sqrt(np.float32(d_k)))
        predicted = float(np.sqrt(d_k))
        rows.append(
            {
                "d_k": d_k,
                "samples": config.samples,
                "std_measured": std,
                "std_se": se,
                "std_predicted": predicted,
                "rel_error": std / predicted - 1.0,
                "rel_error_se": se / predicted,
                "std_scaled": std_scaled,
                "std_scaled_se": se_scaled,
                "hp_samples": config.hp_samples,
                "std_hp": std_hp,
                "std_hp_se": se_hp,
                "rel_error_hp": std_hp / predicted - 1.0,
                "rel_error_hp_se": se_hp / predicted,
            }
        )
    return pd.DataFrame(rows)
