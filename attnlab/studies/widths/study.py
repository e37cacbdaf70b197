"""Study widths, declared: its outputs, their columns and the rules ``make verify``
compares them by, its figures and its place in the report."""

from __future__ import annotations

from attnlab.harness.declaration import EXACT, KEY, SE, UNCHECKED, Output, Study, mean
from attnlab.training.columns import LR_TRANSFER, WIDTHS_CURVES, WIDTHS_SUMMARY

SCRIPT = "10_widths.py"

JACOBIAN_N16 = Output(
    SCRIPT,
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
        "10_widths_summary.csv": Output(SCRIPT, WIDTHS_SUMMARY),
        "10_widths_curves.csv": Output(SCRIPT, WIDTHS_CURVES, curve_step="step"),
        "10_lr_transfer.csv": Output(SCRIPT, LR_TRANSFER),
        "10_jacobian_n16.csv": JACOBIAN_N16,
    },
    figures=("fig8_widths", "fig9_drift"),
    claims="WIDTHS_CLAIMS",
)
