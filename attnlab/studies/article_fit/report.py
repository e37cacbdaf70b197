"""The report's section for experiment 09: the fitted reading and what it predicts."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from attnlab.claims import TRAINING_CLAIMS, IdentityClaim, RatioClaim
from attnlab.harness.tables import Tables, fmt, markdown_table
from attnlab.harness.verdicts import WITHIN, claim_rows
from attnlab.studies.article_fit.compute import (
    ARTICLE_SCALED,
    SCORES_CSV,
    SCREEN_CSV,
    SUMMARY_CSV,
    TERMS,
)

#: The article's training numbers, judged on the prediction run (identities left out).
PREDICTION_CLAIMS = tuple(
    replace(c, csv=SUMMARY_CSV) for c in TRAINING_CLAIMS if not isinstance(c, IdentityClaim)
)
#: The fit's quality bar: these scaled numbers within this fraction of the article.
QUALITY_TERMS = ("grad_norm_wq", "step_loss_below_1", "step_loss_below_0p1")
QUALITY = 0.20
NEAR = 0.25
_SUMMARY_COLUMN = {"grad_norm_wq": "grad_wq_step0"}


def _median(claim, summary: pd.DataFrame) -> float:
    """Our median of a claim's quantity (per-seed ratios for a ratio claim)."""
    if isinstance(claim, RatioClaim):
        wide = summary.pivot(index="seed", columns="variant", values=claim.column).astype(float)
        values = wide[claim.numerator] / wide[claim.denominator] / claim.divide_by
    else:
        values = summary[summary.variant == claim.variant][claim.column].astype(float)
    return float(values.median())


def section(tables: Tables) -> str:
    screen = tables.get(SCREEN_CSV, ["name", "kept"])
    scores = tables.get(
        SCORES_CSV, ["reading", "pass", "score", "rank", *(f"log_{t}" for t in TERMS)]
    )
    summary = tables.get(SUMMARY_CSV, ["variant", "seed", "grad_wq_step0", "step_loss_below_1",
                                       "step_loss_below_0p1", "final_loss"])  # fmt: skip
    last = scores[scores["pass"] == scores["pass"].max()].sort_values("rank")
    fitted = str(last.reading.iloc[0])
    n_kept = int(screen.kept.astype(bool).sum())

    top = scores.sort_values(["pass", "rank"], ascending=[False, True]).head(10)
    score_table = markdown_table(
        ["Pass", "Rank", "Reading", *(f"log ratio {t}" for t in TERMS), "Score"],
        [
            (r["pass"], str(r["rank"]), r.reading,
             *("" if np.isnan(r[f"log_{t}"]) else f"{r[f'log_{t}']:+.3f}" for t in TERMS),
             f"{r.score:.3f}")
            for _, r in top.iterrows()
        ],
    )  # fmt: skip

    scaled = summary[summary.variant == "scaled"]
    bar_rows, met = [], True
    for term in QUALITY_TERMS:
        median = float(scaled[_SUMMARY_COLUMN.get(term, term)].astype(float).median())
        off = median / ARTICLE_SCALED[term] - 1
        met &= bool(abs(off) <= QUALITY)  # False for a median that is never reached
        text = "never" if np.isnan(median) else f"{fmt(median)} ({off:+.0%})"
        bar_rows.append(f"{term} {text} (article {fmt(ARTICLE_SCALED[term])})")

    rows = claim_rows(PREDICTION_CLAIMS, tables)
    medians = [_median(c, summary) for c in PREDICTION_CLAIMS]
    near = [
        not np.isnan(m) and abs(m / c.article - 1) <= NEAR
        for c, m in zip(PREDICTION_CLAIMS, medians, strict=True)
    ]
    table = markdown_table(
        ["Quantity", "Article (one run)", "Fitted: median [min, max]", "Verdict", "±25%"],
        [(r.quantity, r.article, r.ours, r.verdict, "yes" if n else "no")
         for r, n in zip(rows, near, strict=True)],
    )  # fmt: skip
    within = sum(r.verdict == WITHIN for r in rows)
    return "\n\n".join(
        [
            "## The article's set-up, reconstructed (experiment 09)",
            f"The screen computed the step-0 W_Q gradient norm of {len(screen)} declared "
            f"readings (no training) and kept {n_kept} whose scaled median lies within a "
            "factor 1.5 of the article's 0.1085. Stage 2 trained scaled attention only and "
            "scored each candidate by the root-mean-square log ratio of our medians to the "
            "article's four scaled numbers (step-0 norm, loss-1.0 and loss-0.1 steps, final "
            "loss at the best run length; a milestone not reached counts as reached at the "
            "horizon, a censored value). The fit never read an unscaled number. "
            f"Fitted reading: **{fitted}** (score {last.score.iloc[0]:.3f}).",
            score_table,
            f"Scaled numbers under the fitted reading ({summary.seed.nunique()} seeds): "
            + ", ".join(bar_rows)
            + f"; quality bar (all within ±{QUALITY:.0%}): {'met' if met else '**not met**'}.",
            "The prediction: both variants of the fitted reading, identical initialisation "
            "and data. Every unscaled number and ratio below was unseen by the fit; verdicts by "
            "the seed-range rule of experiment 04.",
            table,
            f"{within} of {len(rows)} rows within seed range; {sum(near)} of {len(rows)} with "
            f"our median within ±{NEAR:.0%} of the article.",
        ]
    )
