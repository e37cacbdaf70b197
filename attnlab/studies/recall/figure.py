"""Figure 3 (experiments 04 and 09): training loss of scaled and unscaled attention over
seeds, under the reading 09 fitted to the article's scaled numbers and under 04's."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from attnlab.harness.figures import (
    COLUMN_WIDTH_IN,
    STYLE,
    save,
    smoothed_loss_panel,
)
from attnlab.harness.tables import Tables, seeds_text
from attnlab.recall.predictions import fit_predictions
from attnlab.studies import predictions
from attnlab.studies.recall.study import CURVES_CSV, SUMMARY_CSV

_CURVE_COLUMNS = ["variant", "seed", "step", "smoothed_loss"]
_SUMMARY_COLUMNS = ["variant", "seed", "step_loss_below_1", "step_loss_below_0p1"]


def _panel(ax: plt.Axes, tables: Tables, curves_csv: str, summary_csv: str, title: str) -> None:
    curves = tables.get(curves_csv, _CURVE_COLUMNS)
    summary = tables.get(summary_csv, _SUMMARY_COLUMNS)
    smoothed_loss_panel(ax, curves, summary)
    ax.set_title(f"{title}, {seeds_text(curves.seed.nunique())}: median, range", fontsize=7)


def fig3_training(tables: Tables, figures_dir: Path) -> list[Path]:
    """Smoothed training loss against step (log loss axis), median and range over seeds:
    (a) 09's fitted reading, (b) 04's reading; the article's milestones marked on both.
    Without 09's CSVs (a run of 04 alone), 04's panel alone."""
    natural = tables.flags(SUMMARY_CSV).get("reading") or "natural"
    (fit_curves, _), (fit_summary, _) = predictions("curves")[0], predictions("summary")[0]
    with_fit = tables.has(fit_curves)
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(
            1,
            1 + with_fit,
            figsize=((1 + with_fit) * COLUMN_WIDTH_IN, 2.7),
            sharex=True,
            sharey=True,
            squeeze=False,
        )
        axes = list(axes[0])
        if with_fit:
            fitted = fit_predictions(tables, fit_summary)[0]
            fitted_curves = fit_predictions(tables, fit_curves)[0].csv
            _panel(axes[0], tables, fitted_curves, fitted.csv, f"(a) fitted: {fitted.reading}")
        _panel(
            axes[-1],
            tables,
            CURVES_CSV,
            SUMMARY_CSV,
            f"({'b' if with_fit else 'a'}) 04's reading: {natural}",
        )
        axes[0].set_ylabel("smoothed training loss (nats)")
        # 09's panel: a two-row legend at its foot, below the fitted reading's curves; a
        # run of 04 alone: wherever its own curves leave room.
        if with_fit:
            axes[0].legend(loc="lower right", ncol=2)
        else:
            axes[0].legend(loc="best")
        d_k = tables.flags(SUMMARY_CSV).get("dk", 256)
        fig.suptitle(rf"Associative recall, $d_k$ = {d_k}", fontsize=8)
        fig.tight_layout()
        return save(fig, figures_dir, "fig3_training")
