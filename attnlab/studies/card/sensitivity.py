"""Wortsman et al. (2023, "Small-scale proxies for large-scale Transformer training
instabilities", arXiv:2309.14322)'s learning-rate sensitivity of the card's sweep
(``attnlab.studies.card.sweep``), per seed,

    S = mean over eta of [ min(l(eta), l0) - l* ],

``l`` the final smoothed loss (``l0`` where the lane diverged), ``l0`` the loss at step 0,
``l*`` the best final loss over the sweep; and the paired difference of two mechanisms'
sensitivities over the seeds they share (the same initialisation and data)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnlab.core.estimates import mean_and_sem


def sensitivity(rows: pd.DataFrame) -> pd.DataFrame:
    """Per seed of one (mechanism, d_k)'s sweep ``rows``: ``l0``, ``l_star`` and the
    sensitivity ``S`` (module docstring); a seed missing a rate is left out."""
    out = []
    rates = rows.lr.nunique()
    for seed, g in rows.groupby("seed"):
        if len(g) != rates:
            continue
        l0 = float(g.loss_step0.iloc[0])
        final = g.final_loss.to_numpy(float)
        clipped = np.minimum(np.where(np.isfinite(final), final, l0), l0)
        l_star = float(np.nanmin(final)) if np.isfinite(final).any() else l0
        out.append({"seed": seed, "l0": l0, "l_star": l_star,
                    "sensitivity": float(np.mean(clipped - l_star))})  # fmt: skip
    return pd.DataFrame(out, columns=["seed", "l0", "l_star", "sensitivity"])


def paired_difference(own: pd.DataFrame, other: pd.DataFrame) -> tuple[float, float, int]:
    """``(mean, SE, seeds)`` over the seeds both have of ``own``'s sensitivity minus
    ``other``'s (the same seeds share initialisation and data: a paired difference)."""
    both = own.merge(other, on="seed", suffixes=("", "_other"))
    diff = (both.sensitivity - both.sensitivity_other).to_numpy()
    if len(diff) < 2:
        return (float(diff[0]) if len(diff) else np.nan), np.nan, len(diff)
    mean, sem = mean_and_sem(diff)
    return float(mean), float(sem), len(diff)
