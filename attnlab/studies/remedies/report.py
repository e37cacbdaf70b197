"""The report's section for experiment 05: remedies side by side, the fold, sensitivity."""

from __future__ import annotations

import pandas as pd

from attnlab.harness.headlines import medians
from attnlab.harness.tables import Tables, markdown_table
from attnlab.harness.verdicts import spread_text
from attnlab.studies.remedies.study import FOLD_CHECK_CSV, SENSITIVITY_CSV, SUMMARY_CSV

#: A mechanism "matches scaled" when every seed reaches loss 0.1 within this factor of the
#: scaled run's step on the same seed.
MATCH_FACTOR = 1.25


def mechanism_verdict(summary: pd.DataFrame, name: str) -> str:
    """Verdict of one mechanism against ``scaled``, backed by every seed.

    Fails if any seed's eval accuracy is below 99% or never reaches loss 0.1; otherwise
    compares per-seed ratios r = step(loss 0.1) / scaled's step on the same seed:
    all r <= 1.25 matches scaled, all r > 1.25 is slower, all r < 1/1.25 is faster.
    """
    mine = summary[summary.variant == name].set_index("seed")
    base = summary[summary.variant == "scaled"].set_index("seed")
    if (mine.eval_accuracy < 0.99).any():
        return f"**fails**: eval accuracy < 99% on {(mine.eval_accuracy < 0.99).sum()} seed(s)"
    if mine.step_loss_below_0p1.isna().any():
        return f"**slow**: loss 0.1 not reached on {mine.step_loss_below_0p1.isna().sum()} seed(s)"
    if name == "scaled":
        return "reference"
    ratio = mine.step_loss_below_0p1.astype(float) / base.step_loss_below_0p1.astype(float)
    if (ratio <= MATCH_FACTOR).all() and (ratio >= 1 / MATCH_FACTOR).all():
        return f"matches scaled (ratio {ratio.min():.2f}-{ratio.max():.2f})"
    if (ratio > MATCH_FACTOR).all():
        return f"slower than scaled ({ratio.min():.2f}-{ratio.max():.2f}x)"
    if (ratio < 1 / MATCH_FACTOR).all():
        return f"faster than scaled ({ratio.min():.2f}-{ratio.max():.2f}x)"
    return f"mixed across seeds ({ratio.min():.2f}-{ratio.max():.2f}x)"


def section(tables: Tables) -> str:
    """Experiment 05: the mechanisms side by side, the fold check, the sensitivity grid."""
    summary = tables.get(SUMMARY_CSV, ["variant", "seed", "eval_accuracy"])
    n_seeds = summary.seed.nunique()
    rows = []
    for name in dict.fromkeys(summary.variant):
        group = summary[summary.variant == name]
        rows.append(
            (
                name,
                spread_text(group.step_loss_below_1, 4),
                spread_text(group.step_loss_below_0p1, 4),
                spread_text(group.final_loss),
                spread_text(group.eval_accuracy),
                spread_text(group.grad_wq_step0),
                spread_text(group.grad_wk_step0),
                spread_text(group.final_attn_entropy),
                mechanism_verdict(summary, name),
            )
        )
    remedies = markdown_table(
        [
            "Mechanism",
            "Step: loss 1.0",
            "Step: loss 0.1",
            "Final loss",
            "Eval acc.",
            "‖∇W_Q‖ step 0",
            "‖∇W_K‖ step 0",
            "Final entropy (nats)",
            "Verdict",
        ],
        rows,
    )
    check = tables.get(FOLD_CHECK_CSV, ["seed", "logit_rel_diff_at_fold"])
    fold = markdown_table(
        [
            "Seed",
            "Fold step",
            "Max logit diff at fold (rel.)",
            "‖∇W_Q‖ folded / unfolded at fold",
            "Logit diff at the end (rel.)",
            "Final loss unfolded",
            "Final loss folded",
            "Eval acc. unfolded / folded",
        ],
        [
            (
                int(r.seed),
                int(r.fold_step),
                f"{r.logit_rel_diff_at_fold:.2e}",
                f"{r.grad_wq_ratio_at_fold:.2f}",
                f"{r.logit_rel_diff_at_end:.2e}",
                f"{r.final_loss_unfolded:.3g}",
                f"{r.final_loss_folded:.3g}",
                f"{r.eval_accuracy_unfolded:.4f} / {r.eval_accuracy_folded:.4f}",
            )
            for r in check.itertuples()
        ],
    )
    grid = tables.get(SENSITIVITY_CSV, ["batch_size", "embed_init_std", "seed"])
    stds = sorted(grid.embed_init_std.unique())
    cells = []
    for batch_size in sorted(grid.batch_size.unique()):
        line = [str(int(batch_size))]
        for std in stds:
            cell = grid[(grid.batch_size == batch_size) & (grid.embed_init_std == std)]
            line.append(
                f"{spread_text(cell.ratio_step_loss_below_1)} / "
                f"{spread_text(cell.ratio_step_loss_below_0p1)}"
            )
        cells.append(line)
    sensitivity = markdown_table(["Batch size", *[f"embed std {s:g}" for s in stds]], cells)
    return "\n\n".join(
        [
            "## Beyond the article: remedies (experiment 05)",
            f"Every mechanism on the 04 task with the same {n_seeds} seeds, initialisations and "
            "data; median [min, max] over seeds. Verdict rule: fails if any seed's eval accuracy "
            "is below 99%; otherwise the per-seed ratio of the loss-0.1 step to scaled's on the "
            f"same seed decides (within {MATCH_FACTOR}x either way: matches).",
            remedies,
            "### Folding 1/sqrt(d_k) into W_Q of a trained model",
            "Scaled attention is trained to the fold step; then W_Q <- W_Q / sqrt(d_k) with no "
            "divisor, Adam state carried over, same learning rate and data as the unfolded "
            "continuation.",
            fold,
            "### Sensitivity of the 04 result",
            "Milestone ratio unscaled / scaled (loss 1.0 / loss 0.1), median [min, max] over "
            f"{grid.seed.nunique()} seeds per cell; `never` where unscaled never reached it.",
            sensitivity,
        ]
    )


#: The headline of each CSV (``attnlab.studies.headline``).
HEADLINES = {
    SUMMARY_CSV: lambda f: medians(
        f, "variant", "step_loss_below_1", "median step to smoothed loss 1"
    ),
    FOLD_CHECK_CSV: lambda f: medians(
        f.assign(all="all seeds"),
        "all",
        "logit_rel_diff_at_end",
        "folded vs unfolded logits at the end, relative difference",
    ),
    SENSITIVITY_CSV: lambda f: medians(
        f.assign(all="over the grid"),
        "all",
        "ratio_step_loss_below_1",
        "unscaled/scaled step to loss 1",
    ),
}
