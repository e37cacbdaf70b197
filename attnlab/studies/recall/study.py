"""The declaration of study recall (experiment 04): its outputs, their columns and rules.

The curves and the summary are also the tables of every study that trains the recall
model the same way (05's remedies, 09's prediction), which declare theirs from these.
"""

from __future__ import annotations

from attnlab.harness.declaration import CHAOTIC, KEY, SEED_RANGE, Output, Study

#: One row per (variant, seed, step): per-seed curves, compared by their mean over steps.
CURVES = {
    "variant": KEY,
    "seed": KEY,
    "step": KEY,
    "loss": SEED_RANGE,
    "smoothed_loss": SEED_RANGE,
    "accuracy": SEED_RANGE,
    "grad_norm_wq": SEED_RANGE,
    "grad_norm_wk": SEED_RANGE,
    "grad_norm_wv": SEED_RANGE,
    "attn_entropy": SEED_RANGE,
    "attn_max_weight": SEED_RANGE,
}
#: One row per (variant, seed); whether a run stalls on a plateau is chaotic for unscaled.
SUMMARY = {
    "variant": KEY,
    "seed": KEY,
    "grad_wq_step0": SEED_RANGE,
    "grad_wk_step0": SEED_RANGE,
    "step_loss_below_1": SEED_RANGE,
    "step_loss_below_0p1": SEED_RANGE,
    "final_loss": SEED_RANGE,
    "final_attn_entropy": SEED_RANGE,
    "eval_accuracy": SEED_RANGE,
    "plateau_start": CHAOTIC,
    "plateau_end": CHAOTIC,
    "plateau_level": CHAOTIC,
}
SCRIPT = "04_associative_recall.py"

STUDY = Study(
    "recall",
    2,
    {
        "04_recall_curves.csv": Output(SCRIPT, CURVES, curve_step="step"),
        "04_recall_summary.csv": Output(SCRIPT, SUMMARY),
    },
    figures=("fig3_training",),
    reads=("article_fit",),
    claims="TRAINING_CLAIMS",
)
