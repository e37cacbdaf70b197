"""Study article_fit, declared: its outputs, their columns and the rules ``make verify``
compares them by, its figures and its place in the report; the CSV names of both fits and
the numbers their computation, figure and report share."""

from __future__ import annotations

from typing import NamedTuple

from attnlab.harness.declaration import EXACT, KEY, UNCHECKED, Output, Study, close
from attnlab.recall.columns import CURVES, SUMMARY

SCRIPT = "09_article_fit.py"
#: The second pass (the second family) runs as its own script, so that ``make`` runs it
#: beside the first.
SCRIPT_2 = "12_second_fit.py"


class FitCsvs(NamedTuple):
    """The four CSVs of one fit, one per stage (the prediction has two)."""

    screen: str
    scores: str
    curves: str
    summary: str


FIRST_CSVS = FitCsvs(
    "09_fit_screen.csv",
    "09_fit_scores.csv",
    "09_fit_prediction_curves.csv.xz",
    "09_fit_prediction_summary.csv",
)
SECOND_CSVS = FitCsvs(
    "12_second_fit_screen.csv",
    "12_second_fit_scores.csv",
    "12_second_fit_prediction_curves.csv.xz",
    "12_second_fit_prediction_summary.csv",
)

#: The article's scaled numbers, the only targets of the fit: (term, value).
ARTICLE_SCALED: dict[str, float] = {
    "grad_norm_wq": 0.1085,
    "step_loss_below_1": 224.0,
    "step_loss_below_0p1": 436.0,
    "final_loss": 0.00562,
}
TERMS: tuple[str, ...] = tuple(ARTICLE_SCALED)
#: The fit's quality bar: the step-0 norm and both milestones within this fraction of the
#: article's (the report judges each predicted reading by it).
QUALITY = 0.20
#: A reading is within the score's noise of the best of its pass when its score exceeds the
#: best's by at most this many bootstrap standard errors of the difference.
NOISE_SE = 2.0
#: Bootstrap replicates of the fit seeds behind that standard error.
BOOTSTRAP_REPLICATES = 2000

SCORES = Output(
    SCRIPT,
    {
        "reading": KEY,
        "pass": KEY,
        "horizon": EXACT,
        "seeds": EXACT,
        "grad_norm_wq": close(0.0, 0.01),
        "step_loss_below_1": close(0.0, 0.1),
        "step_loss_below_0p1": close(0.0, 0.1),
        "censored_1": UNCHECKED,
        "censored_0p1": UNCHECKED,
        "final_loss": close(0.0, 0.25),
        "best_run_length": UNCHECKED,
        "log_grad_norm_wq": UNCHECKED,
        "log_step_loss_below_1": UNCHECKED,
        "log_step_loss_below_0p1": UNCHECKED,
        "log_final_loss": UNCHECKED,
        "score": close(0.05, 0.0),
        "rank": UNCHECKED,
        "score_se": UNCHECKED,
        "gap_se": UNCHECKED,
        "within_noise": UNCHECKED,
    },
)

#: The second pass's scores: a member ``<reading>/<smoothing>`` per row, its smoothing
#: beside it.
SCORES_2 = Output(
    SCRIPT_2,
    {"reading": KEY, "pass": KEY, "smoothing": EXACT,
     **{k: v for k, v in SCORES.columns.items() if k not in ("reading", "pass")}},
)  # fmt: skip

SCREEN = {
    "name": KEY,
    "slot": EXACT,
    "init": EXACT,
    "bias": EXACT,
    "d_model": EXACT,
    "batch_size": EXACT,
    "grad_norm_wq_scaled": close(0.0, 0.01),
    "grad_norm_wq_unscaled": close(0.0, 0.01),
    "ratio": UNCHECKED,
    "kept": EXACT,
}


def _outputs(csvs: FitCsvs, script: str, scores: Output, fit: str) -> dict[str, Output]:
    return {
        csvs.screen: Output(script, SCREEN),
        csvs.scores: scores,
        csvs.curves: Output(script, {"reading": KEY, **CURVES}, curve_step="step", prediction=fit),
        csvs.summary: Output(script, {"reading": KEY, **SUMMARY}, prediction=fit),
    }


STUDY = Study(
    "article_fit",
    4,
    {
        **_outputs(FIRST_CSVS, SCRIPT, SCORES, "first fit"),
        **_outputs(SECOND_CSVS, SCRIPT_2, SCORES_2, "second fit"),
    },
    figures=("fig7_article_fit",),
)
