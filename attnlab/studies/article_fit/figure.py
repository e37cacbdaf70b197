"""Figure 7 (experiment 09): the article fit, one row per family: screen, the best
reading's curves, ranking."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from attnlab.harness.figures import (
    COLUMN_WIDTH_IN,
    STYLE,
    VARIANT_COLORS,
    save,
    smoothed_loss_panel,
)
from attnlab.harness.tables import Tables, seeds_text
from attnlab.recall.predictions import fit_predictions
from attnlab.studies.article_fit.study import FIRST_CSVS, QUALITY, SECOND_CSVS

ARTICLE_STEP0 = (0.1085, 1.0610)  # scaled, unscaled
#: Rows of the figure: (title, screen CSV, scores CSV, prediction curves CSV, whether
#: pass 2a took only the readings within the quality bar).
ROWS = (
    ("first family", FIRST_CSVS.screen, FIRST_CSVS.scores, FIRST_CSVS.curves, False),
    ("second family", SECOND_CSVS.screen, SECOND_CSVS.scores, SECOND_CSVS.curves, True),
)


def _screen_panel(ax: plt.Axes, screen: pd.DataFrame, family: str, bar: bool) -> None:
    """Step-0 norms of every reading, kept ones in the scaled colour, the kept band shaded
    (and, for a fit whose pass 2a took only them, the quality bar's band darker)."""
    kept = screen.kept.astype(bool)
    ax.scatter(screen.grad_norm_wq_scaled[~kept], screen.grad_norm_wq_unscaled[~kept], s=4,
               color="0.65", label=f"screened out ({int((~kept).sum())})")  # fmt: skip
    ax.scatter(screen.grad_norm_wq_scaled[kept], screen.grad_norm_wq_unscaled[kept], s=7,
               color=VARIANT_COLORS["scaled"], label=f"kept ({int(kept.sum())})")  # fmt: skip
    ax.axvspan(ARTICLE_STEP0[0] / 1.5, ARTICLE_STEP0[0] * 1.5, color="0.92", zorder=0)
    if bar:
        ax.axvspan(ARTICLE_STEP0[0] * (1 - QUALITY), ARTICLE_STEP0[0] * (1 + QUALITY),
                   color="0.8", zorder=0, label=f"trained: ±{QUALITY:.0%}")  # fmt: skip
    ax.plot(*ARTICLE_STEP0, marker="*", ms=11, color="#d62728", mec="black", mew=0.5, ls="",
            label="article", zorder=5)  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(r"step-0 $\|\nabla W_Q\|$, scaled")
    ax.set_ylabel(r"step-0 $\|\nabla W_Q\|$, unscaled")
    ax.set_title(f"screen, {family}: {len(screen)} readings (medians)")
    ax.legend(loc="upper left")


def _curves_panel(ax: plt.Axes, curves: pd.DataFrame, reading: str) -> None:
    """The best reading's smoothed loss, both variants, with the article's milestones."""
    smoothed_loss_panel(ax, curves, None)
    ax.set_ylabel("smoothed training loss (nats)")
    ax.set_title(f"{reading} ({seeds_text(curves.seed.nunique())})", fontsize=6)
    ax.legend(loc="upper right")  # above the late, low curves


def _ranking_panel(ax: plt.Axes, scores: pd.DataFrame) -> None:
    """Pass 2a's best twelve as bars, pass 2b's score ± bootstrap SE on those it trained."""
    first = scores[scores["pass"] == scores["pass"].min()].sort_values("rank").head(12)
    last = scores[scores["pass"] == scores["pass"].max()]
    y = np.arange(len(first))[::-1]
    ax.barh(y, first.score, color="0.7", label=f"pass {first['pass'].iloc[0]} (3 terms)")
    position = dict(zip(first.reading, y, strict=True))
    final = last[last.reading.isin(position)]
    ax.errorbar(final.score, [position[r] for r in final.reading], xerr=final.score_se,
                marker="o", ms=4, ls="", capsize=2, color=VARIANT_COLORS["scaled"],
                label=f"pass {last['pass'].iloc[0]} (4 terms) ± bootstrap SE")  # fmt: skip
    ax.set_yticks(y, first.reading, fontsize=4.5)
    ax.set_xlabel("score: RMS log ratio to the article (dimensionless)")
    ax.set_title("stage-2 ranking (scaled numbers only)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2)  # below the data


def fig7_article_fit(tables: Tables, figures_dir: Path) -> list[Path]:
    """One row per family: (a, d) step-0 norms of every reading, (b, e) the best reading's
    curves with the article's milestones, (c, f) the stage-2 ranking."""
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(
            len(ROWS), 3, figsize=(3 * COLUMN_WIDTH_IN, 2.9 * len(ROWS)),
            gridspec_kw={"width_ratios": [1, 1.2, 1]}, squeeze=False,
        )  # fmt: skip
        letters = iter("abcdef")
        for (family, screen_csv, scores_csv, curves_csv, bar), row in zip(ROWS, axes, strict=True):
            screen = tables.get(
                screen_csv, ["name", "grad_norm_wq_scaled", "grad_norm_wq_unscaled", "kept"]
            )
            scores = tables.get(scores_csv, ["reading", "pass", "score", "rank", "score_se"])
            best = fit_predictions(tables, curves_csv)[0]
            curves = tables.get(best.csv, ["variant", "seed", "step", "smoothed_loss"])
            _screen_panel(row[0], screen, family, bar)
            _curves_panel(row[1], curves, best.reading)
            _ranking_panel(row[2], scores)
            for ax in row:
                ax.set_title(f"({next(letters)}) {ax.get_title()}", fontsize=ax.title.get_size())
        fig.tight_layout()
        return save(fig, figures_dir, "fig7_article_fit")
