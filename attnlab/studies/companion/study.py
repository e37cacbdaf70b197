"""Study companion (experiment 08): the numbers of article 000, the companion article,
measured. Declared here: its one CSV (a row per claim and quantity) with the rule
``make verify`` compares each column by, the claims it judges and its place in the report."""

from __future__ import annotations

import math

from attnlab.claims import CellClaim, CheckClaim, Claim, IdentityClaim
from attnlab.harness.declaration import BEYOND, EXACT, KEY, SE, Output, Study, mean

COMPANION_CSV = "08_companion_claims.csv"

TABLE = Output(
    "08_companion_claims.py",
    {
        "claim": KEY,
        "quantity": KEY,
        "setting": KEY,
        "value": mean("sem"),
        "sem": SE,
        "predicted": EXACT,
    },
    out_flag="--out",
)


TOP_LOGIT = "000: the top logit"
MODEL_WIDTH = "000: per-head vs model width"
FOLDING = "000: folding the factor into W_q"


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


# fmt: off
# Article 000, measured by experiment 08 (n = 512 keys, d_k = 64, d_model = 512, 8 heads).
CLAIMS: tuple[Claim, ...] = (
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
# fmt: on


STUDY = Study(
    "companion",
    8,
    {
        COMPANION_CSV: TABLE,
    },
    claims=CLAIMS,
    part=BEYOND,
)
