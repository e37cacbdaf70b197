"""The report's section for experiment 08: article 000's numbers and the folding check."""

from __future__ import annotations

from attnlab.harness.tables import Tables, markdown_table, num
from attnlab.harness.verdicts import Check, claim_rows, claims_block
from attnlab.studies.companion.study import CLAIMS, COMPANION_CSV


def _companion_value(tables: Tables, quantity: str, column: str = "value") -> float:
    frame = tables.get(COMPANION_CSV, ["claim", "quantity", "setting", "value", "sem", "predicted"])
    return float(frame.loc[frame.quantity == quantity, column].iloc[0])


def _near_one_hot(tables: Tables) -> tuple[str, str, bool]:
    """The article: the largest probability of an unscaled row is within rounding of 1."""
    mean = _companion_value(tables, "max_weight_unscaled")
    sem = _companion_value(tables, "max_weight_unscaled", "sem")
    return f"{mean:.3f} ± {sem:.3f}", "mean max weight over rows", mean > 0.99


def _fold_quarter_identical(tables: Tables) -> tuple[str, str, bool]:
    """The article folds d_k^-1/4 into W_q alone; only W_q and W_k together are identical."""
    alone = _companion_value(tables, "logit_rel_diff [W_Q * d_k^-1/4 only]")
    both = _companion_value(tables, "logit_rel_diff [W_Q, W_K * d_k^-1/4]")
    ours = f"logits off by {1 + alone:.3f}x (max rel. diff {alone:.3g})"
    return ours, f"W_q and W_k each by d_k^-1/4: identical (rel. diff {both:.1e})", alone < 1e-5


def _fold_gradient_constant(tables: Tables) -> tuple[str, str, bool]:
    """The article: the W_q gradient "is scaled by the same constant" c as W_q. Holds only
    if the measured ratio (folded / runtime) equals c; the chain rule gives 1/c."""
    both = _companion_value(tables, "grad_ratio [W_Q, W_K * d_k^-1/4]")
    constant = 1.0 / _companion_value(tables, "grad_ratio [W_Q, W_K * d_k^-1/4]", "predicted")
    alone = _companion_value(tables, "grad_ratio [W_Q * d_k^-1/2]")
    ours = f"x{both:.4g} (W_q, W_k by d_k^-1/4 = {constant:.4g}); x{alone:.4g} (W_q by d_k^-1/2)"
    detail = f"the article: c = {constant:.4g}; the chain rule gives 1/c"
    return ours, detail, abs(both / constant - 1) < 1e-3


#: Check name -> function of the tables returning (ours, detail, verdict).
CHECKS: dict[str, Check] = {
    "near_one_hot": _near_one_hot,
    "fold_quarter_identical": _fold_quarter_identical,
    "fold_gradient_constant": _fold_gradient_constant,
}


def section(tables: Tables) -> str:
    """Experiment 08: article 000's numbers by the tolerance rule, and the folding check."""
    claims = claims_block(claim_rows(CLAIMS, tables, CHECKS))
    frame = tables.get(COMPANION_CSV, ["claim", "quantity", "setting", "value", "sem", "predicted"])
    width = frame[frame.quantity.str.match(r"(logit_std|max_weight|entropy)_(per_head|model)")]
    width_table = markdown_table(
        ["Quantity", "Setting", "Ours ± SEM", "Prediction"],
        [
            (r.quantity, r.setting, f"{r.value:.4g} ± {r.sem:.2g}", num(r.predicted, 4, "—"))
            for r in width.itertuples()
        ],
    )
    fold = frame[frame.claim == "folded scale"]
    fold_table = markdown_table(
        ["Quantity [fold]", "Ours (mean over setups)", "Derivation"],
        [(r.quantity, f"{r.value:.6g}", num(r.predicted, 6, "—")) for r in fold.itertuples()],
    )
    e_max = _companion_value(tables, "expected_max_normal")
    asymptotic = _companion_value(tables, "sqrt_2_ln_n")
    gap = _companion_value(tables, "standardized_top_gap")
    absolute = _companion_value(tables, "absolute_top_gap")
    return "\n\n".join(
        [
            "### The companion article's numbers (experiment 08)",
            "Article 000 (*Why Scaled Dot-Product Attention Divides by the Square Root of the Key "
            "Dimension*), same rules as above. The expected maximum of n standard "
            f"normals is {e_max:.3f} for n = 512 (exact integral); sqrt(2 ln n) = "
            f"{asymptotic:.3f} is only the leading term of its expansion, so the top logit sits "
            f"{gap:.2f} row standard deviations ({absolute:.1f} at d_k = 64) above the row mean.",
            claims,
            "Dividing by sqrt(d_model) instead of sqrt(d_k) (n = 512 keys, d_k = 64): entropy "
            "predicted by ln n − σ²/2 for logits of std σ.",
            width_table,
            "Folding the factor into the weights (random x, W_Q, W_K, W_V; L = mean squared error "
            "of the attention output): relative logit difference, ratio of W_Q gradient norms "
            "(folded / runtime division) and ratio of first-order logit changes of one SGD step "
            "on W_Q, same learning rate.",
            fold_table,
        ]
    )


#: The headline of each CSV (``attnlab.studies.headline``).
HEADLINES = {
    COMPANION_CSV: lambda f: f"{f.claim.nunique()} claims, {len(f)} quantities",
}
