"""The report's section for experiment 07: float16 overflow, mask fills, correlated q, k."""

from __future__ import annotations

import numpy as np

from attnlab.claims import ABOUT
from attnlab.harness.headlines import medians
from attnlab.harness.tables import Tables, markdown_table, num
from attnlab.harness.verdicts import Check, claim_rows, claims_block
from attnlab.studies.failure_modes.study import (
    CLAIMS,
    CORRELATION_COLUMNS,
    CORRELATION_CSV,
    FLOAT16_EXP_LIMIT,
    MASK_COLUMNS,
    MASK_ROWS,
    MASKS_CSV,
    OVERFLOW_COLUMNS,
    OVERFLOW_CSV,
    PART_CSVS,
    REFERENCE_FILL,
    TV_TOLERANCE,
)
from attnlab.studies.failure_modes.thresholds import overflow_thresholds

MASKS = ["dtype", "fill", "fill_stored", "row", "output_nan", "leaked_mass"]


def _mask_rows(tables: Tables, fill: str, row: str):
    frame = tables.get(MASKS_CSV, MASKS)
    return frame[(frame.fill == fill) & (frame.row == row)].set_index("dtype")


def _minus_inf_nan(tables: Tables) -> tuple[str, str, bool]:
    """A fully masked row filled with -inf is NaN in every dtype."""
    rows = _mask_rows(tables, "-inf", "fully masked")
    nan = [d for d, r in rows.iterrows() if bool(r.output_nan)]
    return f"NaN in {', '.join(nan) or 'no dtype'}", f"of {len(rows)} dtypes", len(nan) == len(rows)


def _float16_minus_1e9(tables: Tables) -> tuple[str, str, bool]:
    """-1e9 is stored as -inf in float16 and gives the same fully masked row as -inf."""
    big = _mask_rows(tables, "-1e9", "fully masked").loc["float16"]
    inf = _mask_rows(tables, "-inf", "fully masked").loc["float16"]
    same = float(big.fill_stored) == float("-inf") and bool(big.output_nan) == bool(inf.output_nan)
    return f"stored as {big.fill_stored}, NaN: {bool(big.output_nan)}", "", same


def _float32_exact_zero(tables: Tables) -> tuple[str, str, bool]:
    """With -1e9 in float32 the masked keys of a partly masked row get exactly zero."""
    row = _mask_rows(tables, "-1e9", "partly masked").loc["float32"]
    leak = float(row.leaked_mass)
    return f"mass on masked keys: {leak:g}", "exactly 0", leak == 0.0


def _float16_overflow(tables: Tables) -> tuple[str, str, bool]:
    """The first largest logit at which a float16 softmax (no max subtraction) is not
    finite, against "roughly 11"."""
    frame = tables.get(OVERFLOW_CSV, ["method", "max_logit", "nonfinite_fraction"])
    first = float(overflow_thresholds(frame).set_index("method").loc["float16", "first_nonfinite"])
    ours = f"first non-finite at s = {num(first, 4)}"
    return ours, f"within {ABOUT:.0%} of 11", bool(abs(first / 11 - 1) <= ABOUT)


#: Check name -> function of the tables returning (ours, detail, verdict).
CHECKS: dict[str, Check] = {
    "minus_inf_fully_masked_nan": _minus_inf_nan,
    "float16_minus_1e9_is_minus_inf": _float16_minus_1e9,
    "float32_minus_1e9_exact_zero": _float32_exact_zero,
    "float16_overflow_logit": _float16_overflow,
}


def section(tables: Tables) -> str:
    """Experiment 07: float16 overflow thresholds, the mask table, correlated logits."""
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
            "**Article 000's claims on these boundaries.**",
            claims_block(claim_rows(CLAIMS, tables, CHECKS)),
        ]
    )


#: The headline of each CSV (``attnlab.studies.headline``).
HEADLINES = {
    OVERFLOW_CSV: lambda f: medians(
        f, "method", "nonfinite_fraction", "fraction of non-finite rows"
    ),
    MASKS_CSV: lambda f: medians(f, "dtype", "leaked_mass", "mass leaked to masked keys"),
    CORRELATION_CSV: lambda f: medians(
        f.assign(all="all"), "all", "std_z", "|measured - predicted| std, in SEs (median)"
    ),
}
