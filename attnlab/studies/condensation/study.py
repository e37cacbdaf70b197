"""Study condensation, declared: its outputs, their columns and the rules ``make verify``
compares them by, its figures and its place in the report."""

from __future__ import annotations

from attnlab.harness.declaration import BEYOND, EXACT, KEY, SE, UNCHECKED, Output, Study, mean

CONDENSATION = Output(
    "06_condensation.py",
    {
        "n_keys": KEY,
        "d_k": KEY,
        "trials": UNCHECKED,
        "threshold_dk": EXACT,
        "max_weight_unscaled_mean": mean("max_weight_unscaled_sem"),
        "max_weight_unscaled_sem": SE,
        "max_weight_scaled_mean": mean("max_weight_scaled_sem"),
        "max_weight_scaled_sem": SE,
        "gap_mean": mean("gap_sem"),
        "gap_sem": SE,
    },
    out_flag="--out",
)

STUDY = Study(
    "condensation",
    6,
    {
        "06_condensation.csv": CONDENSATION,
    },
    figures=("fig5_condensation",),
    claims="CONDENSATION_CLAIMS",
    part=BEYOND,
)
