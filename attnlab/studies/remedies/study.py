"""Study remedies, declared: its outputs, their columns and the rules ``make verify``
compares them by, its figures and its place in the report."""

from __future__ import annotations

from attnlab.harness.declaration import (
    CHAOTIC,
    EXACT,
    KEY,
    SEED_RANGE,
    UNCHECKED,
    Output,
    Study,
    close,
)
from attnlab.recall.columns import training_outputs

SCRIPT = "05_remedies.py"
CURVES_CSV = "05_remedies_curves.csv"
SUMMARY_CSV = "05_remedies_summary.csv"
FOLD_CURVES_CSV = "05_fold_curves.csv"
FOLD_CHECK_CSV = "05_fold_check.csv"
SENSITIVITY_CSV = "05_sensitivity.csv"

STUDY = Study(
    "remedies",
    3,
    {
        **training_outputs(SCRIPT, CURVES_CSV, SUMMARY_CSV),
        FOLD_CURVES_CSV: Output(
            SCRIPT,
            {
                "seed": KEY,
                "step": KEY,
                "loss_unfolded": SEED_RANGE,
                "loss_folded": SEED_RANGE,
                "smoothed_unfolded": SEED_RANGE,
                "smoothed_folded": SEED_RANGE,
                "grad_norm_wq_unfolded": SEED_RANGE,
                "grad_norm_wq_folded": SEED_RANGE,
            },
            curve_step="step",
        ),
        FOLD_CHECK_CSV: Output(
            SCRIPT,
            {
                "seed": KEY,
                "fold_step": KEY,
                "logit_rel_diff_at_fold": EXACT,
                "grad_wq_ratio_at_fold": EXACT,
                "logit_rel_diff_at_end": SEED_RANGE,
                "eval_accuracy_unfolded": SEED_RANGE,
                "eval_accuracy_folded": SEED_RANGE,
                "final_loss_unfolded": SEED_RANGE,
                "final_loss_folded": SEED_RANGE,
            },
        ),
        SENSITIVITY_CSV: Output(
            SCRIPT,
            {
                "batch_size": KEY,
                "embed_init_std": KEY,
                "seed": KEY,
                "scaled_step_loss_below_1": SEED_RANGE,
                "unscaled_step_loss_below_1": CHAOTIC,
                "ratio_step_loss_below_1": UNCHECKED,
                "scaled_step_loss_below_0p1": SEED_RANGE,
                "unscaled_step_loss_below_0p1": CHAOTIC,
                "ratio_step_loss_below_0p1": UNCHECKED,
                "grad_wq_ratio_step0": close(0.0, 0.01),
                "scaled_eval_accuracy": close(0.01, 0.0),
                "unscaled_eval_accuracy": SEED_RANGE,
            },
            spread_floor=1.0,
        ),
    },
    figures=("fig4_remedies",),
)
