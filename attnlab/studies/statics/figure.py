"""Figures 1 and 2 (experiments 02 and 03): saturation and the Jacobian norm against d_k."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from attnlab.core.curves import crossing_dk
from attnlab.harness.figures import (
    COLUMN_WIDTH_IN,
    STYLE,
    errorbar_by_variant,
    log2_dk_axis,
    save,
)
from attnlab.harness.tables import Tables
from attnlab.studies.statics.study import JACOBIAN_CSV, SATURATION_CSV


def fig1_saturation(tables: Tables, figures_dir: Path) -> list[Path]:
    """Mean max weight and mean entropy against d_k; the uniform ceiling ln n for reference."""
    frame = tables.get(
        SATURATION_CSV,
        [
            "variant",
            "d_k",
            "n_keys",
            "trials",
            "max_weight_mean",
            "max_weight_sem",
            "entropy_mean",
            "entropy_sem",
        ],
    )
    n, trials = int(frame.n_keys.iloc[0]), int(frame.trials.iloc[0])
    d_k = np.sort(frame.d_k.unique())
    with plt.rc_context(STYLE):
        fig, (ax_max, ax_ent) = plt.subplots(1, 2, figsize=(2 * COLUMN_WIDTH_IN, 2.5))
        errorbar_by_variant(ax_max, frame, "max_weight")
        ax_max.axhline(1.0 / n, color="0.4", ls=":", lw=1, label=f"uniform, 1/n = 1/{n}")
        ax_max.set_ylabel("mean max attention weight")
        ax_max.set_ylim(0, 1.02)
        ax_max.set_title("(a) Max weight")
        errorbar_by_variant(ax_ent, frame, "entropy")
        ax_ent.axhline(
            np.log(n),
            color="0.4",
            ls="--",
            lw=1,
            label=rf"uniform ceiling, $\ln {n}$ = {np.log(n):.3f}",
        )
        ax_ent.set_ylabel("mean attention entropy (nats)")
        ax_ent.set_ylim(0, np.log(n) * 1.08)
        ax_ent.set_title("(b) Entropy")
        for ax in (ax_max, ax_ent):
            log2_dk_axis(ax, d_k)
        ax_max.legend(loc="upper left")
        # Right of centre lies between the scaled plateau and the saturated unscaled tail.
        ax_ent.legend(loc="center right")
        fig.suptitle(
            f"Softmax saturation without scaling (n = {n} keys, {trials} trials, error bars: SEM)",
            fontsize=9,
        )
        fig.tight_layout()
        return save(fig, figures_dir, "fig1_saturation")


def fig2_jacobian_norm(tables: Tables, figures_dir: Path) -> list[Path]:
    """Mean Frobenius norm of the softmax Jacobian against d_k, the crossing marked."""
    frame = tables.get(
        JACOBIAN_CSV,
        ["variant", "d_k", "n_keys", "trials", "jacobian_fro_mean", "jacobian_fro_sem"],
    )
    n, trials = int(frame.n_keys.iloc[0]), int(frame.trials.iloc[0])
    d_k = np.sort(frame.d_k.unique())
    wide = frame.pivot(index="d_k", columns="variant", values="jacobian_fro_mean").sort_index()
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN, 2.6))
        errorbar_by_variant(ax, frame, "jacobian_fro")
        if {"scaled", "unscaled"} <= set(wide.columns):
            found = crossing_dk(wide.index.to_numpy(), (wide.unscaled - wide.scaled).to_numpy())
            if found is not None:
                lo, hi, at = found
                level = float(np.interp(np.log2(at), np.log2(wide.index), wide.scaled))
                ax.axvline(at, color="0.4", ls=":", lw=1)
                ax.annotate(
                    f"crossing\n$d_k \\approx {at:.0f}$",
                    (at, level),
                    xytext=(-75, -32),
                    textcoords="offset points",
                    arrowprops={"arrowstyle": "->", "color": "0.3"},
                )
        log2_dk_axis(ax, d_k)
        ax.set_ylabel(r"mean $\|\mathrm{diag}(p) - pp^\top\|_F$")
        ax.set_ylim(bottom=0)
        ax.set_title(f"Softmax Jacobian norm (n = {n}, {trials} trials, ±SEM)")
        ax.legend(loc="upper right")
        fig.tight_layout()
        return save(fig, figures_dir, "fig2_jacobian_norm")
