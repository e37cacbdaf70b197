"""Softmax rows of iid Gaussian queries and keys, scaled and unscaled, swept over the head
width: mean max weight, entropy and softmax-Jacobian norm per (variant, d_k), each with
its SEM over trials. Experiments 02 and 03 write these tables; 10 and the card read the
Jacobian sweep at their own row length.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import pandas as pd

from attnlab.core.estimates import mean_and_sem
from attnlab.core.progress import Progress
from attnlab.core.sampling import Sampler, softmax_row_statistics

#: d_k = 1, 2, 4, ..., 1024: the article's sweep.
DEFAULT_DKS: tuple[int, ...] = tuple(2**i for i in range(11))

#: A callback told how many trials (or samples) have just finished.


@dataclass(frozen=True)
class SoftmaxSweepConfig:
    """Experiments 02 and 03: softmax rows of ``n_keys`` logits, scaled and unscaled."""

    dks: tuple[int, ...] = DEFAULT_DKS
    n_keys: int = 256
    trials: int = 2000
    seed: int = 0
    sampler: Sampler = "direct"


def _sweep_table(
    config: SoftmaxSweepConfig, on_progress: Progress, statistics: dict[str, str]
) -> pd.DataFrame:
    """Rows per (variant, d_k) with ``<name>_mean`` and ``<name>_sem`` per statistic."""
    key = jax.random.key(config.seed)
    rows = []
    for d_k in config.dks:
        stats = softmax_row_statistics(
            key, d_k, config.n_keys, config.trials, config.sampler, on_chunk=on_progress
        )
        for v, variant in enumerate(stats.variants):
            row = {
                "variant": variant,
                "d_k": d_k,
                "n_keys": config.n_keys,
                "trials": config.trials,
                "sampler": config.sampler,
            }
            for column, attribute in statistics.items():
                mean, sem = mean_and_sem(getattr(stats, attribute)[v])
                row[f"{column}_mean"] = float(mean)
                row[f"{column}_sem"] = float(sem)
            rows.append(row)
    return pd.DataFrame(rows).sort_values(["variant", "d_k"], kind="stable", ignore_index=True)


def run_saturation_sweep(config: SoftmaxSweepConfig, on_progress: Progress = None) -> pd.DataFrame:
    """Experiment 02: mean max weight and mean entropy (nats) per (variant, d_k), with SEMs."""
    return _sweep_table(config, on_progress, {"max_weight": "max_weight", "entropy": "entropy"})


def run_jacobian_sweep(config: SoftmaxSweepConfig, on_progress: Progress = None) -> pd.DataFrame:
    """Experiment 03: mean Frobenius norm of the softmax Jacobian per (variant, d_k)."""
    return _sweep_table(config, on_progress, {"jacobian_fro": "jacobian_fro"})
