"""Study widths, declared: its outputs, their columns and the rules ``make verify``
compares them by, its figures and its place in the report."""

from __future__ import annotations

from attnlab.claims import CheckClaim, Claim
from attnlab.harness.declaration import EXACT, KEY, UNCHECKED, Output, Study, mean_with_se
from attnlab.recall.columns import LR_TRANSFER, WIDTHS_CURVES, WIDTHS_SUMMARY

SCRIPT = "10_widths.py"
SUMMARY_CSV = "10_widths_summary.csv"
CURVES_CSV = "10_widths_curves.csv"
LR_CSV = "10_lr_transfer.csv"
JACOBIAN_CSV = "10_jacobian_n16.csv"

# fmt: off
WIDTHS = "A Training Demo, across widths (experiment 10)"
CLAIMS: tuple[Claim, ...] = (
    CheckClaim(WIDTHS, "unscaled at large d_k: routing frozen near chance, payload still learned", "degenerates into a hard gather with frozen, random routing but a still-learnable payload through W_V", "frozen routing, learnable payload", "frozen_routing"),
    CheckClaim(WIDTHS, "... hence a silent quality loss: held-out accuracy below scaled's", "the failure mode is a silent quality loss rather than a crash", "accuracy loss, no crash", "silent_quality_loss"),
    CheckClaim(WIDTHS, "training slow-down follows the static Jacobian ratio (sign at every width)", "the softmax Jacobian ... crossing below the scaled curve between d_k = 256 and 1024", "unscaled slower where its Jacobian is smaller", "slowdown_follows_jacobian"),
    CheckClaim(WIDTHS, "d_k = 1: scaled and unscaled runs identical", "At d_k = 1 the two variants are literally identical", "identical", "identical_at_dk1"),
    CheckClaim(WIDTHS, "1/d_k (muP): best learning rate moves less across widths than with 1/sqrt(d_k)", "prescribes ... which is one ingredient of zero-shot hyperparameter transfer across model widths", "inv_d's optimum moves less", "mup_lr_transfer"),
)
# fmt: on

JACOBIAN_N16 = Output(
    SCRIPT,
    {
        "d_k": KEY,
        "n_keys": EXACT,
        "trials": UNCHECKED,
        **mean_with_se("jacobian_scaled_mean", "jacobian_scaled_sem"),
        **mean_with_se("jacobian_unscaled_mean", "jacobian_unscaled_sem"),
        "ratio_unscaled_scaled": UNCHECKED,
        "ratio_se": UNCHECKED,
    },
)

STUDY = Study(
    "widths",
    5,
    {
        SUMMARY_CSV: Output(SCRIPT, WIDTHS_SUMMARY),
        CURVES_CSV: Output(SCRIPT, WIDTHS_CURVES, curve_step="step"),
        LR_CSV: Output(SCRIPT, LR_TRANSFER),
        JACOBIAN_CSV: JACOBIAN_N16,
    },
    figures=("fig8_widths", "fig9_drift"),
    claims=CLAIMS,
)
