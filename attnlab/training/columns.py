"""The columns of the training tables and the rules ``make verify`` compares them by: the
per-step curves and the per-seed summary that every study training the recall model the
same way writes (04's recall, 05's remedies, 09's and 12's predictions)."""

from __future__ import annotations

from attnlab.harness.declaration import CHAOTIC, KEY, SEED_RANGE

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
