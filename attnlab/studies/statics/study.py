"""Study statics (experiments 01-03), declared: the tables of the logit variance, the
softmax saturation and the Jacobian norm against d_k, the rules ``make verify`` compares
their columns by, and the claims of article 004's variance, saturation and gradient
arguments they judge."""

from __future__ import annotations

import math

from attnlab.claims import BoundClaim, CellClaim, CheckClaim, Claim, IdentityClaim
from attnlab.harness.declaration import EXACT, KEY, UNCHECKED, Output, Study, mean_with_se

LOGIT_CSV = "01_logit_variance.csv"
SATURATION_CSV = "02_saturation_sweep.csv"
JACOBIAN_CSV = "03_jacobian_norm.csv"

VARIANCE = "The Variance Argument"
SATURATION = "What Breaks Without It: Saturation"
GRADIENT = "The Gradient Argument"
SMALL_HEAD = "Keep the head small"


def _cell(section, quantity, quote, article, decimals, csv, column, variant=None, d_k=None):
    """A claim on ``<column>_mean`` (with ``<column>_sem``) in the row of variant and d_k."""
    where = {k: v for k, v in (("variant", variant), ("d_k", d_k)) if v is not None}
    return CellClaim(
        section, quantity, quote, article, decimals, csv, f"{column}_mean", f"{column}_sem", where
    )


# fmt: off
CLAIMS: tuple[Claim, ...] = (
    CellClaim(VARIANCE, "std of q.k at d_k = 64", "an empirical standard deviation of 7.9774 at d_k = 64", 7.9774, 4, LOGIT_CSV, "std_measured", "std_se", {"d_k": 64}),
    IdentityClaim(VARIANCE, "predicted std at d_k = 64, sqrt(64)", "against the predicted 8", 8, 0, math.sqrt(64)),
    BoundClaim(VARIANCE, "|std / sqrt(d_k) - 1| for 4 <= d_k <= 1024", "the match stays within 0.5% at every d_k from 4 to 1024", 0.005, LOGIT_CSV, "rel_error_hp", "rel_error_hp_se", "rel_error", "rel_error_se", "d_k", 4, 1024),
    IdentityClaim(SATURATION, "unscaled logit std at d_k = 512, sqrt(512)", "about 22.6 at d_k = 512", 22.6, 1, math.sqrt(512)),
    IdentityClaim(SATURATION, "uniform entropy ceiling ln 256 (nats)", "the uniform ceiling of ln 256 = 5.545", 5.545, 3, math.log(256)),
    _cell(SATURATION, "max weight, unscaled, d_k = 4", "climbs from 0.170 at d_k = 4", 0.170, 3, SATURATION_CSV, "max_weight", "unscaled", 4),
    _cell(SATURATION, "max weight, unscaled, d_k = 64", "to 0.749 at d_k = 64", 0.749, 3, SATURATION_CSV, "max_weight", "unscaled", 64),
    _cell(SATURATION, "max weight, unscaled, d_k = 1024", "and 0.936 at d_k = 1024", 0.936, 3, SATURATION_CSV, "max_weight", "unscaled", 1024),
    _cell(SATURATION, "max weight, scaled, d_k = 64", "0.0434 at d_k = 64", 0.0434, 4, SATURATION_CSV, "max_weight", "scaled", 64),
    _cell(SATURATION, "max weight, scaled, d_k = 1024", "and 0.0431 at d_k = 1024", 0.0431, 4, SATURATION_CSV, "max_weight", "scaled", 1024),
    _cell(SATURATION, "entropy (nats), unscaled, d_k = 4", "the entropy collapses from 3.97", 3.97, 2, SATURATION_CSV, "entropy", "unscaled", 4),
    _cell(SATURATION, "entropy (nats), unscaled, d_k = 64", "to 0.75", 0.75, 2, SATURATION_CSV, "entropy", "unscaled", 64),
    _cell(SATURATION, "entropy (nats), unscaled, d_k = 1024", "to 0.159 nats", 0.159, 3, SATURATION_CSV, "entropy", "unscaled", 1024),
    _cell(SATURATION, "entropy (nats), scaled, d_k = 64", "mean entropy pinned around 5.05 nats", 5.05, 2, SATURATION_CSV, "entropy", "scaled", 64),
    _cell(SATURATION, "entropy (nats), scaled, d_k = 1024", "mean entropy pinned around 5.05 nats", 5.05, 2, SATURATION_CSV, "entropy", "scaled", 1024),
    CheckClaim(SATURATION, "unscaled max weight for d_k >= 64", "roughly three quarters or more of its mass on a single key", ">= 0.75 (roughly)", "three_quarters_at_production"),
    _cell(GRADIENT, "Jacobian norm, unscaled, d_k = 4", "0.187 at d_k = 4", 0.187, 3, JACOBIAN_CSV, "jacobian_fro", "unscaled", 4),
    _cell(GRADIENT, "Jacobian norm, unscaled, d_k = 16", "peaking at 0.288 at d_k = 16", 0.288, 3, JACOBIAN_CSV, "jacobian_fro", "unscaled", 16),
    _cell(GRADIENT, "Jacobian norm, unscaled, d_k = 64", "then falling through 0.231", 0.231, 3, JACOBIAN_CSV, "jacobian_fro", "unscaled", 64),
    _cell(GRADIENT, "Jacobian norm, unscaled, d_k = 256", "and 0.142", 0.142, 3, JACOBIAN_CSV, "jacobian_fro", "unscaled", 256),
    _cell(GRADIENT, "Jacobian norm, unscaled, d_k = 1024", "reaching 0.083", 0.083, 3, JACOBIAN_CSV, "jacobian_fro", "unscaled", 1024),
    _cell(GRADIENT, "Jacobian norm, scaled, d_k = 64", "sits flat at about 0.099", 0.099, 3, JACOBIAN_CSV, "jacobian_fro", "scaled", 64),
    _cell(GRADIENT, "Jacobian norm, scaled, d_k = 1024", "sits flat at about 0.099", 0.099, 3, JACOBIAN_CSV, "jacobian_fro", "scaled", 1024),
    CheckClaim(GRADIENT, "d_k of the unscaled Jacobian-norm peak", "peaking at 0.288 at d_k = 16", "16", "jacobian_peak"),
    CheckClaim(GRADIENT, "unscaled norm crosses below scaled", "crossing below the scaled curve between d_k = 256 and 1024", "between d_k 256 and 1024", "jacobian_crossing"),
)
# fmt: on


def _sweep(script: str, *statistics: str) -> Output:
    """The table of 02 or 03 (``attnlab.core.softmax_sweeps``): per (variant, d_k), the
    mean ``<statistic>_mean`` and its SEM ``<statistic>_sem`` of each statistic."""
    columns = {"variant": KEY, "d_k": KEY, "n_keys": KEY, "trials": UNCHECKED, "sampler": KEY}
    for statistic in statistics:
        columns |= mean_with_se(f"{statistic}_mean", f"{statistic}_sem")
    return Output(script, columns, out_flag="--out", quick_flags=("--trials", "500"))


STUDY = Study(
    "statics",
    1,
    {
        LOGIT_CSV: Output(
            "01_logit_variance.py",
            {
                "d_k": KEY,
                "samples": UNCHECKED,
                **mean_with_se("std_measured", "std_se"),
                "std_predicted": EXACT,
                **mean_with_se("rel_error", "rel_error_se"),
                **mean_with_se("std_scaled", "std_scaled_se"),
                "hp_samples": UNCHECKED,
                **mean_with_se("std_hp", "std_hp_se"),
                **mean_with_se("rel_error_hp", "rel_error_hp_se"),
            },
            out_flag="--out",
            quick_flags=("--samples", "20000", "--hp-samples", "200000"),
        ),
        SATURATION_CSV: _sweep("02_saturation_sweep.py", "max_weight", "entropy"),
        JACOBIAN_CSV: _sweep("03_jacobian_norm.py", "jacobian_fro"),
    },
    figures=("fig1_saturation", "fig2_jacobian_norm"),
    claims=CLAIMS,
)
