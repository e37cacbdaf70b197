"""The articles' numbers, transcribed once, and where our counterpart of each is measured.

Article 004 ("Can Attention Work Without the sqrt(d) Scaling?") states every number below;
``results/REPORT.md`` puts each beside ours (by the rules of ``attnlab.harness.verdicts``). A claim is one of:

* ``CellClaim``: a Monte-Carlo mean in one CSV row, compared with the tolerance rule
  ``|ours - article| <= 4 sqrt(2) SEM + half a unit of the article's last printed digit``
  (the article's estimate is as noisy as ours, hence the sqrt(2)).
* ``DerivedClaim``: a statement about a whole curve (a peak, a crossing, a bound), checked
  by the check function its study registers under the name ``check``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: The combined-standard-error multiple of the tolerance rule.
SEM_MULTIPLE = 4.0


@dataclass(frozen=True)
class CellClaim:
    """A number the article measured, and the CSV cell (mean and SEM) that measures ours."""

    section: str
    quantity: str
    article: float
    decimals: int
    csv: str
    mean_column: str
    sem_column: str
    where: dict[str, object] = field(default_factory=dict)

    @property
    def article_text(self) -> str:
        """The article's number as printed."""
        return f"{self.article:.{self.decimals}f}"

    @property
    def half_unit(self) -> float:
        """Half a unit of the article's last printed digit."""
        return 0.5 * 10.0 ** (-self.decimals)


@dataclass(frozen=True)
class DerivedClaim:
    """A statement about a curve, checked by its study's ``CHECKS[check]``."""

    section: str
    quantity: str
    article: str
    check: str


@dataclass(frozen=True)
class SeedClaim:
    """A number from the article's single training run, against our spread over seeds:
    reproduced when it lies inside ``[min, max]`` of ours."""

    section: str
    quantity: str
    article: float
    decimals: int
    csv: str
    column: str
    variant: str

    @property
    def article_text(self) -> str:
        return f"{self.article:.{self.decimals}f}"


@dataclass(frozen=True)
class RatioClaim:
    """A ratio ``numerator / denominator`` of one column between two variants, paired by
    seed; reproduced when the article's ratio lies inside our per-seed range."""

    section: str
    quantity: str
    article: float
    decimals: int
    csv: str
    column: str
    numerator: str = "unscaled"
    denominator: str = "scaled"

    @property
    def article_text(self) -> str:
        return f"{self.article:.{self.decimals}f}"


VARIANCE = "The Variance Argument"
SATURATION = "What Breaks Without It: Saturation"
GRADIENT = "The Gradient Argument"

LOGIT_CSV = "01_logit_variance.csv"
SATURATION_CSV = "02_saturation_sweep.csv"
JACOBIAN_CSV = "03_jacobian_norm.csv"


def _cell(section, quantity, article, decimals, csv, column, variant=None, d_k=None):
    """A claim on ``<column>_mean`` (with ``<column>_sem``) in the row of variant and d_k."""
    where = {k: v for k, v in (("variant", variant), ("d_k", d_k)) if v is not None}
    return CellClaim(
        section, quantity, article, decimals, csv, f"{column}_mean", f"{column}_sem", where
    )


# fmt: off
STATIC_CLAIMS: tuple[CellClaim | DerivedClaim, ...] = (
    CellClaim(VARIANCE, "std of q.k at d_k = 64", 7.9774, 4, LOGIT_CSV, "std_measured", "std_se", {"d_k": 64}),
    DerivedClaim(VARIANCE, "|std / sqrt(d_k) - 1| for 4 <= d_k <= 1024", "<= 0.5%", "variance_band"),
    _cell(SATURATION, "max weight, unscaled, d_k = 4", 0.170, 3, SATURATION_CSV, "max_weight", "unscaled", 4),
    _cell(SATURATION, "max weight, unscaled, d_k = 64", 0.749, 3, SATURATION_CSV, "max_weight", "unscaled", 64),
    _cell(SATURATION, "max weight, unscaled, d_k = 1024", 0.936, 3, SATURATION_CSV, "max_weight", "unscaled", 1024),
    _cell(SATURATION, "max weight, scaled, d_k = 64", 0.0434, 4, SATURATION_CSV, "max_weight", "scaled", 64),
    _cell(SATURATION, "max weight, scaled, d_k = 1024", 0.0431, 4, SATURATION_CSV, "max_weight", "scaled", 1024),
    _cell(SATURATION, "entropy (nats), unscaled, d_k = 4", 3.97, 2, SATURATION_CSV, "entropy", "unscaled", 4),
    _cell(SATURATION, "entropy (nats), unscaled, d_k = 64", 0.75, 2, SATURATION_CSV, "entropy", "unscaled", 64),
    _cell(SATURATION, "entropy (nats), unscaled, d_k = 1024", 0.159, 3, SATURATION_CSV, "entropy", "unscaled", 1024),
    _cell(SATURATION, "entropy (nats), scaled, d_k = 64 (\"around 5.05\")", 5.05, 2, SATURATION_CSV, "entropy", "scaled", 64),
    _cell(SATURATION, "entropy (nats), scaled, d_k = 1024 (\"around 5.05\")", 5.05, 2, SATURATION_CSV, "entropy", "scaled", 1024),
    _cell(GRADIENT, "Jacobian norm, unscaled, d_k = 4", 0.187, 3, JACOBIAN_CSV, "jacobian_fro", "unscaled", 4),
    _cell(GRADIENT, "Jacobian norm, unscaled, d_k = 16", 0.288, 3, JACOBIAN_CSV, "jacobian_fro", "unscaled", 16),
    _cell(GRADIENT, "Jacobian norm, unscaled, d_k = 64", 0.231, 3, JACOBIAN_CSV, "jacobian_fro", "unscaled", 64),
    _cell(GRADIENT, "Jacobian norm, unscaled, d_k = 256", 0.142, 3, JACOBIAN_CSV, "jacobian_fro", "unscaled", 256),
    _cell(GRADIENT, "Jacobian norm, unscaled, d_k = 1024", 0.083, 3, JACOBIAN_CSV, "jacobian_fro", "unscaled", 1024),
    _cell(GRADIENT, "Jacobian norm, scaled, d_k = 64 (\"about 0.099\")", 0.099, 3, JACOBIAN_CSV, "jacobian_fro", "scaled", 64),
    _cell(GRADIENT, "Jacobian norm, scaled, d_k = 1024 (\"about 0.099\")", 0.099, 3, JACOBIAN_CSV, "jacobian_fro", "scaled", 1024),
    DerivedClaim(GRADIENT, "d_k of the unscaled Jacobian-norm peak", "16", "jacobian_peak"),
    DerivedClaim(GRADIENT, "unscaled norm crosses below scaled", "between d_k 256 and 1024", "jacobian_crossing"),
)

TRAINING = "A Training Demo"
RECALL_SUMMARY_CSV = "04_recall_summary.csv"

TRAINING_CLAIMS: tuple[SeedClaim | RatioClaim, ...] = (
    SeedClaim(TRAINING, "W_Q gradient norm at step 0, scaled", 0.1085, 4, RECALL_SUMMARY_CSV, "grad_wq_step0", "scaled"),
    SeedClaim(TRAINING, "W_Q gradient norm at step 0, unscaled", 1.0610, 4, RECALL_SUMMARY_CSV, "grad_wq_step0", "unscaled"),
    RatioClaim(TRAINING, "W_Q gradient ratio at step 0, unscaled / scaled", 9.8, 1, RECALL_SUMMARY_CSV, "grad_wq_step0"),
    SeedClaim(TRAINING, "step smoothed loss crosses 1.0, scaled", 224, 0, RECALL_SUMMARY_CSV, "step_loss_below_1", "scaled"),
    SeedClaim(TRAINING, "step smoothed loss crosses 1.0, unscaled", 424, 0, RECALL_SUMMARY_CSV, "step_loss_below_1", "unscaled"),
    RatioClaim(TRAINING, "loss-1.0 step ratio, unscaled / scaled", 424 / 224, 2, RECALL_SUMMARY_CSV, "step_loss_below_1"),
    SeedClaim(TRAINING, "step smoothed loss crosses 0.1, scaled", 436, 0, RECALL_SUMMARY_CSV, "step_loss_below_0p1", "scaled"),
    SeedClaim(TRAINING, "step smoothed loss crosses 0.1, unscaled", 822, 0, RECALL_SUMMARY_CSV, "step_loss_below_0p1", "unscaled"),
    RatioClaim(TRAINING, "loss-0.1 step ratio, unscaled / scaled", 822 / 436, 2, RECALL_SUMMARY_CSV, "step_loss_below_0p1"),
    SeedClaim(TRAINING, "plateau start (step), unscaled", 530, 0, RECALL_SUMMARY_CSV, "plateau_start", "unscaled"),
    SeedClaim(TRAINING, "plateau end (step), unscaled", 820, 0, RECALL_SUMMARY_CSV, "plateau_end", "unscaled"),
    SeedClaim(TRAINING, "plateau level (loss), unscaled", 0.3, 1, RECALL_SUMMARY_CSV, "plateau_level", "unscaled"),
    SeedClaim(TRAINING, "final smoothed loss, scaled", 0.00562, 5, RECALL_SUMMARY_CSV, "final_loss", "scaled"),
    SeedClaim(TRAINING, "final smoothed loss, unscaled", 0.01374, 5, RECALL_SUMMARY_CSV, "final_loss", "unscaled"),
    RatioClaim(TRAINING, "final loss ratio, unscaled / scaled", 0.01374 / 0.00562, 2, RECALL_SUMMARY_CSV, "final_loss"),
    SeedClaim(TRAINING, "eval accuracy (2000 held-out), scaled", 1.0, 3, RECALL_SUMMARY_CSV, "eval_accuracy", "scaled"),
    SeedClaim(TRAINING, "eval accuracy (2000 held-out), unscaled", 1.0, 3, RECALL_SUMMARY_CSV, "eval_accuracy", "unscaled"),
)
# fmt: on

TOP_LOGIT = "000: the top logit"
MODEL_WIDTH = "000: per-head vs model width"
FOLDING = "000: folding the factor into W_q"
COMPANION_CSV = "08_companion_claims.csv"


def _companion(section, quantity, article, decimals, measured):
    """A claim on the ``value`` (with ``sem``) of the 08 row whose quantity is ``measured``."""
    return CellClaim(
        section, quantity, article, decimals, COMPANION_CSV, "value", "sem", {"quantity": measured}
    )


# Article 000 ("Why Scaled Dot-Product Attention Divides by the Square Root of the Key
# Dimension"), measured by experiment 08 (n = 512 keys, d_k = 64, d_model = 512, 8 heads).
# fmt: off
COMPANION_CLAIMS: tuple[CellClaim | DerivedClaim, ...] = (
    _companion(TOP_LOGIT, "sqrt(2 ln n) at n = 512 (the article's approximation)", 3.5, 1, "sqrt_2_ln_n"),
    _companion(TOP_LOGIT, "top logit above the row mean, in row std (\"about 3.5 sigma\")", 3.5, 1, "standardized_top_gap"),
    _companion(TOP_LOGIT, "top logit above the row mean at d_k = 64 (\"nearly 28\")", 28, 0, "absolute_top_gap"),
    _companion(TOP_LOGIT, "runner-up logit below the top (\"the rest are e^-28 or smaller\")", 28, 0, "top_two_gap"),
    DerivedClaim(TOP_LOGIT, "largest probability, unscaled, d_k = 64", "within a rounding error of 1", "near_one_hot"),
    _companion(MODEL_WIDTH, "divisor sqrt(d_k), d_k = 64", 8, 0, "divisor_per_head"),
    _companion(MODEL_WIDTH, "divisor sqrt(d_model), d_model = 512 (\"roughly 22.6\")", 22.6, 1, "divisor_model_width"),
    _companion(MODEL_WIDTH, "over-flattening factor of the logits (\"sqrt(8)\")", 2.83, 2, "over_flattening_factor"),
    DerivedClaim(FOLDING, "scaling W_q alone by d_k^-1/4 is algebraically identical", "identical logits", "fold_quarter_identical"),
    DerivedClaim(FOLDING, "the W_q gradient is scaled by the same constant", "same constant as W_q", "fold_gradient_constant"),
)
# fmt: on
