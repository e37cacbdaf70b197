"""Study real_model_causal, declared: experiment 13 run on experiment 14's trained causal
language models (GPT-2 checkpoints), its outputs, their columns and ``make verify`` rules,
its figure and its place in the report."""

from __future__ import annotations

from attnlab.harness.declaration import EXACT, KEY, Output, Study, close
from attnlab.studies.real_model.study import (
    CAUSAL_COUNTERFACTUALS_CSV,
    CAUSAL_HEADS_CSV,
    CAUSAL_LAYERS_CSV,
    F16_EPS,
    FORWARD,
    QUANTILE_TAGS,
    SCRIPT,
    SHARE,
    WEIGHTS_ONLY,
)

#: 14's models read: the scaled one and the qk-layernorm one at 14's one width, where 14
#: writes them (``lm_proxy.study.checkpoint_name``; a path, not an import of 14's code).
CHECKPOINTS = ("results/checkpoints/14_lm_scaled_d64", "results/checkpoints/14_lm_qk_norm_d64")
#: Row lengths: 14's models have 64 positions.
LENGTHS = (16, 32, 64)


def _spread(name: str) -> dict:
    return {f"{name}_{tag}": FORWARD for tag in QUANTILE_TAGS}


HEADS = Output(
    SCRIPT,
    {
        "checkpoint": KEY,
        "mechanism": EXACT,
        "model": KEY,
        "row_length": KEY,
        "layer": KEY,
        "head": KEY,
        "rows": EXACT,
        **_spread("logit_std"),
        **_spread("max_weight"),
        **_spread("entropy_ratio"),
        **_spread("jacobian_norm"),
        "saturated_share": SHARE,
        **_spread("q_norm"),
        **_spread("k_norm"),
        "sigma": WEIGHTS_ONLY,
        **{f"elasticity_{a:g}": FORWARD for a in (1.0, 2.0, 4.0, 8.0)},
        "owner": EXACT,
    },
)

COUNTERFACTUALS = Output(
    SCRIPT,
    {
        "checkpoint": KEY,
        "counterfactual": KEY,
        "qk_scale": KEY,
        "logit_factor": EXACT,
        "row_length": EXACT,
        "logit_std_median": FORWARD,
        "max_weight_median": FORWARD,
        "entropy_ratio_median": FORWARD,
        "jacobian_norm_median": FORWARD,
        "saturated_share": SHARE,
        "next_token_loss": FORWARD,
        "next_token_loss_change": FORWARD,
        "top1_agreement": SHARE,
    },
)

LAYERS = Output(
    SCRIPT,
    {
        "checkpoint": KEY,
        "mechanism": EXACT,
        "layer": KEY,
        "row_length": EXACT,
        "max_abs_qk": FORWARD,
        "max_abs_logit": FORWARD,
        "float16_max": EXACT,
        "float16_error_mechanism": close(F16_EPS, 0.0),
        "float16_error_unscaled": close(F16_EPS, 0.0),
    },
)

STUDY = Study(
    "real_model_causal",
    13,
    {
        CAUSAL_HEADS_CSV: HEADS,
        CAUSAL_COUNTERFACTUALS_CSV: COUNTERFACTUALS,
        CAUSAL_LAYERS_CSV: LAYERS,
    },
    figures=("fig13_real_model_causal",),
    reads=("real_model",),
    # 13 counts these as committed defaults too (its parser's committed_arguments)
    arguments=" ".join(
        [
            "--checkpoint",
            *CHECKPOINTS,
            "--lengths",
            *map(str, LENGTHS),
            "--counterfactual-length",
            str(max(LENGTHS)),
        ]
    ),  # fmt: skip
)
