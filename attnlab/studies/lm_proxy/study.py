"""Study lm_proxy, declared: its outputs, their columns and the rules ``make verify``
compares them by, its figures, its thresholds and its place in the report."""

from __future__ import annotations

from attnlab.harness.declaration import EXACT, KEY, SEED_RANGE, UNCHECKED, Output, Study

SCRIPT = "14_lm_proxy.py"
SWEEP_CSV = "14_lm_sweep.csv"
CURVES_CSV = "14_lm_curves.csv"
OWNERSHIP_CSV = "14_lm_ownership.csv"

#: Declared before any run. The learning rates: Wortsman et al.'s grid in half-decade steps.
LRS = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1)
#: The widths at a fixed head width (16), and the mechanisms swept at every width.
WIDTHS = (32, 64, 128)
SWEPT = ("scaled", "qk_norm")
#: The mechanisms swept at one width only (the article's unscaled; muP's 1/d, Fig. E.6).
ONE_WIDTH = ("unscaled", "inv_d")
ONE_WIDTH_D_MODEL = 64
#: Known answer (b): without qk-layernorm the layer-0 max logit passes this at the top
#: rates; with it it stays below BOUNDED (Wortsman et al.: 1e4 marked divergence at scale).
GROWN = 1e3
BOUNDED = 1e2
#: A run "degrades" when its held-out loss exceeds the width's best by this many nats.
DEGRADED_BY = 0.1
#: The drift of the closing question: the same model at the best rate and at this multiple.
DRIFT_FACTOR = 10.0
#: The temperature "holds" after the drift when the logit scale grows by at most this factor.
HOLDS_WITHIN = 2.0
#: Rows of the curves: every this many steps.
RECORD_EVERY = 10
#: The layout of the trained models saved at the best rate (``attnlab.lm.export.LAYOUTS``;
#: a folder each, ``checkpoint_name``): GPT-2's, which 13's committed causal tables read.
LAYOUT = "gpt2"


def checkpoint_name(mechanism: str, d_model: int) -> str:
    """The folder of ``mechanism``'s saved model at width ``d_model``."""
    return f"14_lm_{mechanism}_d{d_model}"


SWEEP = Output(
    SCRIPT,
    {
        "mechanism": KEY,
        "d_model": KEY,
        "lr": KEY,
        "seed": KEY,
        "n_layers": EXACT,
        "n_heads": EXACT,
        "initial_val_loss": SEED_RANGE,
        "initial_val_loss_se": UNCHECKED,
        "initial_logit_var": SEED_RANGE,
        "final_val_loss": SEED_RANGE,
        "final_val_loss_se": UNCHECKED,
        "max_attn_logit_layer0": SEED_RANGE,
        "max_attn_logit_layer1": SEED_RANGE,
        "final_entropy_layer0": SEED_RANGE,
        "final_q_norm_layer0": SEED_RANGE,
        "final_k_norm_layer0": SEED_RANGE,
        "diverged_step": EXACT,
    },
    spread_floor=1.0,
)

CURVES = Output(
    SCRIPT,
    {
        "mechanism": KEY,
        "d_model": KEY,
        "lr": KEY,
        "seed": KEY,
        "layer": KEY,
        "step": KEY,
        "train_loss": SEED_RANGE,
        "max_logit": SEED_RANGE,
        "entropy": SEED_RANGE,
        "q_norm": SEED_RANGE,
        "k_norm": SEED_RANGE,
    },
    curve_step="step",
    spread_floor=1.0,
)

OWNERSHIP = Output(
    SCRIPT,
    {
        "mechanism": KEY,
        "d_model": KEY,
        "seed": KEY,
        "weights": KEY,
        "layer": KEY,
        "head": KEY,
        "lr": UNCHECKED,
        "logit_scale": SEED_RANGE,
        "elasticity_1": SEED_RANGE,
        "elasticity_8": SEED_RANGE,
        "owner": UNCHECKED,
    },
    spread_floor=1.0,
)

STUDY = Study(
    "lm_proxy",
    12,
    {SWEEP_CSV: SWEEP, CURVES_CSV: CURVES, OWNERSHIP_CSV: OWNERSHIP},
    figures=("fig12_lm_proxy",),
)
