"""Study widths, declared: its outputs, their columns and the rules ``make verify``
compares them by, its figures and its place in the report."""

from __future__ import annotations

from attnlab.harness.declaration import EXACT, KEY, SE, SEED_RANGE, UNCHECKED, Output, Study, mean

SUMMARY = Output(
    "10_widths.py",
    {
        "d_k": KEY,
        "mechanism": KEY,
        "lr": KEY,
        "seed": KEY,
        "grad_wq_step0": SEED_RANGE,
        "grad_wk_step0": SEED_RANGE,
        "step_loss_below_1": SEED_RANGE,
        "step_loss_below_0p1": SEED_RANGE,
        "final_loss": SEED_RANGE,
        "eval_accuracy": SEED_RANGE,
        "routing_accuracy_step0": SEED_RANGE,
        "routing_accuracy_end": SEED_RANGE,
        "asked_weight_step0": SEED_RANGE,
        "asked_weight_end": SEED_RANGE,
        "logit_std_step0": SEED_RANGE,
        "logit_std_end": SEED_RANGE,
        "diverged_step": SEED_RANGE,
    },
)

CURVES = Output(
    "10_widths.py",
    {
        "d_k": KEY,
        "mechanism": KEY,
        "lr": KEY,
        "seed": KEY,
        "step": KEY,
        "smoothed_loss": SEED_RANGE,
        "q_norm": SEED_RANGE,
        "k_norm": SEED_RANGE,
        "logit_std_raw": SEED_RANGE,
        "logit_max_raw": SEED_RANGE,
        "logit_std": SEED_RANGE,
        "logit_max": SEED_RANGE,
        "cos_asked": SEED_RANGE,
        "rho_implied": SEED_RANGE,
        "routing_accuracy": SEED_RANGE,
        "asked_weight": SEED_RANGE,
        "attn_max_weight": SEED_RANGE,
        "attn_entropy": SEED_RANGE,
        "accuracy": SEED_RANGE,
    },
    curve_step="step",
)

LR_TRANSFER = Output(
    "10_widths.py",
    {
        "mechanism": KEY,
        "d_k": KEY,
        "lr": KEY,
        "seeds": EXACT,
        "diverged": UNCHECKED,
        "final_loss_median": UNCHECKED,
        "step_loss_below_0p1_median": UNCHECKED,
        "best": UNCHECKED,
    },
)

JACOBIAN_N16 = Output(
    "10_widths.py",
    {
        "d_k": KEY,
        "n_keys": EXACT,
        "trials": UNCHECKED,
        "jacobian_scaled_mean": mean("jacobian_scaled_sem"),
        "jacobian_scaled_sem": SE,
        "jacobian_unscaled_mean": mean("jacobian_unscaled_sem"),
        "jacobian_unscaled_sem": SE,
        "ratio_unscaled_scaled": UNCHECKED,
        "ratio_se": UNCHECKED,
    },
)

STUDY = Study(
    "widths",
    5,
    {
        "10_widths_summary.csv": SUMMARY,
        "10_widths_curves.csv": CURVES,
        "10_lr_transfer.csv": LR_TRANSFER,
        "10_jacobian_n16.csv": JACOBIAN_N16,
    },
    figures=("fig8_widths", "fig9_drift"),
    claims="WIDTHS_CLAIMS",
)
