"""The articles' claims: their types, each with its source and kind, and the training
demo's claims, which two studies judge (04's reading and 09's fits).

Article 004 ("Can Attention Work Without the sqrt(d) Scaling?") and its companion 000
("Why Scaled Dot-Product Attention Divides by the Square Root of the Key Dimension") are
quoted one claim per quantitative statement, each study's in its declaration
(``attnlab/studies/NAME/study.py``: ``Study.claims``, beside the CSVs they read);
``results/REPORT.md`` judges each by the rule of ``attnlab.harness.verdicts`` that its
type names. Every claim has a *kind*:

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
from dataclasses import dataclass, field, replace
from typing import Literal

Kind = Literal["measured", "identity", "qualitative"]

#: The combined-standard-error multiple of the tolerance rules.
SEM_MULTIPLE = 4.0
#: A seed-range verdict also needs our median within this factor of the article's number.
MEDIAN_FACTOR = 1.5
#: "about", "roughly": a measured number within this relative distance of the article's.
ABOUT = 0.10


@dataclass(frozen=True)
class _Quote:
    """Where a claim stands in the article: its section, what it is about (``quantity``)
    and the words that state it."""

    section: str
    quantity: str
    quote: str


@dataclass(frozen=True)
class _Printed(_Quote):
    """A claim of a number the article prints with ``decimals`` decimals."""

    article: float
    decimals: int

    @property
    def article_text(self) -> str:
        """The article's number as printed."""
        return f"{self.article:.{self.decimals}f}"


@dataclass(frozen=True)
class CellClaim(_Printed):
    """A number the article measured, and the CSV cell (mean and SEM) that measures ours."""

    csv: str
    mean_column: str
    sem_column: str
    where: dict[str, object] = field(default_factory=dict)
    kind: Kind = "measured"

    @property
    def half_unit(self) -> float:
        """Half a unit of the article's last printed digit."""
        return 0.5 * 10.0 ** (-self.decimals)


@dataclass(frozen=True)
class BoundClaim(_Quote):
    """ "|x| <= bound on every row with ``low <= by <= high``": ``x`` and its SE in
    ``column``/``se_column`` (the decisive, high-precision estimate) and in
    ``headline``/``headline_se`` (the article's sample size, shown beside it)."""

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
class SeedClaim(_Printed):
    """A number from the article's single training run, against our spread over seeds of
    ``column`` for ``variant``."""

    csv: str
    column: str
    variant: str
    kind: Kind = "measured"


@dataclass(frozen=True)
class RatioClaim(_Printed):
    """A ratio ``numerator / denominator / divide_by`` of one column between two variants,
    paired by seed, against the article's number."""

    csv: str
    column: str
    numerator: str = "unscaled"
    denominator: str = "scaled"
    divide_by: float = 1.0
    kind: Kind = "measured"


@dataclass(frozen=True)
class CheckClaim(_Quote):
    """A statement about a curve or a table, judged by the study's ``CHECKS[check]``."""

    article: str
    check: str
    kind: Kind = "qualitative"


@dataclass(frozen=True)
class IdentityClaim(_Printed):
    """Arithmetic the article states: its number and the exact value of the same formula."""

    value: float
    kind: Kind = "identity"


Claim = CellClaim | BoundClaim | SeedClaim | RatioClaim | CheckClaim | IdentityClaim

#: The section of article 004 the training claims come from.
TRAINING = "A Training Demo"
#: The training claims are judged on whichever summary CSV a reading of the demo produced
#: (04's, or a fit's prediction): ``bind`` gives them one.
DEMO_CSV = ""


# fmt: off
TRAINING_CLAIMS: tuple[Claim, ...] = (
    SeedClaim(TRAINING, "W_Q gradient norm at step 0, scaled", "0.1085 scaled", 0.1085, 4, DEMO_CSV, "grad_wq_step0", "scaled"),
    SeedClaim(TRAINING, "W_Q gradient norm at step 0, unscaled", "versus 1.0610 unscaled", 1.0610, 4, DEMO_CSV, "grad_wq_step0", "unscaled"),
    RatioClaim(TRAINING, "W_Q gradient ratio at step 0, unscaled / scaled", "about 9.8 times larger", 9.8, 1, DEMO_CSV, "grad_wq_step0"),
    IdentityClaim(TRAINING, "the divisor's share of the ratio, sqrt(256)", "multiplies dz/dW_Q by sqrt(256) = 16", 16, 0, math.sqrt(256)),
    RatioClaim(TRAINING, "saturation factor: gradient ratio / 16", "saturation claws back just a factor of about 0.61", 0.61, 2, DEMO_CSV, "grad_wq_step0", divide_by=16.0),
    IdentityClaim(TRAINING, "chance accuracy, 1 / 32 value tokens", "chance is 3.125%", 0.03125, 5, 1 / 32),
    SeedClaim(TRAINING, "step smoothed loss crosses 1.0, scaled", "crossed smoothed loss 1.0 at step 224", 224, 0, DEMO_CSV, "step_loss_below_1", "scaled"),
    SeedClaim(TRAINING, "step smoothed loss crosses 1.0, unscaled", "versus 424 for unscaled", 424, 0, DEMO_CSV, "step_loss_below_1", "unscaled"),
    RatioClaim(TRAINING, "loss-1.0 step ratio, unscaled / scaled", "roughly 2x slower", 424 / 224, 2, DEMO_CSV, "step_loss_below_1"),
    SeedClaim(TRAINING, "step smoothed loss crosses 0.1, scaled", "and 0.1 at step 436", 436, 0, DEMO_CSV, "step_loss_below_0p1", "scaled"),
    SeedClaim(TRAINING, "step smoothed loss crosses 0.1, unscaled", "versus 822", 822, 0, DEMO_CSV, "step_loss_below_0p1", "unscaled"),
    RatioClaim(TRAINING, "loss-0.1 step ratio, unscaled / scaled", "roughly twice as long to every loss milestone", 822 / 436, 2, DEMO_CSV, "step_loss_below_0p1"),
    SeedClaim(TRAINING, "plateau start (step), unscaled", "between roughly steps 530", 530, 0, DEMO_CSV, "plateau_start", "unscaled"),
    SeedClaim(TRAINING, "plateau end (step), unscaled", "and 820", 820, 0, DEMO_CSV, "plateau_end", "unscaled"),
    SeedClaim(TRAINING, "plateau level (loss), unscaled", "a plateau near loss 0.3", 0.3, 1, DEMO_CSV, "plateau_level", "unscaled"),
    SeedClaim(TRAINING, "final smoothed loss, scaled", "versus 0.00562", 0.00562, 5, DEMO_CSV, "final_loss", "scaled"),
    SeedClaim(TRAINING, "final smoothed loss, unscaled", "finished at 0.01374", 0.01374, 5, DEMO_CSV, "final_loss", "unscaled"),
    RatioClaim(TRAINING, "final loss ratio, unscaled / scaled", "about 2.4 times higher", 0.01374 / 0.00562, 2, DEMO_CSV, "final_loss"),
    SeedClaim(TRAINING, "eval accuracy (2000 held-out), scaled", "Both models reached 100.0% eval accuracy", 1.0, 3, DEMO_CSV, "eval_accuracy", "scaled"),
    SeedClaim(TRAINING, "eval accuracy (2000 held-out), unscaled", "Both models reached 100.0% eval accuracy", 1.0, 3, DEMO_CSV, "eval_accuracy", "unscaled"),
)
# fmt: on


def bind(claims: tuple[Claim, ...], csv: str) -> tuple[Claim, ...]:
    """``claims`` judged on the CSV ``csv`` (every claim that reads a CSV)."""
    return tuple(replace(c, csv=csv) if hasattr(c, "csv") else c for c in claims)
