"""Study article_fit, declared: its outputs, their columns and the rules ``make verify``
compares them by, its figures and its place in the report."""

from __future__ import annotations

from attnlab.harness.declaration import EXACT, KEY, UNCHECKED, Output, Study, close
from attnlab.studies.recall.study import CURVES, SUMMARY

SCRIPT = "09_article_fit.py"
#: The second pass (the second family) runs as its own script, so that ``make`` runs it
#: beside the first.
SCRIPT_2 = "12_second_fit.py"

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

STUDY = Study(
    "article_fit",
    4,
    {
        "09_fit_screen.csv": Output(SCRIPT, SCREEN),
        "09_fit_scores.csv": SCORES,
        "09_fit_prediction_curves.csv.xz": Output(
            SCRIPT, {"reading": KEY, **CURVES}, curve_step="step"
        ),
        "09_fit_prediction_summary.csv": Output(SCRIPT, {"reading": KEY, **SUMMARY}),
        "12_second_fit_screen.csv": Output(SCRIPT_2, SCREEN),
        "12_second_fit_scores.csv": SCORES_2,
        "12_second_fit_prediction_curves.csv.xz": Output(
            SCRIPT_2, {"reading": KEY, **CURVES}, curve_step="step"
        ),
        "12_second_fit_prediction_summary.csv": Output(SCRIPT_2, {"reading": KEY, **SUMMARY}),
    },
    figures=("fig7_article_fit",),
)
