"""The report's section for experiment 07: float16 overflow, mask fills, correlated q, k."""

from __future__ import annotations

import numpy as np

from attnlab.harness.tables import Tables, markdown_table, num


def section(tables: Tables) -> str:
    """Experiment 07: float16 overflow thresholds, the mask table, correlated logits."""
    from attnlab.studies.failure_modes.compute import (  # imports jax: only when built
        CORRELATION_COLUMNS,
        FLOAT16_EXP_LIMIT,
        MASK_COLUMNS,
        MASK_ROWS,
        OVERFLOW_COLUMNS,
        PART_CSVS,
        REFERENCE_FILL,
        TV_TOLERANCE,
        overflow_thresholds,
    )

    overflow = tables.get(PART_CSVS["overflow"], OVERFLOW_COLUMNS)
    found = overflow_thresholds(overflow)
    overflow_table = markdown_table(
        [
            "Softmax",
            "first s with NaN/inf",
            "first s with an all-zero row",
            f"first s with TV error > {TV_TOLERANCE:g}",
            "worst TV error while finite",
        ],
        [
            (
                r.method,
                num(r.first_nonfinite, 5),
                num(r.first_zero_row, 5),
                num(r.first_error_above_tol, 5),
                f"{r.max_tv_error_before_overflow:.2g}",
            )
            for r in found.itertuples()
        ],
    )
    masks = tables.get(PART_CSVS["masks"], MASK_COLUMNS)

    def outcome(r) -> str:
        if r.output_nan:
            return "NaN"
        return f"sum {r.row_sum:.4g}, leak {r.leaked_mass:.3g}"

    mask_rows = []
    for (dtype, fill), group in masks.groupby(["dtype", "fill"], sort=False):
        partly, fully = (group[group.row == kind].iloc[0] for kind in MASK_ROWS)
        mask_rows.append(
            (
                dtype,
                fill,
                "—" if fill == REFERENCE_FILL else f"{partly.fill_stored:.4g}",
                outcome(partly),
                outcome(fully),
                "yes" if fully.grad_nan or partly.grad_nan else "no",
            )
        )
    mask_table = markdown_table(
        ["dtype", "fill", "stored as", "partly masked row", "fully masked row", "NaN gradient"],
        mask_rows,
    )
    allowed = int(MASK_ROWS["partly masked"].sum())
    corr = tables.get(PART_CSVS["correlation"], CORRELATION_COLUMNS)
    mean_z = (corr.mean_measured - corr.mean_predicted) / corr.mean_se
    shown = corr[corr.rho.isin([-1.0, -0.5, 0.0, 0.5, 1.0])]
    corr_table = markdown_table(
        ["d_k", "ρ", "mean (± SE)", "d_k ρ", "std (± SE)", "sqrt(d_k (1 + ρ²))", "std z"],
        [
            (
                int(r.d_k),
                f"{r.rho:g}",
                f"{r.mean_measured:.4g} ± {r.mean_se:.2g}",
                f"{r.mean_predicted:g}",
                f"{r.std_measured:.4g} ± {r.std_se:.2g}",
                f"{r.std_predicted:.4g}",
                f"{r.std_z:+.1f}",
            )
            for r in shown.itertuples()
        ],
    )
    return "\n\n".join(
        [
            "### Failure modes at the boundaries (experiment 07)",
            f"**Overflow.** {int(overflow.rows.iloc[0])} rows of {int(overflow.n_keys.iloc[0])} "
            "float16 logits, scaled so the largest is s (s from "
            f"{overflow.max_logit.min():g} to {overflow.max_logit.max():g} in steps of "
            f"{np.diff(np.sort(overflow.max_logit.unique()))[0]:g}); total-variation (TV) error "
            "against the float64 softmax of the same float16 values. exp overflows float16 above "
            f"ln 65504 = {FLOAT16_EXP_LIMIT:.4f}; before that, the row sum overflows and "
            "e / inf gives all-zero rows.",
            overflow_table,
            "**Mask fills.** A naive mask `softmax(where(mask, z, fill))` with the max "
            "subtracted, every step in the dtype; `masked_softmax` is the suite's reference. "
            f"Partly masked: {allowed} of {len(MASK_ROWS['partly masked'])} keys allowed; fully "
            "masked: none. Leak: total weight on masked keys. NaN gradient: of sum_j p_j v_j with "
            "respect to the logits or v.",
            mask_table,
            "**Correlated q and k.** With q_i = ρ k_i + sqrt(1 − ρ²) e_i: E[q_i k_i] = ρ, "
            "E[q_i² k_i²] = 3ρ² + (1 − ρ²) = 1 + 2ρ², so Var(q_i k_i) = 1 + ρ² and "
            "q·k has mean d_k ρ and std sqrt(d_k (1 + ρ²)). Dividing by sqrt(d_k) leaves a mean "
            "sqrt(d_k) ρ that grows with the width. "
            f"{int(corr.samples.iloc[0])} samples per d_k, all ρ on the same draws; over all "
            f"{len(corr)} cells the largest |z| is {corr.std_z.abs().max():.1f} for the std and "
            f"{mean_z.abs().max():.1f} for the mean.",
            corr_table,
        ]
    )
