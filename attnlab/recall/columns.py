"""The columns of the training tables and the rules ``make verify`` compares them by: the
per-step curves and the per-seed summary that every study training the recall model the
same way writes (04's recall, 05's remedies, 09's and 12's predictions), and the tables of
the width sweep (10's, the card's)."""

from __future__ import annotations

from attnlab.harness.declaration import CHAOTIC, EXACT, KEY, SEED_RANGE, UNCHECKED, Output

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
#: The per-run numbers both summaries open with: step-0 gradient norms, loss milestones and
#: the final smoothed loss.
_MILESTONES = dict.fromkeys(
    ("grad_wq_step0", "grad_wk_step0", "step_loss_below_1", "step_loss_below_0p1", "final_loss"),
    SEED_RANGE,
)

#: One row per (variant, seed); whether a run stalls on a plateau is chaotic for unscaled.
SUMMARY = {
    "variant": KEY,
    "seed": KEY,
    **_MILESTONES,
    "final_attn_entropy": SEED_RANGE,
    "eval_accuracy": SEED_RANGE,
    "plateau_start": CHAOTIC,
    "plateau_end": CHAOTIC,
    "plateau_level": CHAOTIC,
}


def training_outputs(script: str, curves_csv: str, summary_csv: str) -> dict[str, Output]:
    """The two tables ``script`` writes when it trains the recall model the common way:
    ``curves_csv`` (``CURVES``, compared by the mean over steps) and ``summary_csv``
    (``SUMMARY``)."""
    return {
        curves_csv: Output(script, CURVES, curve_step="step"),
        summary_csv: Output(script, SUMMARY),
    }


#: The width sweep (``attnlab.recall.widths``): one row per lane (d_k, mechanism, lr, seed).
WIDTHS_SUMMARY = {
    "d_k": KEY,
    "mechanism": KEY,
    "lr": KEY,
    "seed": KEY,
    **_MILESTONES,
    "eval_accuracy": SEED_RANGE,
    "routing_accuracy_step0": SEED_RANGE,
    "routing_accuracy_end": SEED_RANGE,
    "asked_weight_step0": SEED_RANGE,
    "asked_weight_end": SEED_RANGE,
    "logit_std_step0": SEED_RANGE,
    "logit_std_end": SEED_RANGE,
    "diverged_step": SEED_RANGE,
}

#: One row per lane and recorded step.
WIDTHS_CURVES = {
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
}

#: Per (mechanism, d_k, lr): medians over seeds, and the best rate at that width.
LR_TRANSFER = {
    "mechanism": KEY,
    "d_k": KEY,
    "lr": KEY,
    "seeds": EXACT,
    "diverged": UNCHECKED,
    "final_loss_median": UNCHECKED,
    "step_loss_below_0p1_median": UNCHECKED,
    "best": UNCHECKED,
}
