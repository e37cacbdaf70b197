"""Figure 3 (experiment 04): training loss of scaled and unscaled attention over seeds."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from attnlab.harness.figures import (
    COLUMN_WIDTH_IN,
    STYLE,
    VARIANT_COLORS,
    VARIANT_LABELS,
    band_by_variant,
    mark_milestones,
    save,
)
from attnlab.harness.tables import Tables


def fig3_training(tables: Tables, figures_dir: Path) -> list[Path]:
    """Smoothed training loss against step (log loss axis): median and range over seeds."""
    curves = tables.get("04_recall_curves.csv", ["variant", "seed", "step", "smoothed_loss"])
    summary = tables.get(
        "04_recall_summary.csv",
        ["variant", "seed", "step_loss_below_1", "step_loss_below_0p1"],
    )
    n_seeds = curves.seed.nunique()
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN, 2.6))
        band_by_variant(ax, curves, "smoothed_loss", VARIANT_COLORS, VARIANT_LABELS)
        mark_milestones(ax, summary, VARIANT_COLORS)
        ax.set_yscale("log")
        ax.set_xlabel("training step")
        ax.set_ylabel("smoothed training loss (nats)")
        ax.set_title(f"Associative recall, $d_k$ = 256 ({n_seeds} seeds: median, range)")
        ax.plot(
            [],
            [],
            marker="v",
            ls="",
            color="0.5",
            mec="black",
            mew=0.5,
            label="median milestone step",
        )
        ax.legend(loc="upper right")
        fig.tight_layout()
        return save(fig, figures_dir, "fig3_training")
