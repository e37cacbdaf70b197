"""The articles' numbers and statements, transcribed once, each with its source and kind.

Article 004 ("Can Attention Work Without the sqrt(d) Scaling?") and its companion 000
("Why Scaled Dot-Product Attention Divides by the Square Root of the Key Dimension") are
quoted below, one claim per quantitative statement; ``results/REPORT.md`` judges each by
the rule of ``attnlab.harness.verdicts`` that its type names. Every claim has a *kind*:

* ``measured``: judged against our measurement; verdict reproduced or miss.
* ``identity``: arithmetic the article states (``sqrt(64) = 8``); shown with our value of
  the same arithmetic and marked "identity", never counted as reproduced.
* ``qualitative``: a stated rule over our data ("the unscaled norm crosses below the
  scaled one between d_k 256 and 1024"); verdict holds or fails.

Claim types (the rule of each is in ``attnlab.harness.verdicts``):

* ``CellClaim`` (measured): a Monte-Carlo mean in one CSV row, with its SEM.
* ``BoundClaim`` (measured): "within b at every ..." over the rows of a CSV, judged against
  the bound itself with a high-precision column.
* ``SeedClaim`` / ``RatioClaim`` (measured): a number from the article's single training
  run against our seeds (a column of one variant, or a per-seed ratio of two).
* ``CheckClaim`` (measured or qualitative): a statement about a whole curve or table,
  judged by the check function its study registers under ``check``.
* ``IdentityClaim`` (identity): the article's arithmetic and ours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["measured", "identity", "qualitative"]

#: The combined-standard-error multiple of the tolerance rules.
SEM_MULTIPLE = 4.0
#: A seed-range verdict also needs our median within this factor of the article's number.
MEDIAN_FACTOR = 1.5
#: "about", "roughly": a measured number within this relative distance of the article's.
ABOUT = 0.10


@dataclass(frozen=True)
class CellClaim:
    """A number the article measured, and the CSV cell (mean and SEM) that measures ours."""

    section: str
    quantity: str
    quote: str
    article: float
    decimals: int
    csv: str
    mean_column: str
    sem_column: str
    where: dict[str, object] = field(default_factory=dict)
    kind: Kind = "measured"

    @property
    def article_text(self) -> str:
        """The article's number as printed."""
        return f"{self.article:.{self.decimals}f}"

    @property
    def half_unit(self) -> float:
        """Half a unit of the article's last printed digit."""
        return 0.5 * 10.0 ** (-self.decimals)


@dataclass(frozen=True)
class BoundClaim:
    """ "|x| <= bound on every row with ``low <= by <= high``": ``x`` and its SE in
    ``column``/``se_column`` (the decisive, high-precision estimate) and in
    ``headline``/``headline_se`` (the article's sample size, shown beside it)."""

    section: str
    quantity: str
    quote: str
    bound: float
    csv: str
    column: str
    se_column: str
    headline: str
    headline_se: str
    by: str
    low: float
    high: float
    kind: Kind = "measured"

    @property
    def article_text(self) -> str:
        return f"≤ {100 * self.bound:g}%"


@dataclass(frozen=True)
class SeedClaim:
    """A number from the article's single training run, against our spread over seeds of
    ``column`` for ``variant``."""

    section: str
    quantity: str
    quote: str
    article: float
    decimals: int
    csv: str
    column: str
    variant: str
    kind: Kind = "measured"

    @property
    def article_text(self) -> str:
        return f"{self.article:.{self.decimals}f}"


@dataclass(frozen=True)
class RatioClaim:
    """A ratio ``numerator / denominator / divide_by`` of one column between two variants,
    paired by seed, against the article's number."""

    section: str
    quantity: str
    quote: str
    article: float
    decimals: int
    csv: str
    column: str
    numerator: str = "unscaled"
    denominator: str = "scaled"
    divide_by: float = 1.0
    kind: Kind = "measured"

    @property
    def article_text(self) -> str:
        return f"{self.article:.{self.decimals}f}"


@dataclass(frozen=True)
class CheckClaim:
    """A statement about a curve or a table, judged by the study's ``CHECKS[check]``."""

    section: str
    quantity: str
    quote: str
    article: str
    check: str
    kind: Kind = "qualitative"


@dataclass(frozen=True)
class IdentityClaim:
    """Arithmetic the article states: its number and the exact value of the same formula."""

    section: str
    quantity: str
    quote: str
    article: float
    decimals: int
    value: float
    kind: Kind = "identity"

    @property
    def article_text(self) -> str:
        return f"{self.article:.{self.decimals}f}"


Claim = CellClaim | BoundClaim | SeedClaim | RatioClaim | CheckClaim | IdentityClaim

VARIANCE = "The Variance Argument"
SATURATION = "What Breaks Without It: Saturation"
GRADIENT = "The Gradient Argument"
SMALL_HEAD = "Keep the head small"

LOGIT_CSV = "01_logit_variance.csv"
SATURATION_CSV = "02_saturation_sweep.csv"
JACOBIAN_CSV = "03_jacobian_norm.csv"


def _cell(section, quantity, quote, article, decimals, csv, column, variant=None, d_k=None):
    """A claim on ``<column>_mean`` (with ``<column>_sem``) in the row of variant and d_k."""
    where = {k: v for k, v in (("variant", variant), ("d_k", d_k)) if v is not None}
    return CellClaim(
        section, quantity, quote, article, decimals, csv, f"{column}_mean", f"{column}_sem", where
    )


# fmt: off
STATIC_CLAIMS: tuple[Claim, ...] = (
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

TRAINING = "A Training Demo"
RECALL_SUMMARY_CSV = "04_recall_summary.csv"
SUM = RECALL_SUMMARY_CSV

TRAINING_CLAIMS: tuple[Claim, ...] = (
    SeedClaim(TRAINING, "W_Q gradient norm at step 0, scaled", "0.1085 scaled", 0.1085, 4, SUM, "grad_wq_step0", "scaled"),
    SeedClaim(TRAINING, "W_Q gradient norm at step 0, unscaled", "versus 1.0610 unscaled", 1.0610, 4, SUM, "grad_wq_step0", "unscaled"),
    RatioClaim(TRAINING, "W_Q gradient ratio at step 0, unscaled / scaled", "about 9.8 times larger", 9.8, 1, SUM, "grad_wq_step0"),
    IdentityClaim(TRAINING, "the divisor's share of the ratio, sqrt(256)", "multiplies dz/dW_Q by sqrt(256) = 16", 16, 0, math.sqrt(256)),
    RatioClaim(TRAINING, "saturation factor: gradient ratio / 16", "saturation claws back just a factor of about 0.61", 0.61, 2, SUM, "grad_wq_step0", divide_by=16.0),
    IdentityClaim(TRAINING, "chance accuracy, 1 / 32 value tokens", "chance is 3.125%", 0.03125, 5, 1 / 32),
    SeedClaim(TRAINING, "step smoothed loss crosses 1.0, scaled", "crossed smoothed loss 1.0 at step 224", 224, 0, SUM, "step_loss_below_1", "scaled"),
    SeedClaim(TRAINING, "step smoothed loss crosses 1.0, unscaled", "versus 424 for unscaled", 424, 0, SUM, "step_loss_below_1", "unscaled"),
    RatioClaim(TRAINING, "loss-1.0 step ratio, unscaled / scaled", "roughly 2x slower", 424 / 224, 2, SUM, "step_loss_below_1"),
    SeedClaim(TRAINING, "step smoothed loss crosses 0.1, scaled", "and 0.1 at step 436", 436, 0, SUM, "step_loss_below_0p1", "scaled"),
    SeedClaim(TRAINING, "step smoothed loss crosses 0.1, unscaled", "versus 822", 822, 0, SUM, "step_loss_below_0p1", "unscaled"),
    RatioClaim(TRAINING, "loss-0.1 step ratio, unscaled / scaled", "roughly twice as long to every loss milestone", 822 / 436, 2, SUM, "step_loss_below_0p1"),
    SeedClaim(TRAINING, "plateau start (step), unscaled", "between roughly steps 530", 530, 0, SUM, "plateau_start", "unscaled"),
    SeedClaim(TRAINING, "plateau end (step), unscaled", "and 820", 820, 0, SUM, "plateau_end", "unscaled"),
    SeedClaim(TRAINING, "plateau level (loss), unscaled", "a plateau near loss 0.3", 0.3, 1, SUM, "plateau_level", "unscaled"),
    SeedClaim(TRAINING, "final smoothed loss, scaled", "versus 0.00562", 0.00562, 5, SUM, "final_loss", "scaled"),
    SeedClaim(TRAINING, "final smoothed loss, unscaled", "finished at 0.01374", 0.01374, 5, SUM, "final_loss", "unscaled"),
    RatioClaim(TRAINING, "final loss ratio, unscaled / scaled", "about 2.4 times higher", 0.01374 / 0.00562, 2, SUM, "final_loss"),
    SeedClaim(TRAINING, "eval accuracy (2000 held-out), scaled", "Both models reached 100.0% eval accuracy", 1.0, 3, SUM, "eval_accuracy", "scaled"),
    SeedClaim(TRAINING, "eval accuracy (2000 held-out), unscaled", "Both models reached 100.0% eval accuracy", 1.0, 3, SUM, "eval_accuracy", "unscaled"),
)

CONDENSATION_CLAIMS: tuple[Claim, ...] = (
    IdentityClaim(SMALL_HEAD, "2 ln n at n = 256", "about 11 for n = 256 keys", 11, 0, 2 * math.log(256)),
    CheckClaim(SMALL_HEAD, "unscaled rows unsaturated (max weight < 0.5) while d_k <= 2 ln n", "stay below the softmax condensation threshold ... whenever d_k <~ 2 ln n", "every n", "unsaturated_below_2ln_n"),
    IdentityClaim(SMALL_HEAD, "n with 2 ln n = 4, e^2", "at d_k = 4, saturation would require attending over fewer than about 7 keys", 7, 0, math.exp(2)),
    CheckClaim(SMALL_HEAD, "largest n whose d_k = 4 rows saturate (max weight >= 0.5)", "at d_k = 4, saturation would require attending over fewer than about 7 keys", "< 7 (about)", "saturating_n_at_dk4", kind="measured"),
)
# fmt: on

TOP_LOGIT = "000: the top logit"
MODEL_WIDTH = "000: per-head vs model width"
FOLDING = "000: folding the factor into W_q"
FAILURES = "000: failure modes at the boundaries"
COMPANION_CSV = "08_companion_claims.csv"


def _companion(section, quantity, quote, article, decimals, measured):
    """A claim on the ``value`` (with ``sem``) of the 08 row whose quantity is ``measured``."""
    return CellClaim(
        section,
        quantity,
        quote,
        article,
        decimals,
        COMPANION_CSV,
        "value",
        "sem",
        {"quantity": measured},
    )


# Article 000, measured by experiment 08 (n = 512 keys, d_k = 64, d_model = 512, 8 heads).
# fmt: off
COMPANION_CLAIMS: tuple[Claim, ...] = (
    IdentityClaim(TOP_LOGIT, "sqrt(2 ln n) at n = 512", "For n = 512 that is about 3.5 sigma", 3.5, 1, math.sqrt(2 * math.log(512))),
    _companion(TOP_LOGIT, "top logit above the row mean, in row std", "roughly sigma sqrt(2 ln n) above the mean ... about 3.5 sigma", 3.5, 1, "standardized_top_gap"),
    _companion(TOP_LOGIT, "top logit above the row mean at d_k = 64", "the top logit exceeds the mean by nearly 28", 28, 0, "absolute_top_gap"),
    _companion(TOP_LOGIT, "runner-up logit below the top", "the rest are e^-28 or smaller", 28, 0, "top_two_gap"),
    CheckClaim(TOP_LOGIT, "largest probability, unscaled, d_k = 64", "the largest probability is within a rounding error of 1", "within a rounding error of 1", "near_one_hot"),
    IdentityClaim(MODEL_WIDTH, "divisor sqrt(d_k), d_k = 64", "so the divisor is 8", 8, 0, math.sqrt(64)),
    IdentityClaim(MODEL_WIDTH, "divisor sqrt(d_model), d_model = 512", "rather than roughly 22.6", 22.6, 1, math.sqrt(512)),
    IdentityClaim(MODEL_WIDTH, "over-flattening factor sqrt(512 / 64)", "over-flatten the logits by a factor of sqrt(8)", 2.83, 2, math.sqrt(8)),
    CheckClaim(FOLDING, "scaling W_q alone by d_k^-1/4 is algebraically identical", "scaling W_q by d_k^-1/4 ... is algebraically identical", "identical logits", "fold_quarter_identical"),
    CheckClaim(FOLDING, "the W_q gradient is scaled by the same constant", "the gradient with respect to W_q is scaled by the same constant", "same constant as W_q", "fold_gradient_constant"),
)

FAILURE_CLAIMS: tuple[Claim, ...] = (
    CheckClaim(FAILURES, "a fully masked row filled with -inf gives NaN", "every logit -inf; the softmax then computes 0/0 and returns NaN", "NaN in every dtype", "minus_inf_fully_masked_nan"),
    CheckClaim(FAILURES, "-1e9 as mask value in float16", "-10^9 in 16-bit arithmetic ... behaves as -inf anyway", "same as -inf", "float16_minus_1e9_is_minus_inf"),
    CheckClaim(FAILURES, "-1e9 as mask value in float32: masked weights", "in 32-bit it produces a probability of exactly zero only by underflow", "exactly 0", "float32_minus_1e9_exact_zero"),
    CheckClaim(FAILURES, "largest logit at which a float16 softmax first overflows", "will overflow for logits above roughly 11", "roughly 11", "float16_overflow_logit", kind="measured"),
)
# fmt: on

WIDTHS = "A Training Demo, across widths (experiment 10)"
# fmt: off
WIDTHS_CLAIMS: tuple[Claim, ...] = (
    CheckClaim(WIDTHS, "unscaled at large d_k: routing frozen near chance, payload still learned", "degenerates into a hard gather with frozen, random routing but a still-learnable payload through W_V", "frozen routing, learnable payload", "frozen_routing"),
    CheckClaim(WIDTHS, "... hence a silent quality loss: held-out accuracy below scaled's", "the failure mode is a silent quality loss rather than a crash", "accuracy loss, no crash", "silent_quality_loss"),
    CheckClaim(WIDTHS, "training slow-down follows the static Jacobian ratio (sign at every width)", "the softmax Jacobian ... crossing below the scaled curve between d_k = 256 and 1024", "unscaled slower where its Jacobian is smaller", "slowdown_follows_jacobian"),
    CheckClaim(WIDTHS, "d_k = 1: scaled and unscaled runs identical", "At d_k = 1 the two variants are literally identical", "identical", "identical_at_dk1"),
    CheckClaim(WIDTHS, "1/d_k (muP): best learning rate moves less across widths than with 1/sqrt(d_k)", "prescribes ... which is one ingredient of zero-shot hyperparameter transfer across model widths", "inv_d's optimum moves less", "mup_lr_transfer"),
)
# fmt: on
