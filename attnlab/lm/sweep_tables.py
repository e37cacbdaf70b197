"""Readings of a language-model sweep's rows (``attnlab.lm.sweep.sweep_rows``), pandas
only, so that reports and figures read them without JAX: Wortsman et al.'s learning-rate
sensitivity and the best rate with its drifted multiple."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd


def lr_sensitivity(sweep: pd.DataFrame) -> pd.DataFrame:
    """Wortsman et al.'s LR sensitivity per mechanism and width (over the mean of seeds):
    ``E_eta[min(l(eta), l_0) - l*]``, ``l_0`` the initial loss and ``l*`` the best over the
    rates; a non-finite loss counts as ``l_0``. With the best rate and loss."""
    rows = []
    for (mechanism, d_model), cell in sweep.groupby(["mechanism", "d_model"], sort=False):
        by_rate = cell.groupby("lr")[["final_val_loss", "initial_val_loss"]].mean()
        final = by_rate.final_val_loss.where(np.isfinite(by_rate.final_val_loss), np.inf)
        capped = np.minimum(final, by_rate.initial_val_loss)
        rows.append({
            "mechanism": mechanism, "d_model": int(d_model),
            "lr_sensitivity": float((capped - capped.min()).mean()),
            "best_lr": float(capped.idxmin()), "best_loss": float(capped.min()),
        })  # fmt: skip
    return pd.DataFrame(rows)


def best_lane_rates(sweep: pd.DataFrame, factor: float) -> tuple[float, float | None]:
    """The rate of the lowest mean held-out loss (non-finite counts as worst), and the swept
    rate ``factor`` times it (None if the grid has none)."""
    by_rate = sweep.groupby("lr").final_val_loss.mean().fillna(np.inf)
    best = float(by_rate.idxmin())
    drifted = [r for r in by_rate.index if math.isclose(r, factor * best, rel_tol=1e-6)]
    return best, (float(drifted[0]) if drifted else None)
