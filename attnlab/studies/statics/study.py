"""Study statics, declared: its outputs, their columns and the rules ``make verify``
compares them by, its figures and its place in the report."""

from __future__ import annotations

from attnlab.harness.declaration import EXACT, KEY, SE, UNCHECKED, Output, Study, mean

STUDY = Study(
    "statics",
    1,
    {
        "01_logit_variance.csv": Output(
            "01_logit_variance.py",
            {
                "d_k": KEY,
                "samples": UNCHECKED,
                "std_measured": mean("std_se"),
                "std_se": SE,
                "std_predicted": EXACT,
                "rel_error": mean("rel_error_se"),
                "rel_error_se": SE,
                "std_scaled": mean("std_scaled_se"),
                "std_scaled_se": SE,
                "hp_samples": UNCHECKED,
                "std_hp": mean("std_hp_se"),
                "std_hp_se": SE,
                "rel_error_hp": mean("rel_error_hp_se"),
                "rel_error_hp_se": SE,
            },
            out_flag="--out",
            quick_flags=("--samples", "20000", "--hp-samples", "200000"),
        ),
        "02_saturation_sweep.csv": Output(
            "02_saturation_sweep.py",
            {
                "variant": KEY,
                "d_k": KEY,
                "n_keys": KEY,
                "trials": UNCHECKED,
                "sampler": KEY,
                "max_weight_mean": mean("max_weight_sem"),
                "max_weight_sem": SE,
                "entropy_mean": mean("entropy_sem"),
                "entropy_sem": SE,
            },
            out_flag="--out",
            quick_flags=("--trials", "500"),
        ),
        "03_jacobian_norm.csv": Output(
            "03_jacobian_norm.py",
            {
                "variant": KEY,
                "d_k": KEY,
                "n_keys": KEY,
                "trials": UNCHECKED,
                "sampler": KEY,
                "jacobian_fro_mean": mean("jacobian_fro_sem"),
                "jacobian_fro_sem": SE,
            },
            out_flag="--out",
            quick_flags=("--trials", "500"),
        ),
    },
    figures=("fig1_saturation", "fig2_jacobian_norm"),
    claims="STATIC_CLAIMS",
)
