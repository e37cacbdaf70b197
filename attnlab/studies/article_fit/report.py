"""The report's section for experiment 09: the fitted reading and what it predicts."""

from __future__ import annotations

import numpy as np

from attnlab.claims import TRAINING_CLAIMS
from attnlab.harness.tables import Tables, fmt, markdown_table
from attnlab.harness.verdicts import WITHIN
from attnlab.studies.article_fit.compute import (
    ARTICLE_SCALED,
    SCORES_CSV,
    SCREEN_CSV,
    SUMMARY_CSV,
    TERMS,
)
from attnlab.studies.recall.report import NEAR, reading_rows, seen_by_fit

#: The fit's quality bar: these scaled numbers within this fraction of the article.
QUALITY_TERMS = ("grad_norm_wq", "step_loss_below_1", "step_loss_below_0p1")
QUALITY = 0.20
_SUMMARY_COLUMN = {"grad_norm_wq": "grad_wq_step0"}


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

    rows, nears = reading_rows(tables, SUMMARY_CSV)
    unseen = [
        (r, n)
        for c, r, n in zip(TRAINING_CLAIMS, rows, nears, strict=True)
        if r.kind == "measured" and not seen_by_fit(c)
    ]
    within = sum(r.verdict == WITHIN for r, _ in unseen)
    close = sum(bool(n) for _, n in unseen)
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
            "and data, judged row by row in the training table of experiment 04 (its *fitted* "
            f"column). Of the {len(unseen)} numbers the fit did not see (every unscaled number, "
            f"every ratio and the scaled accuracy), {within} lie within seed range and "
            f"{close} have our median within ±{NEAR:.0%} of the article.",
        ]
    )
