"""Figure 7 (experiment 09): the article fit: screen, fitted curves, ranking."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from attnlab.harness.figures import (
    COLUMN_WIDTH_IN,
    STYLE,
    VARIANT_COLORS,
    VARIANT_LABELS,
    band_by_variant,
    save,
    seeds_text,
)
from attnlab.harness.tables import Tables
from attnlab.studies.article_fit.compute import CURVES_CSV, SCORES_CSV, SCREEN_CSV
from attnlab.studies.recall.figure import mark_article_milestones
from attnlab.studies.recall.report import fit_predictions

ARTICLE_STEP0 = (0.1085, 1.0610)  # scaled, unscaled


def fig7_article_fit(tables: Tables, figures_dir: Path) -> list[Path]:
    """(a) step-0 norms of every reading, (b) the fitted reading's curves with the article's
    milestones, (c) the stage-2 ranking, finalists with their bootstrap standard errors."""
    screen = tables.get(
        SCREEN_CSV, ["name", "grad_norm_wq_scaled", "grad_norm_wq_unscaled", "kept"]
    )
    scores = tables.get(SCORES_CSV, ["reading", "pass", "score", "rank", "score_se"])
    fitted = fit_predictions(tables, CURVES_CSV)[0]
    curves = tables.get(fitted.csv, ["variant", "seed", "step", "smoothed_loss"])
    last = scores[scores["pass"] == scores["pass"].max()].sort_values("rank")
    with plt.rc_context(STYLE):
        fig, (a, b, c) = plt.subplots(
            1, 3, figsize=(3 * COLUMN_WIDTH_IN, 2.9), gridspec_kw={"width_ratios": [1, 1.2, 1]}
        )
        kept = screen.kept.astype(bool)
        a.scatter(
            screen.grad_norm_wq_scaled[~kept],
            screen.grad_norm_wq_unscaled[~kept],
            s=5,
            color="0.65",
            label=f"screened out ({int((~kept).sum())})",
        )
        a.scatter(
            screen.grad_norm_wq_scaled[kept],
            screen.grad_norm_wq_unscaled[kept],
            s=9,
            color=VARIANT_COLORS["scaled"],
            label=f"kept ({int(kept.sum())})",
        )
        a.axvspan(ARTICLE_STEP0[0] / 1.5, ARTICLE_STEP0[0] * 1.5, color="0.9", zorder=0)
        a.plot(
            *ARTICLE_STEP0,
            marker="*",
            ms=11,
            color="#d62728",
            mec="black",
            mew=0.5,
            ls="",
            label="article",
            zorder=5,
        )
        a.set_xscale("log")
        a.set_yscale("log")
        a.set_xlabel(r"step-0 $\|\nabla W_Q\|$, scaled")
        a.set_ylabel(r"step-0 $\|\nabla W_Q\|$, unscaled")
        a.set_title(f"(a) screen: {len(screen)} readings (medians)")
        a.legend(loc="upper left")

        band_by_variant(b, curves, "smoothed_loss", VARIANT_COLORS, VARIANT_LABELS)
        for threshold in (1.0, 0.1):
            b.axhline(threshold, color="0.5", ls="--", lw=0.8)
        mark_article_milestones(b)
        b.set_yscale("log")
        b.set_xlabel("training step")
        b.set_ylabel("smoothed training loss (nats)")
        b.set_title(f"(b) {fitted.reading} ({seeds_text(curves.seed.nunique())})", fontsize=7)
        b.legend(loc="upper right")  # above the late, low curves

        ranked = last.iloc[::-1]
        first = scores[scores["pass"] == scores["pass"].min()].sort_values("rank").head(12)
        y = np.arange(len(first))[::-1]
        c.barh(y, first.score, color="0.7", label=f"pass {first['pass'].iloc[0]} (3 terms)")
        position = dict(zip(first.reading, y, strict=True))
        final = ranked[ranked.reading.isin(position)]
        c.errorbar(
            final.score,
            [position[r] for r in final.reading],
            xerr=final.score_se,
            marker="o",
            ms=4,
            ls="",
            capsize=2,
            color=VARIANT_COLORS["scaled"],
            label=f"pass {last['pass'].iloc[0]} (4 terms) ± bootstrap SE",
        )
        c.set_yticks(y, first.reading, fontsize=5)
        c.set_xlabel("score: RMS log ratio to the article (dimensionless)")
        c.set_title("(c) stage-2 ranking (scaled numbers only)")
        c.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)  # below the data
        fig.tight_layout()
        return save(fig, figures_dir, "fig7_article_fit")
