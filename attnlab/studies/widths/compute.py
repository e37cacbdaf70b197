"""Experiment 10's computation: the recall demo across head widths, and the drift of the
attention temperature over training (the sweep itself: ``attnlab.recall.widths``), and the
static Jacobian norm at the task's row length.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnlab.core.softmax_sweeps import SoftmaxSweepConfig, run_jacobian_sweep
from attnlab.recall.widths import WidthsConfig


def jacobian_frame(config: WidthsConfig) -> pd.DataFrame:
    """Experiment 03's static Jacobian norm at the recall task's row length (``pairs``
    keys), at every width of ``config``: the ratio unscaled / scaled that Claim 2 compares
    with the training slow-down."""
    sweep = SoftmaxSweepConfig(
        dks=config.dks,
        n_keys=config.base.pairs,
        trials=config.jacobian_trials,
        seed=config.base.seed,
    )
    frame = run_jacobian_sweep(sweep)
    wide = frame.pivot(index="d_k", columns="variant")
    mean, sem = wide["jacobian_fro_mean"], wide["jacobian_fro_sem"]
    ratio = mean["unscaled"] / mean["scaled"]
    # Delta method treating the two means as independent; they come from the same logits,
    # positively correlated, so this overstates the SE (conservative).
    ratio_se = ratio * np.sqrt(
        (sem["unscaled"] / mean["unscaled"]) ** 2 + (sem["scaled"] / mean["scaled"]) ** 2
    )
    return pd.DataFrame(
        {
            "d_k": wide.index.to_numpy(),
            "n_keys": config.base.pairs,
            "trials": config.jacobian_trials,
            "jacobian_scaled_mean": mean["scaled"].to_numpy(),
            "jacobian_scaled_sem": sem["scaled"].to_numpy(),
            "jacobian_unscaled_mean": mean["unscaled"].to_numpy(),
            "jacobian_unscaled_sem": sem["unscaled"].to_numpy(),
            "ratio_unscaled_scaled": ratio.to_numpy(),
            "ratio_se": ratio_se.to_numpy(),
        }
    )


def divergence_note(summary: pd.DataFrame) -> str | None:
    """One line naming every (mechanism, d_k, lr) of ``summary_frame``'s rows with a
    diverged seed (how many, and the first step), or None if none diverged."""
    bad = summary[summary.diverged_step.notna()]
    if bad.empty:
        return None
    groups = summary.groupby(["mechanism", "d_k", "lr"], sort=False).seed.count()
    each = [
        f"{m} at d_k {d}, lr {lr:g}: {len(g)} of {groups[m, d, lr]} seeds (first at step "
        f"{int(g.diverged_step.min())})"
        for (m, d, lr), g in bad.groupby(["mechanism", "d_k", "lr"], sort=False)
    ]
    return f"(diverged, recorded in diverged_step: {'; '.join(each)})"
