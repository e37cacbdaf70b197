"""The report's section for experiment 09: each fit's best reading and what it predicts."""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnlab.claims import TRAINING_CLAIMS
from attnlab.harness.headlines import medians
from attnlab.harness.tables import Tables, fmt, markdown_table, seeds_text
from attnlab.harness.verdicts import WITHIN
from attnlab.recall.predictions import NEAR, fit_predictions, reading_rows, seen_by_fit
from attnlab.studies.article_fit.study import (
    ARTICLE_SCALED,
    BOOTSTRAP_REPLICATES,
    FIRST_CSVS,
    NOISE_SE,
    QUALITY,
    SECOND_CSVS,
    TERMS,
)

#: The fit's quality bar: these scaled numbers within this fraction of the article.
QUALITY_TERMS = ("grad_norm_wq", "step_loss_below_1", "step_loss_below_0p1")
_SUMMARY_COLUMN = {"grad_norm_wq": "grad_wq_step0"}


def quality_bar(summary: pd.DataFrame) -> tuple[list[str], bool]:
    """The fit's quality bar on one reading's prediction summary: a text per term (median,
    offset, article) and whether every term lies within ``QUALITY``."""
    scaled = summary[summary.variant == "scaled"]
    texts, met = [], True
    for term in QUALITY_TERMS:
        median = float(scaled[_SUMMARY_COLUMN.get(term, term)].astype(float).median())
        off = median / ARTICLE_SCALED[term] - 1
        met &= bool(abs(off) <= QUALITY)  # False for a median that is never reached
        text = "never" if np.isnan(median) else f"{fmt(median)} ({off:+.0%})"
        texts.append(f"{term} {text} (article {fmt(ARTICLE_SCALED[term])})")
    return texts, met


def unseen_counts(tables: Tables, csv: str) -> tuple[int, int, int]:
    """Of the training numbers 09's fit did not see, judged on ``csv``: how many, how many
    within seed range, how many with our median within ±``NEAR``."""
    rows, nears = reading_rows(tables, csv)
    unseen = [
        (r, n)
        for c, r, n in zip(TRAINING_CLAIMS, rows, nears, strict=True)
        if r.kind == "measured" and not seen_by_fit(c)
    ]
    return len(unseen), sum(r.verdict == WITHIN for r, _ in unseen), sum(bool(n) for _, n in unseen)


def _fit_part(tables: Tables, screen_csv: str, scores_csv: str, summary_csv: str) -> dict:
    """One fit's pieces of the section: its counts, its best reading, the top of its score
    table, its noise paragraph and one paragraph per predicted reading."""
    screen = tables.get(screen_csv, ["name", "kept"])
    score_columns = ["reading", "pass", "seeds", "score", "rank", "score_se", "gap_se",
                     "within_noise", *(f"log_{t}" for t in TERMS)]  # fmt: skip
    scores = tables.get(scores_csv, score_columns)
    summary_columns = ["variant", "seed", "grad_wq_step0", "step_loss_below_1",
                       "step_loss_below_0p1", "final_loss"]  # fmt: skip
    predictions = fit_predictions(tables, summary_csv)
    last = scores[scores["pass"] == scores["pass"].max()].sort_values("rank")
    best = predictions[0].reading
    seeds = int(last.seeds.iloc[0])
    pass_a = scores[scores["pass"] == scores["pass"].min()]

    top = scores.sort_values(["pass", "rank"], ascending=[False, True]).head(10)
    score_table = markdown_table(
        ["Pass", "Rank", "Reading", *(f"log ratio {t}" for t in TERMS), "Score ± SE",
         "Gap to best / its SE"],
        [
            (r["pass"], str(r["rank"]), r.reading,
             *("" if np.isnan(r[f"log_{t}"]) else f"{r[f'log_{t}']:+.3f}" for t in TERMS),
             f"{r.score:.3f} ± {r.score_se:.3f}",
             "best" if r["rank"] == 1 else _gap(r, scores))
            for _, r in top.iterrows()
        ],
    )  # fmt: skip
    noise = (
        f"The noise of a score: the fit seeds ({seeds}) resampled with replacement "
        f"({BOOTSTRAP_REPLICATES} bootstrap replicates, the same draw for every reading), the "
        "score recomputed on each; a reading is *within the score's noise* of its pass's best "
        f"when its score exceeds the best's by at most {NOISE_SE:g} bootstrap standard errors "
        "of that difference. Within the noise of the best finalist: "
        + ", ".join(f"`{r}`" for r in last[last.within_noise.astype(bool)].reading)
        + f" ({len(predictions)} of {len(last)} finalists); stage 3 predicts each of them."
    )
    paragraphs, met_any = [], False
    for p in predictions:
        summary = tables.get(p.csv, summary_columns)
        texts, met = quality_bar(summary)
        met_any |= met
        n, within, close = unseen_counts(tables, p.csv)
        role = "best" if p.reading == best else "within the noise"
        paragraphs.append(
            f"- `{p.reading}` ({role}; {summary.seed.nunique()} seeds, {p.steps} steps). "
            "Scaled numbers: " + ", ".join(texts)
            + f"; quality bar (all within ±{QUALITY:.0%}): {'met' if met else '**not met**'}. "
            f"Of the {n} numbers the fit did not see, {within} lie within seed range and "
            f"{close} have our median within ±{NEAR:.0%} of the article."
        )  # fmt: skip
    return {
        "screened": len(screen),
        "kept": int(screen.kept.astype(bool).sum()),
        "trained": len(pass_a),
        "pass_a_seeds": int(pass_a.seeds.iloc[0]),
        "seeds": seeds,
        "best": best,
        "score": float(last.score.iloc[0]),
        "table": score_table,
        "noise": noise,
        "predictions": "\n".join(paragraphs),
        "met": met_any,
    }


def section(tables: Tables) -> str:
    first = _fit_part(tables, *FIRST_CSVS[:2], FIRST_CSVS.summary)
    parts = [
        "## The article's set-up, reconstructed (experiment 09)",
        "### The first fit",
        f"The screen computed the step-0 W_Q gradient norm of {first['screened']} declared "
        f"readings (no training) and kept {first['kept']} whose scaled median lies within a "
        "factor 1.5 of the article's 0.1085. Stage 2 trained scaled attention only and "
        "scored each candidate by the root-mean-square log ratio of our medians to the "
        "article's four scaled numbers (step-0 norm, loss-1.0 and loss-0.1 steps, final "
        "loss at the best run length; a milestone not reached counts as reached at the "
        "horizon, a censored value). The fit never read an unscaled number. "
        f"Best reading: **{first['best']}** (score {first['score']:.3f}).",
        first["table"],
        first["noise"],
        "The prediction: both variants of each predicted reading, identical "
        "initialisation and data. The best reading is judged row by row in the "
        "training table of experiment 04 (its *first fit* column); every predicted reading "
        "has a count line there. The numbers the fit did not see are every unscaled "
        "number, every ratio and the scaled accuracy.",
        first["predictions"],
    ]
    if not tables.has(SECOND_CSVS.summary):
        return "\n\n".join(
            [*parts, f"The second fit is left out: run `{tables.made_by(SECOND_CSVS.summary)}`."]
        )
    second = _fit_part(tables, *SECOND_CSVS[:2], SECOND_CSVS.summary)
    smoothings = _smoothings(tables.get(SECOND_CSVS.scores, ["smoothing"]))
    verdict = (
        "At least one reading within the noise meets the quality bar."
        if second["met"]
        else f"**No reading within the second fit's noise meets the quality bar** (±{QUALITY:.0%} "
        "on the step-0 norm and both scaled milestones); the lines below say by how much each "
        "misses."
    )
    parts += [
        "### The second fit (a denser family, declared before its results)",
        f"The second family (`FAMILY_2` in `attnlab/recall/readings.py`) has "
        f"{second['screened']} readings (batch size and d_model in steps of about √2) and "
        f"{len(smoothings)} smoothings of the loss the milestones are read from "
        f"({', '.join(smoothings)}: "
        "trailing means over that many steps and TensorBoard's debiased exponential moving "
        "averages of that weight); a member is `<reading>/<smoothing>`. The cascade: the "
        f"screen kept {second['kept']} readings (factor 1.5, as the first fit); pass 2a "
        f"trained the kept readings whose screened median is also within ±{QUALITY:.0%} of "
        "0.1085 (a reading outside misses the quality bar's first number on the screen's "
        f"seeds) on {seeds_text(second['pass_a_seeds'])} to the milestone horizon, and scored "
        f"each under every smoothing ({second['trained']} members, three terms; a cut, "
        "without noise where it has one seed); pass 2b trained the readings of the best "
        f"members on {seeds_text(second['seeds'])} from step 0 to the longest run length and "
        "scored every smoothing of them on four terms. "
        f"Best member: **{second['best']}** (score {second['score']:.3f}). {verdict}",
        second["table"],
        second["noise"],
        "The prediction: each member within the noise, both variants, identical "
        "initialisation and data, its milestones read under its own smoothing; the best is "
        "the *second fit* column of the training table of experiment 04.",
        second["predictions"],
    ]
    return "\n\n".join(parts)


def _smoothings(scores: pd.DataFrame) -> list[str]:
    """The smoothings a fit scored (``mean<window>``, ``ema<weight>``), in the order of
    ``attnlab.recall.readings.SMOOTHINGS``: trailing means, then moving averages, each
    by its window or weight."""
    names = scores.smoothing.unique().tolist()
    return sorted(
        names,
        key=lambda n: (n.startswith("ema"), float(n.removeprefix("mean").removeprefix("ema"))),
    )


def _gap(row: pd.Series, scores: pd.DataFrame) -> str:
    """``gap / gap_se`` of a row against its pass's best, with its within-noise verdict."""
    best = scores[(scores["pass"] == row["pass"]) & (scores["rank"] == 1)].score.iloc[0]
    ratio = (row.score - best) / row.gap_se if row.gap_se > 0 else np.inf
    return f"{ratio:.1f} ({'within' if bool(row.within_noise) else 'outside'} the noise)"


#: The headline of each CSV (``attnlab.studies.headline``).
def _kept_headline(frame: pd.DataFrame) -> str:
    return f"{int(frame.kept.sum())} of {len(frame)} readings kept"


def _prediction_headline(frame: pd.DataFrame) -> str:
    return medians(frame, "variant", "step_loss_below_1", "median step to smoothed loss 1")


HEADLINES = {
    FIRST_CSVS.screen: _kept_headline,
    FIRST_CSVS.summary: _prediction_headline,
    SECOND_CSVS.screen: _kept_headline,
    SECOND_CSVS.summary: _prediction_headline,
}
